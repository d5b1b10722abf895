"""The generator's vocabulary: op forms (one way to apply an op), the pool of input tensors, and `Settings`,
everything that decides a rule set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from taso import ops

Shape = tuple[int, ...]
Splits = tuple[tuple[int, tuple[int, ...]], ...]
"""Where a value may be split: (axis, part sizes) left by the concat it descends from (TASO's split tree)."""
Sig = tuple[Shape, str, Splits]
"""What decides whether a form applies to a value: shape, kind ('a' activation, 'w' weight or constant), splits."""
NodeSpec = tuple[int, tuple[int, ...]]
"""A node of a compact graph: (form index, argument value ids); pool inputs are ids 0..n-1, outputs follow."""

ACTIVATION, WEIGHT = "a", "w"
MAX_ARITY = 3
"""Most arguments of a form (a Conv with a bias); a spooled row is (parent, form, arguments padded with -1)."""
ROW = 2 + MAX_ARITY
MIN_IMAGE = 2
"""Convs and pools must leave images at least this wide: on a single pixel every stride and padding reads the
same taps, and the coincidences that follow (stride 1 = stride 2) hold for no real model."""


# ---- settings -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputClass:
    """Interchangeable pool tensors: ``count`` tensors named ``prefix0``, ``prefix1``, ... of one shape and kind."""

    prefix: str
    shape: Shape
    kind: str  # "activation" or "weight"
    count: int
    splits: Splits = ()
    """Where these tensors may be split, as if each were a concat of these parts: an input that stands for
    a merged op's output (a conv over concatenated kernels), so rules about its Split can be found."""

    def as_dict(self) -> dict:
        d = {"prefix": self.prefix, "shape": list(self.shape), "kind": self.kind, "count": self.count}
        return {**d, "splits": {str(a): list(v) for a, v in self.splits}} if self.splits else d


@dataclass(frozen=True)
class Form:
    """One way to apply an op: ``attrs`` gives the attributes for argument signatures, or None where it does not
    apply (shapes are then checked by `taso.ops.infer`)."""

    name: str
    op: str
    arity: int
    attrs: Callable[[Sequence[Sig]], dict | None]
    commutative: bool = False
    doc: str = ""
    cut: str = "parts"
    """For a Split: cut at every part boundary (``parts``), or in two, keeping the leading parts together
    (``head``) or the trailing ones (``tail``), which may then be split again: a split of a split."""
    target: Callable[[Sig], tuple[int, ...] | None] | None = None
    """For a Reshape or an Expand: its target from its argument's signature (the node's second input, a constant), None
    where the form does not apply."""
    taso: bool = True
    """Whether TASO's generator had this form of one of its ops (`TASO_FORMS`); a batched MatMul it had not."""


def _rank(s: Sig) -> int:
    return len(s[0])


def _conv(stride: int, same: bool, bias: bool = False) -> Callable[[Sequence[Sig]], dict | None]:
    def attrs(sigs: Sequence[Sig]) -> dict | None:
        (xs, xk, _), (ws, wk, _) = sigs[:2]
        if bias and (sigs[2][1] != WEIGHT or sigs[2][0] != ws[:1]):  # one bias per output channel
            return None
        if len(xs) != 4 or len(ws) != 4 or xk != ACTIVATION or wk != WEIGHT or xs[1] % ws[1]:
            return None
        group, (kh, kw) = xs[1] // ws[1], ws[2:]
        if group not in (1, xs[1]) or ws[0] % group or (same and not (kh % 2 and kw % 2)):
            return None
        pads = (kh // 2, kw // 2, kh // 2, kw // 2) if same else (0, 0, 0, 0)
        return {
            "kernel_shape": (kh, kw),
            "strides": (stride, stride),
            "pads": pads,
            "dilations": (1, 1),
            "group": group,
        }

    return attrs


def _pool(extra: dict) -> Callable[[Sequence[Sig]], dict | None]:
    def attrs(sigs: Sequence[Sig]) -> dict | None:
        s = sigs[0]
        if _rank(s) != 4 or s[1] != ACTIVATION:
            return None
        return {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), **extra}

    return attrs


def _enlarge(sigs: Sequence[Sig]) -> dict | None:
    shape, kind, _ = sigs[0]
    if len(shape) != 4 or kind != WEIGHT or shape[2:] == (3, 3) or any(d > 3 or d % 2 == 0 for d in shape[2:]):
        return None
    return {"kernel_shape": (3, 3)}


def _concat(axis: int) -> Callable[[Sequence[Sig]], dict | None]:
    return lambda sigs: {"axis": axis} if _rank(sigs[0]) == _rank(sigs[1]) > axis else None


def _split(name: str, axis: int, doc: str, cut: str = "parts") -> Form:
    least = 2 if cut == "parts" else 3  # cutting two parts in two is the plain split

    def attrs(sigs: Sequence[Sig]) -> dict | None:
        return {"axis": axis} if len(dict(sigs[0][2]).get(axis, ())) >= least else None

    return Form(name, "Split", 1, attrs, doc=doc, cut=cut)


def _cut(form: Form, sig: Sig, axis: int) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """A Split form's sizes on a value, and the parts each output may be split into again (empty: none)."""
    parts = dict(sig[2])[axis]
    if form.cut == "head":
        return (sum(parts[:-1]), parts[-1]), [parts[:-1], ()]
    if form.cut == "tail":
        return (parts[0], sum(parts[1:])), [(), parts[1:]]
    return parts, [()] * len(parts)


def _slice(name: str, axis: int, head: bool) -> Form:
    """A Slice of the first part of a value (``head``) or of the rest, along an axis where the value may be split
    (the concat it descends from, a weight of merged columns): a constant window as exporters write one."""

    def attrs(sigs: Sequence[Sig]) -> dict | None:
        shape, _, splits = sigs[0]
        parts = dict(splits).get(axis, ())
        if len(parts) < 2:
            return None
        lo, hi = (0, parts[0]) if head else (parts[0], shape[axis])
        return {"starts": (lo,), "ends": (hi,), "axes": (axis,), "steps": (1,)}

    part = "first part" if head else "parts after the first"
    return Form(name, "Slice", 1, attrs, doc=f"the {part} along axis {axis}", taso=False)


def _gather(axis: int, indices: int | tuple[int, ...]) -> Callable[[Sequence[Sig]], dict | None]:
    """Gather by constant indices along ``axis`` of a tensor of rank 2 or more, where they lie within it."""

    def attrs(sigs: Sequence[Sig]) -> dict | None:
        shape = sigs[0][0]
        if len(shape) < 2 or not all(i < shape[axis] for i in (indices if isinstance(indices, tuple) else (indices,))):
            return None
        return {"axis": axis, "indices": indices}

    return attrs


def static_data(form: Form, sigs: Sequence[Sig], attrs: dict) -> np.ndarray | None:
    """The constant a form's node reads after its arguments: a Split's sizes, a Reshape's target; else None."""
    if form.op == "Split":
        return np.array(_cut(form, sigs[0], attrs["axis"])[0], dtype=np.int64)
    if form.target is not None:
        return np.array(form.target(sigs[0]), dtype=np.int64)
    return None


def _gemm(trans_b: int, bias: bool) -> Callable[[Sequence[Sig]], dict | None]:
    """Gemm of an activation matrix by a weight matrix (transposed where ``trans_b``), with a weight vector
    over the columns where ``bias``: the fully connected layer as exporters write it."""

    def attrs(sigs: Sequence[Sig]) -> dict | None:
        (a, ak, _), (b, bk, _) = sigs[:2]
        if len(a) != 2 or len(b) != 2 or ak != ACTIVATION or bk != WEIGHT:
            return None
        if bias and (sigs[2][1] != WEIGHT or sigs[2][0] != (b[0] if trans_b else b[1],)):
            return None
        return {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": trans_b}

    return attrs


def _rows(s: Sig) -> tuple[int, ...] | None:
    """[B, S, K] as the [B*S, K] matrix of its rows (-1 for the product, which onnxruntime infers)."""
    return (-1, s[0][-1]) if len(s[0]) == 3 and s[1] == ACTIVATION else None


def _batch(s: Sig) -> tuple[int, ...] | None:
    """[M, N] back to [2, M/2, N]: a batch of two regrouped from its rows (the pool's 3-D activations have a
    batch of 2, and the sizes are mapped to a model's when a rule is applied)."""
    return (2, s[0][0] // 2, s[0][1]) if len(s[0]) == 2 and s[0][0] % 2 == 0 and s[1] == ACTIVATION else None


def _reshape(name: str, target: Callable[[Sig], tuple[int, ...] | None], doc: str) -> Form:
    return Form(
        name, "Reshape", 1, lambda s: None if target(s[0]) is None else {"allowzero": 0}, doc=doc, target=target
    )


def _view_forms() -> list[Form]:
    """Unsqueeze of a matrix at its first or last axis, Squeeze of that axis where it is 1, and Expand of a
    row (1, N) to two rows: the size-1 axes exporters add and drop around a broadcast."""

    def squeeze(a: int) -> Callable[[Sequence[Sig]], dict | None]:
        return lambda s: {"axes": (a,)} if _rank(s[0]) == 3 and s[0][0][a] == 1 else None

    def two_rows(s: Sig) -> tuple[int, ...] | None:
        return (2, s[0][1]) if _rank(s) == 2 and s[0][0] == 1 else None

    return [
        Form("unsqueeze0", "Unsqueeze", 1, lambda s: {"axes": (0,)} if _rank(s[0]) == 2 else None, doc="at axis 0"),
        Form("unsqueeze2", "Unsqueeze", 1, lambda s: {"axes": (2,)} if _rank(s[0]) == 2 else None, doc="at axis 2"),
        Form("squeeze0", "Squeeze", 1, squeeze(0), doc="axis 0 of size 1"),
        Form("squeeze2", "Squeeze", 1, squeeze(2), doc="axis 2 of size 1"),
        Form(
            "expand0",
            "Expand",
            1,
            lambda s: None if two_rows(s[0]) is None else {},
            doc="(1, N) to (2, N)",
            target=two_rows,
        ),
    ]


def _constant(shape: Shape) -> Callable[[Sequence[Sig]], dict | None]:
    return lambda sigs: {"shape": tuple(shape), "dtype": "float32"}


def _elementwise_forms() -> list[Form]:
    """A form for each unary element-wise op of the catalogue, named as the op, at its default attributes, on
    any tensor of rank >= 1: a new activation enters the generator by its catalogue entry alone."""
    return [
        Form(op.name.lower(), op.name, 1, lambda s, a=dict(op.attrs): dict(a) if _rank(s[0]) else None)
        for op in ops.OPS.values()
        if op.elementwise and op.arity == (1, 1)
    ]


def _on_matrix(attrs: dict) -> Callable[[Sequence[Sig]], dict | None]:
    return lambda sigs: dict(attrs) if _rank(sigs[0]) == 2 else None


def _layernorm(sigs: Sequence[Sig]) -> dict | None:
    (xs, xk, _), (gs, gk, _), (bs, bk, _) = sigs
    if len(xs) != 2 or xk != ACTIVATION or gk != WEIGHT or bk != WEIGHT or not gs == bs == xs[1:]:
        return None
    return {"axis": 1, "epsilon": 1e-5}


def _reduction_forms() -> list[Form]:
    """Softmax, LayerNormalization (with its scale and bias, over a matrix's rows), sums and means along one
    axis of a matrix (kept as size 1), and GlobalAveragePool of an image."""
    out = [Form(f"softmax{a}", "Softmax", 1, _on_matrix({"axis": a}), doc=f"along axis {a}") for a in (0, 1)]
    out.append(Form("layernorm", "LayerNormalization", 3, _layernorm, doc="over the last axis, scale and bias"))
    for op in ("ReduceSum", "ReduceMean"):
        out += [
            Form(f"{op.lower()}{a}", op, 1, _on_matrix({"axes": (a,), "keepdims": 1}), doc=f"axis {a}") for a in (0, 1)
        ]
    gap = Form("gap", "GlobalAveragePool", 1, lambda s: {} if _rank(s[0]) == 4 else None, doc="of an image")
    return [*out, gap]


FORMS: dict[str, Form] = {
    f.name: f
    for f in [
        Form("matmul", "MatMul", 2, lambda s: {} if _rank(s[0]) == _rank(s[1]) == 2 else None, doc="2-D matmul"),
        Form("add", "Add", 2, lambda s: {} if s[0][0] == s[1][0] and _rank(s[0]) else None, True, "same shapes"),
        Form("mul", "Mul", 2, lambda s: {} if s[0][0] == s[1][0] and _rank(s[0]) else None, True, "same shapes"),
        Form("smul", "Mul", 2, lambda s: {} if _rank(s[0]) and s[1][0] == () else None, doc="by a 0-d scalar"),
        Form("sub", "Sub", 2, lambda s: {} if s[0][0] == s[1][0] and _rank(s[0]) else None, doc="same shapes"),
        Form("div", "Div", 2, lambda s: {} if s[0][0] == s[1][0] and _rank(s[0]) else None, doc="same shapes"),
        *_elementwise_forms(),
        Form("relu6", "Clip", 1, lambda s: {"min": 0.0, "max": 6.0} if _rank(s[0]) else None, doc="Clip(0, 6)"),
        Form("conv_s1_same", "Conv", 2, _conv(1, True), doc="stride 1, SAME padding; group 1 or depthwise"),
        Form("conv_s1_valid", "Conv", 2, _conv(1, False), doc="stride 1, no padding"),
        Form("conv_s2_same", "Conv", 2, _conv(2, True), doc="stride 2, SAME padding"),
        Form("conv_s2_valid", "Conv", 2, _conv(2, False), doc="stride 2, no padding"),
        Form("conv_s1_same_bias", "Conv", 3, _conv(1, True, True), doc="stride 1, SAME padding, with a bias"),
        Form("conv_s1_valid_bias", "Conv", 3, _conv(1, False, True), doc="stride 1, no padding, with a bias"),
        Form("conv_s2_same_bias", "Conv", 3, _conv(2, True, True), doc="stride 2, SAME padding, with a bias"),
        Form("conv_s2_valid_bias", "Conv", 3, _conv(2, False, True), doc="stride 2, no padding, with a bias"),
        Form("avgpool3", "AveragePool", 1, _pool({"count_include_pad": 1}), doc="3x3, stride 1, SAME"),
        Form("maxpool3", "MaxPool", 1, _pool({}), doc="3x3, stride 1, SAME"),
        Form("enlarge3", "Enlarge", 1, _enlarge, doc="zero-pad a weight kernel to 3x3"),
        Form("concat0", "Concat", 2, _concat(0)),
        Form("concat1", "Concat", 2, _concat(1)),
        _split("split0", 0, "at the boundary of the concat it descends from"),
        _split("split1", 1, "at the boundary of the concat it descends from"),
        _split("split1_head", 1, "in two, the leading parts kept together", "head"),
        _split("split1_tail", 1, "in two, the trailing parts kept together", "tail"),
        Form("transpose", "Transpose", 1, lambda s: {"perm": (1, 0)} if _rank(s[0]) == 2 else None),
        Form("ones", "Ones", 0, _constant((2, 4)), doc="shape 2x4"),
        Form("eye", "Eye", 0, _constant((4, 4)), doc="4x4"),
        Form("conv_identity", "ConvIdentity", 0, _constant((4, 1, 3, 3)), doc="depthwise 3x3 identity kernel"),
        Form("pool_kernel", "PoolKernel", 0, _constant((4, 1, 3, 3)), doc="depthwise 3x3 kernel of 1/9"),
        *_reduction_forms(),
        Form(
            "matmul_rows",
            "MatMul",
            2,
            lambda s: {} if _rank(s[0]) == 3 and _rank(s[1]) == 2 and s[1][1] == WEIGHT else None,
            doc="[B, S, K] @ [K, N], a transformer's projection",
            taso=False,
        ),
        Form(
            "bias_add",
            "Add",
            2,
            lambda s: {} if s[0][1] == ACTIVATION and s[1][1] == WEIGHT and s[1][0] == s[0][0][-1:] else None,
            doc="an activation plus a weight vector along its last axis (a bias)",
            taso=False,
        ),
        Form("gemm", "Gemm", 3, _gemm(0, True), doc="A @ B + C, C one value per column"),
        Form("gemm_tb", "Gemm", 2, _gemm(1, False), doc="A @ B^T (transB=1)"),
        Form("gemm_tb_c", "Gemm", 3, _gemm(1, True), doc="A @ B^T + C (transB=1)"),
        _slice("slice0_head", 0, True),
        _slice("slice1_head", 1, True),
        _slice("slice1_tail", 1, False),
        Form("gather0", "Gather", 1, _gather(0, 0), doc="row 0, the axis dropped (a CLS token)", taso=False),
        Form("gather1", "Gather", 1, _gather(1, 0), doc="column 0, the axis dropped", taso=False),
        Form("gather0_swap", "Gather", 1, _gather(0, (1, 0)), doc="rows 1 and 0: indices not in order", taso=False),
        _reshape("rows", _rows, "[B, S, K] to its rows [B*S, K]"),
        _reshape("batch2", _batch, "[M, N] to [2, M/2, N]"),
        *_view_forms(),
    ]
}

TASO_FORMS = tuple(
    f
    for f, form in FORMS.items()
    if ops.TASO in ops.get(form.op).traits and form.taso and not f.endswith("_bias") and form.cut == "parts"
)
"""The forms TASO's generator uses, over its ops (`taso.ops.TASO`; its fused conv+relu is conv followed by relu here; a concat there has two
parts, so the split forms that group three or more parts never apply)."""
BIAS_FORMS = tuple(f for f in FORMS if f.endswith("_bias"))
"""Convs with a bias (``--ops +bias``): exporters write a bias into nearly every Conv (a BatchNorm folds into it),
and a rule over TASO's bias-less convs matches none of those. The shipped store is TASO's set plus these."""

TASO_POOL = (
    InputClass("x", (2, 4), "activation", 3),
    InputClass("w", (4, 4), "weight", 3),
    InputClass("X", (2, 4, 5, 5), "activation", 2),
    InputClass("K", (4, 4, 3, 3), "weight", 2),
    InputClass("Kp", (4, 4, 1, 1), "weight", 1),
    InputClass("Kr", (4, 4, 1, 3), "weight", 1),
    InputClass("Kc", (4, 4, 3, 1), "weight", 1),
    InputClass("D", (4, 1, 3, 3), "weight", 1),
    InputClass("s", (), "weight", 1),
)
"""TASO's kinds of input tensors, at TASO's shapes (2-D 2x4 activations and 4x4 weights, 2x4x5x5 images)."""
BIASES = InputClass("b", (4,), "weight", 2)
"""Added to the default pool when a biased conv form is chosen: two, so that sibling convs with their own biases
can merge."""


@dataclass(frozen=True)
class Settings:
    """Everything that decides the rule set: same settings, same rules."""

    max_ops: int = 3
    forms: tuple[str, ...] = TASO_FORMS
    pool: tuple[InputClass, ...] = TASO_POOL
    seed: int = 0
    constants: tuple[tuple[str, Shape], ...] = ()
    """Shape overrides of the constant forms (ones, eye, conv_identity, pool_kernel)."""
    prune_pairs: bool = True
    """Drop pairs implied by smaller ones, and fold (`taso.fold`) rules that smaller kept rules derive; off,
    every candidate becomes a rule (to check what pruning drops)."""
    extend_all: bool = False
    """Extend every graph, not only each class's representative (no Quartz pruning): to check what it drops."""

    def form_list(self) -> list[Form]:
        shapes = dict(self.constants)
        out = []
        for name in self.forms:
            f = FORMS[name]
            if name in shapes:
                f = Form(f.name, f.op, f.arity, _constant(tuple(shapes[name])), f.commutative, f.doc)
            out.append(f)
        return out

    def as_dict(self) -> dict:
        return {
            "max_ops": self.max_ops,
            "forms": list(self.forms),
            "pool": [c.as_dict() for c in self.pool],
            "constants": {k: list(v) for k, v in self.constants},
            "seed": self.seed,
            "prune_pairs": self.prune_pairs,
            "extend_all": self.extend_all,
        }
