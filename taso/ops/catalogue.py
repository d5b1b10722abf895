"""The operator catalogue: every op subst understands, described once.

Each `OpDef` gives an op's arity, attribute schema (with defaults), shape rule, numpy reference semantics and
how it maps to and from ONNX. Import, export, the generator, fingerprints, the verifier and the cost model all
read this table; an op that is not here is opaque to subst and passes through untouched.

ONNX ops keep their ONNX names and attributes, normalised (defaults filled in, ``auto_pad`` resolved to explicit
pads) so that equal ops compare equal. The TASO-only ops (kernel enlarge, constant generators) have no ONNX op
of their own; they only appear in generated graphs or on weights, and export writes them as the ONNX ops that
compute the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from taso.ir import AttrValue, Dim, TensorType, canonical_attr
from taso.ops import field as ff

Attrs = Mapping[str, AttrValue]
Arrays = Sequence[np.ndarray]
ShapeRule = Callable[[Sequence[TensorType], Attrs, Sequence["np.ndarray | None"], int], tuple[TensorType, ...]]
NumpyRule = Callable[[Arrays, Attrs, int], tuple[np.ndarray, ...]]
Normalizer = Callable[[dict[str, AttrValue], Sequence["TensorType | None"], int], "dict[str, AttrValue] | str"]
FieldRule = Callable[[Arrays, Attrs, int, int], tuple[np.ndarray, ...]]
"""Semantics over Z_p (`taso.field`): (inputs in [0, p), attrs, output count, key) -> outputs in [0, p)."""

REQUIRED = object()


class OpError(ValueError):
    """An op used with inputs or attributes its description does not allow."""


@dataclass(frozen=True)
class Export:
    """How an IR node is written as ONNX: op type, attributes, and constant inputs appended to its inputs."""

    op_type: str
    attrs: dict[str, AttrValue]
    extra_inputs: tuple[np.ndarray, ...] = ()


# ---- traits: what each stage asks of an op, declared on its entry (tinygrad's `GroupOp` sets) ----------------
# A stage derives its op set with `having(trait)`, never from a list of names of its own.

REARRANGES = "rearranges"
"""Tag of an op whose output holds only its inputs' values, moved, and zeros: folding it into a weight cannot
overflow, so a search may leave the folded array to be made when first read (`taso.rewrite.fold_constants`)."""
CONSTANT = "constant"
"""A zero-input op making a fixed tensor whose ``shape`` attribute a rewrite recomputes from the model's dims."""
ELEMENTWISE = "elementwise"
"""Each output element depends on the inputs' elements at its own position only (``OpDef.elementwise``)."""
COMMUTATIVE = "commutative"
"""The inputs may be swapped (``OpDef.commutative``); the matcher and the generator expand the swap."""
FIELD_EXACT = "field-exact"
"""Its semantics over Z_p (`taso.field`) is its real semantics mod p (a polynomial with rational coefficients),
so a field mismatch of a rule made of such ops refutes it (`taso.precheck`). Not for keyed random stand-ins
(Relu, MaxPool) nor for ops that refuse the field."""
BATCH_POLYMORPHIC = "batch-polymorphic"
"""Applied to a stack of matrices (weights broadcast) it equals the stack of its per-matrix results, with
``axis``/``perm`` shifted past the stack's axes: a 2-D rule over such ops is lifted to any rank
(`taso.rules.lifted`)."""
PLANEWISE = "planewise"
"""On an NCHW tensor it maps each (image, channel) plane on its own: a batch of such tensors may be folded into
the images (`taso.generate._field_batch`), and a split along axis 0 or 1 passes through."""
WINDOWED = "windowed"
"""Slides a window over an image's spatial dims: generated graphs must leave images of at least
`taso.generate.MIN_IMAGE` pixels."""
TASO = "taso"
"""One of the ops of TASO's generator (`taso.generate.TASO_FORMS`): ops added later stay out of the default rule
set, so adding one leaves the shipped store as it is."""
EPILOGUE = "epilogue"
"""onnxruntime fuses it into the Conv, MatMul or Gemm whose output it consumes (`taso.cost.units`)."""
PRODUCT_EPILOGUE = "product-epilogue"
"""onnxruntime fuses it into a MatMul or Gemm whose output it consumes (FusedMatMul + BiasSoftmax, Gemm +
SkipLayerNormalization on the CUDA provider), though not into a Conv."""
SKIP_EPILOGUE = "skip-epilogue"
"""onnxruntime fuses it with the Add whose output it consumes (SkipLayerNormalization)."""
VIEW = "view"
"""onnxruntime runs it as a view of its input (no copy, no kernel) when the input is an intermediate value."""

ONNX_TRAITS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("Sub", "Div", "Erf", "Sqrt", "Pow", "Clip"), frozenset({EPILOGUE})),
    **dict.fromkeys(("Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"), frozenset({VIEW})),
}
"""What subst knows of ONNX ops it does not model (they stay opaque): only how onnxruntime runs them, which the
cost model's units need. An op modelled later moves its traits to its catalogue entry."""


@dataclass(frozen=True)
class OpDef:
    """Everything subst knows about one operator."""

    name: str
    arity: tuple[int, int]
    """Fewest and most inputs (optional trailing inputs make them differ)."""
    attrs: Mapping[str, object]
    """Attribute name -> default (``REQUIRED`` when it has none)."""
    infer: ShapeRule
    compute: NumpyRule
    doc: str
    outputs: int | None = 1
    """Number of outputs; ``None`` when the node decides (Split)."""
    static_inputs: tuple[int, ...] = ()
    """Inputs whose *values* the shape rule needs (Reshape's shape, Split's sizes)."""
    commutative: bool = False
    elementwise: bool = False
    min_opset: int = 13
    normalize: Normalizer | None = None
    """Extra ONNX -> IR attribute normalisation; returns a reason string to decline the node."""
    export: Callable[[Attrs, Sequence[TensorType]], Export] | None = None
    """IR -> ONNX; default: an ONNX node of the same name and attributes."""
    onnx: bool = True
    """Whether ONNX has an op of this name that import maps onto this description."""
    tags: frozenset[str] = field(default_factory=frozenset)
    """Traits (the constants above) each stage reads through `having`."""
    field: FieldRule | None = None
    """Finite-field semantics where ``compute`` followed by ``% p`` is not right (non-linear ops, division)."""
    fuses: frozenset[str] = frozenset()
    """Traits of the consumers onnxruntime fuses into this op's kernel (`taso.cost.EPILOGUES`)."""
    no_spec: str = ""
    """Why no spec under specs/ models this op, where none does: rules using it stay unknown (a test holds every
    op to a spec or to this reason)."""

    @property
    def traits(self) -> frozenset[str]:
        """Its tags with its flags: what `having` matches."""
        flags = {ELEMENTWISE: self.elementwise, COMMUTATIVE: self.commutative}
        return self.tags | {t for t, on in flags.items() if on}

    @property
    def exportable(self) -> bool:
        """Whether export can write it: an ONNX op of its name, or an export rule (others must be folded)."""
        return self.onnx or self.export is not None

    def to_onnx(self, attrs: Attrs, in_types: Sequence[TensorType]) -> Export:
        if self.export is not None:
            return self.export(attrs, in_types)
        # Defaults are left out: valid in every opset >= 13, including ones before an attribute existed.
        defaults = {k: canonical_attr(v) for k, v in self.attrs.items() if v is not REQUIRED}  # type: ignore[arg-type]
        return Export(self.name, {k: v for k, v in attrs.items() if defaults.get(k, REQUIRED) != canonical_attr(v)})

    def from_onnx(
        self, onnx_attrs: dict[str, AttrValue], in_types: Sequence[TensorType | None], n_inputs: int, opset: int
    ) -> dict[str, AttrValue] | str:
        """Normalised IR attributes for an ONNX node of this op, or the reason it stays opaque."""
        if opset < self.min_opset:
            return f"{self.name} needs opset {self.min_opset}"
        if not self.arity[0] <= n_inputs <= self.arity[1]:
            return f"{self.name} with {n_inputs} inputs"
        attrs = dict(onnx_attrs)
        if self.normalize is not None:
            result = self.normalize(attrs, in_types, opset)
            if isinstance(result, str):
                return result
            attrs = result
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            return f"{self.name} attribute(s) {sorted(unknown)} not modelled"
        for k, default in self.attrs.items():
            if k not in attrs:
                if default is REQUIRED:
                    return f"{self.name} needs attribute {k!r}"
                attrs[k] = default
        return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}

    def run(self, inputs: Arrays, attrs: Attrs, n_outputs: int = 1) -> tuple[np.ndarray, ...]:
        return self.compute(inputs, attrs, n_outputs)


OPS: dict[str, OpDef] = {}


def _register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise OpError(f"operator {op.name} described twice")
    OPS[op.name] = op
    return op


def having(trait: str) -> frozenset[str]:
    """Names of the ops with ``trait``, the catalogue's and the opaque ONNX ops' (`ONNX_TRAITS`)."""
    return frozenset(
        [name for name, op in OPS.items() if trait in op.traits]
        + [name for name, traits in ONNX_TRAITS.items() if trait in traits]
    )


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise OpError(f"unknown operator {name!r}; the catalogue has {sorted(OPS)}") from None


# ---- shape helpers ------------------------------------------------------------------------------------------


def _known(types: Sequence[TensorType | None], n: int | None = None) -> list[TensorType]:
    out = [t for t in types if t is not None]
    if len(out) != len(types):
        raise OpError("input type unknown")
    return out


def broadcast_dims(a: Dim, b: Dim) -> Dim:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise OpError(f"cannot broadcast {a} with {b}")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast_shapes(*shapes: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes if s is not None)
    out: list[Dim] = [1] * rank
    for s in shapes:
        assert s is not None
        padded = (1,) * (rank - len(s)) + tuple(s)
        out = [broadcast_dims(x, y) for x, y in zip(out, padded)]
    return tuple(out)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise OpError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _same_dtype(types: Sequence[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise OpError(f"mixed element types {sorted(dtypes)}")
    return types[0].dtype


def _window_dim(size: Dim, k: int, stride: int, pad: int, dilation: int = 1) -> Dim:
    if not isinstance(size, int):
        return None
    out = (size + pad - dilation * (k - 1) - 1) // stride + 1
    if out <= 0:
        raise OpError(f"window of {k} does not fit a dimension of {size}")
    return out


def _spatial_out(x: TensorType, kernel: Sequence[int], attrs: Attrs) -> tuple[Dim, Dim]:
    assert x.shape is not None
    strides, pads = attrs["strides"], attrs["pads"]
    dil = attrs.get("dilations", (1, 1))
    assert isinstance(strides, tuple) and isinstance(pads, tuple) and isinstance(dil, tuple)
    return tuple(  # type: ignore[return-value]
        _window_dim(x.shape[2 + i], int(kernel[i]), int(strides[i]), int(pads[i]) + int(pads[i + 2]), int(dil[i]))
        for i in range(2)
    )


# ---- numpy helpers ------------------------------------------------------------------------------------------


def _windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """A read-only view of shape (N, C, OH, OW, KH, KW) over a padded NCHW array."""
    n, c, h, w = x.shape
    kh, kw = kernel
    oh = (h - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x,
        (n, c, oh, ow, kh, kw),
        (s[0], s[1], s[2] * strides[0], s[3] * strides[1], s[2] * dilations[0], s[3] * dilations[1]),
        writeable=False,
    )


def _pad_hw(x: np.ndarray, pads: Sequence[int], value: float = 0) -> np.ndarray:
    if not any(pads):
        return x
    n, c, h, w = x.shape
    out = np.full((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), value, dtype=x.dtype)
    out[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + w] = x  # np.pad does the same, 10x slower on small arrays
    return out


def conv2d(x: np.ndarray, w: np.ndarray, attrs: Attrs) -> np.ndarray:
    """Grouped, strided, dilated 2-D convolution (cross-correlation, as ONNX defines it) in NCHW."""
    group = int(attrs["group"])  # type: ignore[arg-type]
    m, cg, kh, kw = w.shape
    win = _windows(_pad_hw(x, attrs["pads"]), (kh, kw), attrs["strides"], attrs["dilations"])  # type: ignore[arg-type]
    n, _, oh, ow = win.shape[:4]
    # one matrix product per group, kernel times windows as columns (im2col; a 1x1 conv's input is its own
    # column matrix at batch 1): 10x faster than einsum over the window view on DenseNet's convs, which the
    # float64 reference of the check runs whole
    cols = win.reshape(n, group, cg, oh, ow, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4).reshape(group, cg * kh * kw, -1)
    y = w.reshape(group, m // group, -1) @ cols
    return y.reshape(group, m // group, n, oh, ow).transpose(2, 0, 1, 3, 4).reshape(n, m, oh, ow)


# ---- element-wise -------------------------------------------------------------------------------------------


def _binary_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    return (TensorType(_same_dtype(types), broadcast_shapes(types[0].shape, types[1].shape)),)


def _unary_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    return (types[0],)


def _binary(
    name: str,
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    doc: str,
    tags: set[str],
    fuses: frozenset[str] = frozenset(),
) -> OpDef:
    return _register(
        OpDef(
            name,
            (2, 2),
            {},
            _binary_shape,
            lambda xs, a, n: (fn(xs[0], xs[1]),),
            doc,
            commutative=True,
            elementwise=True,
            tags=frozenset(tags),
            fuses=frozenset(fuses),
        )
    )


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray], doc: str, tags: set[str], no_spec: str = "") -> OpDef:
    return _register(
        OpDef(
            name,
            (1, 1),
            {},
            _unary_shape,
            lambda xs, a, n: (fn(xs[0]),),
            doc,
            elementwise=True,
            field=lambda xs, a, n, key: (ff.keyed(xs[0], key, name),),  # a random function: see taso.field
            tags=frozenset(tags),
            no_spec=no_spec,
        )
    )


_ARITHMETIC = {FIELD_EXACT, BATCH_POLYMORPHIC, EPILOGUE, TASO}
ADD = _binary("Add", np.add, "Element-wise sum with numpy broadcasting.", _ARITHMETIC, frozenset({SKIP_EPILOGUE}))
MUL = _binary(
    "Mul", np.multiply, "Element-wise product with broadcasting; a 0-d second input is TASO's scalar mul.", _ARITHMETIC
)
RELU = _unary("Relu", lambda x: np.maximum(x, 0).astype(x.dtype), "max(x, 0).", {BATCH_POLYMORPHIC, EPILOGUE, TASO})
SIGMOID = _unary(
    "Sigmoid",
    lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "1 / (1 + exp(-x)); over Z_p a keyed random function, as exp has no field counterpart (specs/sigmoid.py).",
    {BATCH_POLYMORPHIC, EPILOGUE},
)
TANH = _unary(
    "Tanh",
    np.tanh,
    "Hyperbolic tangent; over Z_p a keyed random function, as exp has no field counterpart.",
    {BATCH_POLYMORPHIC, EPILOGUE},
    no_spec="no axioms written yet: it would take the element-wise ones of specs/sigmoid.py, and a spec of its "
    "own changes the specs digest every shipped proof records (make store after)",
)


# ---- matrix products ----------------------------------------------------------------------------------------


def _matmul_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    a, b = types
    dtype = _same_dtype(types)
    if a.shape is None or b.shape is None:
        return (TensorType(dtype, None),)
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise OpError("MatMul of a 1-D operand is not modelled")
    k1, k2 = a.shape[-1], b.shape[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise OpError(f"MatMul inner dimensions {k1} and {k2} differ")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    assert batch is not None
    return (TensorType(dtype, (*batch, a.shape[-2], b.shape[-1])),)


def _matmul_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    if any(t is None or t.rank is None or t.rank < 2 for t in types):
        return "MatMul with a 1-D or unranked operand"
    return attrs


MATMUL = _register(
    OpDef(
        "MatMul",
        (2, 2),
        {},
        _matmul_shape,
        lambda xs, a, n: (np.matmul(xs[0], xs[1]),),
        "Matrix product of the last two axes, broadcast over the leading ones.",
        normalize=_matmul_normalize,
        tags=frozenset({FIELD_EXACT, BATCH_POLYMORPHIC, TASO}),
        fuses=frozenset({EPILOGUE, PRODUCT_EPILOGUE}),
    )
)


def _gemm_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    a, b = types[:2]
    if a.rank != 2 or b.rank != 2:
        raise OpError("Gemm needs 2-D operands")
    assert a.shape is not None and b.shape is not None
    m = a.shape[1] if attrs["transA"] else a.shape[0]
    nn = b.shape[0] if attrs["transB"] else b.shape[1]
    return (TensorType(_same_dtype(types), (m, nn)),)


def _gemm(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    a = xs[0].T if attrs["transA"] else xs[0]
    b = xs[1].T if attrs["transB"] else xs[1]
    y = attrs["alpha"] * (a @ b)  # type: ignore[operator]
    if len(xs) > 2:
        y = y + attrs["beta"] * xs[2]  # type: ignore[operator]
    return (y.astype(xs[0].dtype),)


GEMM = _register(
    OpDef(
        "Gemm",
        (2, 3),
        {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
        _gemm_shape,
        _gemm,
        "alpha * op(A) @ op(B) + beta * C, op = optional transpose; the fully connected layer.",
        fuses=frozenset({EPILOGUE, PRODUCT_EPILOGUE}),
        no_spec="imported from ONNX only; no generated rule builds one (alpha, beta and transposes are floats and "
        "flags a rule would have to range over)",
    )
)


# ---- convolution and pooling --------------------------------------------------------------------------------


def _resolve_auto_pad(attrs: dict, x: TensorType | None, kernel: Sequence[int]) -> dict | str:
    """ONNX ``auto_pad`` becomes explicit ``pads`` (static spatial dims needed), so equal convs compare equal."""
    mode = attrs.pop("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode in ("NOTSET", ""):
        return attrs
    if mode == "VALID":
        attrs["pads"] = (0, 0, 0, 0)
        return attrs
    if x is None or x.shape is None or not all(isinstance(d, int) for d in x.shape[2:]):
        return f"auto_pad={mode} on dynamic spatial dims"
    strides = attrs.get("strides", (1, 1))
    dil = attrs.get("dilations", (1, 1))
    begin, end = [], []
    for i, size in enumerate(x.shape[2:]):
        out = -(-int(size) // strides[i])
        total = max(0, (out - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - int(size))
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    attrs["pads"] = (*begin, *end)
    return attrs


def _is_2d(t: TensorType | None) -> bool:
    return t is not None and t.rank == 4


def _conv_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    x, w = types[0], types[1]
    if not _is_2d(x) or not _is_2d(w):
        return "only 2-D convolution (NCHW) is modelled"
    assert w is not None and w.shape is not None
    if not all(isinstance(d, int) for d in w.shape):
        return "Conv kernel of unknown shape"
    kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        return "Conv kernel_shape disagrees with the weight"
    attrs["kernel_shape"] = kernel
    return _resolve_auto_pad(attrs, x, kernel)


def _conv_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x, w = types[0], types[1]
    if x.rank != 4 or w.rank != 4:
        raise OpError("Conv needs 4-D input and kernel")
    assert x.shape is not None and w.shape is not None
    group = int(attrs["group"])  # type: ignore[arg-type]
    c, m, cg = x.shape[1], w.shape[0], w.shape[1]
    if isinstance(c, int) and isinstance(cg, int) and c != cg * group:
        raise OpError(f"Conv input has {c} channels, kernel expects {cg} x {group} groups")
    if isinstance(m, int) and m % group:
        raise OpError(f"Conv output channels {m} not divisible by group {group}")
    if len(types) > 2 and types[2].shape not in (None, (m,)):
        raise OpError("Conv bias must have one value per output channel")
    if tuple(attrs["kernel_shape"]) != tuple(w.shape[2:]):  # type: ignore[arg-type]
        raise OpError("Conv kernel_shape disagrees with the weight")
    oh, ow = _spatial_out(x, w.shape[2:], attrs)  # type: ignore[arg-type]
    return (TensorType(_same_dtype(types), (x.shape[0], m, oh, ow)),)


def _conv(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    y = conv2d(xs[0], xs[1], attrs)
    if len(xs) > 2:
        y = y + xs[2].reshape(1, -1, 1, 1)
    return (y.astype(xs[0].dtype),)


CONV = _register(
    OpDef(
        "Conv",
        (2, 3),
        {"kernel_shape": REQUIRED, "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1},
        _conv_shape,
        _conv,
        "2-D convolution over NCHW with optional bias; pads are (top, left, bottom, right).",
        normalize=_conv_normalize,
        tags=frozenset({FIELD_EXACT, WINDOWED, TASO}),
        fuses=frozenset({EPILOGUE}),
    )
)


def _block_diagonal_shape(
    types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int
) -> tuple[TensorType, ...]:
    w, group = types[0], attrs["group"]
    if w.rank != 4 or w.shape is None:
        raise OpError(f"BlockDiagonal needs a conv kernel (M, C/group, kh, kw), got {w}")
    m, per, kh, kw = w.shape
    if not isinstance(group, int) or group < 2 or (isinstance(m, int) and m % group):
        # group 1 is refused too: that kernel is plain already, and a rewrite to the same conv only spends the
        # search's budget (SqueezeNet's plain convs all matched the rule that makes grouped ones plain)
        raise OpError(f"BlockDiagonal: {m} output channels do not split into {group} groups (of at least 2)")
    return (TensorType(w.dtype, (m, per * group if isinstance(per, int) else None, kh, kw)),)


def _block_diagonal(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    w, group = xs[0], int(attrs["group"])  # type: ignore[call-overload]
    out, per = w.shape[0] // group, w.shape[1]
    dense = np.zeros((w.shape[0], per * group, *w.shape[2:]), w.dtype)
    for k in range(group):
        dense[k * out : (k + 1) * out, k * per : (k + 1) * per] = w[k * out : (k + 1) * out]
    return (dense,)


BLOCK_DIAGONAL = _register(
    OpDef(
        "BlockDiagonal",
        (1, 1),
        {"group": REQUIRED},
        _block_diagonal_shape,
        _block_diagonal,
        "A grouped conv's kernel as a plain conv's: output channels of group k read only input channels of "
        "group k, zeros elsewhere. Weight-only, so always folded; it has no ONNX form.",
        onnx=False,
        tags=frozenset({REARRANGES, FIELD_EXACT}),
    )
)


def _pool_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    if not _is_2d(types[0]):
        return "only 2-D pooling (NCHW) is modelled"
    if attrs.pop("ceil_mode", 0):
        return "pooling with ceil_mode=1 is not modelled"
    if tuple(attrs.pop("dilations", (1, 1))) != (1, 1):
        return "dilated pooling is not modelled"
    if attrs.pop("storage_order", 0):
        return "MaxPool storage_order=1 is not modelled"
    if "kernel_shape" not in attrs:
        return "pooling without kernel_shape"
    return _resolve_auto_pad(attrs, types[0], attrs["kernel_shape"])


def _pool_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.rank != 4:
        raise OpError("pooling needs a 4-D input")
    assert x.shape is not None
    k, pads = attrs["kernel_shape"], attrs["pads"]
    if any(p >= k[i % 2] for i, p in enumerate(pads)):  # type: ignore[index, operator, arg-type]
        # ONNX requires it, and the specs assume it of every window (a window of padding only has no value)
        raise OpError(f"pooling pads {pads} must each be smaller than the kernel {k}")
    oh, ow = _spatial_out(x, attrs["kernel_shape"], attrs)  # type: ignore[arg-type]
    return (TensorType(x.dtype, (x.shape[0], x.shape[1], oh, ow)),)


def _avgpool(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    k, s, p = attrs["kernel_shape"], attrs["strides"], attrs["pads"]
    total = _windows(_pad_hw(x, p), k, s, (1, 1)).sum(axis=(4, 5))  # type: ignore[arg-type]
    if attrs["count_include_pad"]:
        count = np.asarray(k[0] * k[1], dtype=x.dtype)  # type: ignore[index]
    else:
        ones = np.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
        count = _windows(_pad_hw(ones, p), k, s, (1, 1)).sum(axis=(4, 5))  # type: ignore[arg-type]
    return ((total / count).astype(x.dtype),)


def _avgpool_field(xs: Arrays, attrs: Attrs, n: int, key: int) -> tuple[np.ndarray, ...]:
    """Window sums times the modular inverse of each window's count."""
    x = xs[0]
    k, s, p = attrs["kernel_shape"], attrs["strides"], attrs["pads"]
    total = _windows(_pad_hw(x, p), k, s, (1, 1)).sum(axis=(4, 5)) % ff.P  # type: ignore[arg-type]
    if attrs["count_include_pad"]:
        return (total * ff.modinv(k[0] * k[1]) % ff.P,)  # type: ignore[index]
    ones = np.ones((1, 1, *x.shape[2:]), dtype=np.int64)
    count = _windows(_pad_hw(ones, p), k, s, (1, 1)).sum(axis=(4, 5))  # type: ignore[arg-type]
    inverse = np.vectorize(ff.modinv, otypes=[np.int64])(count)
    return (total * inverse % ff.P,)


def _maxpool_field(xs: Arrays, attrs: Attrs, n: int, key: int) -> tuple[np.ndarray, ...]:
    """A keyed random symmetric function of each window; padding is a value outside the field."""
    padded = _pad_hw(xs[0], attrs["pads"], ff.P)  # type: ignore[arg-type]
    win = _windows(padded, attrs["kernel_shape"], attrs["strides"], (1, 1))  # type: ignore[arg-type]
    return (ff.keyed_multiset(win.reshape(*win.shape[:4], -1), key, "MaxPool"),)


def _maxpool(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    padded = _pad_hw(x, attrs["pads"], -np.inf)  # type: ignore[arg-type]
    return (_windows(padded, attrs["kernel_shape"], attrs["strides"], (1, 1)).max(axis=(4, 5)).astype(x.dtype),)  # type: ignore[arg-type]


_POOL_ATTRS = {"kernel_shape": REQUIRED, "strides": (1, 1), "pads": (0, 0, 0, 0)}
AVGPOOL = _register(
    OpDef(
        "AveragePool",
        (1, 1),
        {**_POOL_ATTRS, "count_include_pad": 0},
        _pool_shape,
        _avgpool,
        "2-D average pooling; count_include_pad=0 divides by the number of real (unpadded) elements.",
        normalize=_pool_normalize,
        field=_avgpool_field,
        tags=frozenset({FIELD_EXACT, WINDOWED, PLANEWISE, TASO}),
    )
)
MAXPOOL = _register(
    OpDef(
        "MaxPool",
        (1, 1),
        dict(_POOL_ATTRS),
        _pool_shape,
        _maxpool,
        "2-D max pooling (no indices output).",
        normalize=_pool_normalize,
        field=_maxpool_field,
        tags=frozenset({WINDOWED, PLANEWISE, TASO}),
    )
)


# ---- layout ops ---------------------------------------------------------------------------------------------


def _concat_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    dtype = _same_dtype(types)
    if any(t.shape is None for t in types):
        return (TensorType(dtype, None),)
    rank = len(types[0].shape)  # type: ignore[arg-type]
    if any(t.rank != rank for t in types):
        raise OpError("Concat inputs differ in rank")
    axis = _axis(int(attrs["axis"]), rank)  # type: ignore[arg-type]
    out: list[Dim] = []
    for i in range(rank):
        dims = [t.shape[i] for t in types]  # type: ignore[index]
        if i == axis:
            out.append(sum(dims) if all(isinstance(d, int) for d in dims) else None)  # type: ignore[arg-type]
        else:
            static = {d for d in dims if isinstance(d, int)}
            if len(static) > 1:
                raise OpError(f"Concat inputs differ in dimension {i}: {sorted(static)}")
            out.append(static.pop() if static else dims[0])
    return (TensorType(dtype, tuple(out)),)


CONCAT = _register(
    OpDef(
        "Concat",
        (1, 2**31),
        {"axis": REQUIRED},
        _concat_shape,
        lambda xs, a, n: (np.concatenate(list(xs), axis=int(a["axis"])),),  # type: ignore[arg-type]
        "Join tensors along an axis.",
        tags=frozenset({REARRANGES, FIELD_EXACT, BATCH_POLYMORPHIC, TASO}),
    )
)


def _split_sizes(dim: Dim, attrs: Attrs, sizes: np.ndarray | None, n: int) -> list[Dim]:
    if sizes is not None:
        out = [int(s) for s in sizes]
        if len(out) != n:
            raise OpError(f"Split sizes {out} do not give {n} outputs")
        if isinstance(dim, int) and sum(out) != dim:
            raise OpError(f"Split sizes {out} do not add up to {dim}")
        return out  # type: ignore[return-value]
    if not isinstance(dim, int):
        return [None] * n
    if dim % n:
        raise OpError(f"cannot split {dim} into {n} equal parts")
    return [dim // n] * n


def _split_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.shape is None:
        return tuple(TensorType(x.dtype, None) for _ in range(n))
    axis = _axis(int(attrs["axis"]), len(x.shape))  # type: ignore[arg-type]
    sizes = _split_sizes(x.shape[axis], attrs, consts[1] if len(consts) > 1 else None, n)
    return tuple(TensorType(x.dtype, (*x.shape[:axis], s, *x.shape[axis + 1 :])) for s in sizes)


def _split(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x, axis = xs[0], int(attrs["axis"])  # type: ignore[arg-type]
    sizes = _split_sizes(x.shape[axis], attrs, xs[1] if len(xs) > 1 else None, n)
    return tuple(np.split(x, np.cumsum(sizes[:-1]).astype(int), axis=axis))  # type: ignore[arg-type]


def _split_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    attrs.pop("num_outputs", None)  # the node's output count says the same
    return attrs


SPLIT = _register(
    OpDef(
        "Split",
        (1, 2),
        {"axis": 0},
        _split_shape,
        _split,
        "Cut a tensor along an axis into the node's outputs; sizes from the optional second input, else equal.",
        outputs=None,
        static_inputs=(1,),
        normalize=_split_normalize,
        tags=frozenset({REARRANGES, FIELD_EXACT, BATCH_POLYMORPHIC, TASO}),
    )
)


def _transpose_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    if "perm" not in attrs:
        t = types[0]
        if t is None or t.rank is None:
            return "Transpose without perm on an unranked input"
        attrs["perm"] = tuple(reversed(range(t.rank)))
    return attrs


def _transpose_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x, perm = types[0], tuple(attrs["perm"])  # type: ignore[arg-type]
    if x.shape is None:
        return (x,)
    if sorted(perm) != list(range(len(x.shape))):
        raise OpError(f"perm {perm} is not a permutation of rank {len(x.shape)}")
    return (TensorType(x.dtype, tuple(x.shape[p] for p in perm)),)


TRANSPOSE = _register(
    OpDef(
        "Transpose",
        (1, 1),
        {"perm": REQUIRED},
        _transpose_shape,
        lambda xs, a, n: (np.transpose(xs[0], a["perm"]),),  # type: ignore[arg-type]
        "Permute axes.",
        normalize=_transpose_normalize,
        tags=frozenset({REARRANGES, FIELD_EXACT, BATCH_POLYMORPHIC, TASO}),
    )
)


def _reshape_target(shape: tuple[Dim, ...], target: Sequence[int], allowzero: int) -> tuple[Dim, ...]:
    dims: list[Dim] = [shape[i] if (d == 0 and not allowzero) else int(d) for i, d in enumerate(target)]
    if dims.count(-1) > 1:
        raise OpError("Reshape with more than one -1")
    if -1 in dims:
        known = [d for d in dims if d != -1]
        if all(isinstance(d, int) for d in (*shape, *known)):
            total = int(np.prod(shape, dtype=np.int64))  # type: ignore[arg-type]
            rest = int(np.prod(known, dtype=np.int64))  # type: ignore[arg-type]
            if rest == 0 or total % rest:
                raise OpError(f"cannot reshape {shape} to {tuple(target)}")
            dims[dims.index(-1)] = total // rest
        else:
            dims[dims.index(-1)] = None
    elif all(isinstance(d, int) for d in (*shape, *dims)) and np.prod(shape) != np.prod(dims):  # type: ignore[arg-type]
        raise OpError(f"cannot reshape {shape} to {tuple(target)}")
    return tuple(dims)


def _reshape_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x, target = types[0], consts[1] if len(consts) > 1 else None
    if target is None or x.shape is None:
        rank = types[1].shape[0] if types[1].shape else None
        return (TensorType(x.dtype, None if not isinstance(rank, int) else (None,) * rank),)
    return (TensorType(x.dtype, _reshape_target(x.shape, [int(d) for d in target], int(attrs["allowzero"]))),)  # type: ignore[arg-type]


def _reshape(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    dims = _reshape_target(xs[0].shape, [int(d) for d in xs[1]], int(attrs["allowzero"]))  # type: ignore[arg-type]
    return (xs[0].reshape(dims),)  # type: ignore[arg-type]


RESHAPE = _register(
    OpDef(
        "Reshape",
        (2, 2),
        {"allowzero": 0},
        _reshape_shape,
        _reshape,
        "Give a tensor a new shape read from the second input (0 copies a dimension, -1 infers one).",
        static_inputs=(1,),
        tags=frozenset({REARRANGES, VIEW, FIELD_EXACT}),
        no_spec="only rewritten by PET mutants and the precompute pass, never by a proved rule: a rule over it "
        "would need the target shape as a symbolic list",
    )
)


# ---- normalisation layers -----------------------------------------------------------------------------------


def _no_field(name: str) -> FieldRule:
    """For ops whose division by data-dependent values has no finite-field stand-in: refuse, never guess."""

    def refuse(xs: Arrays, attrs: Attrs, n: int, key: int) -> tuple[np.ndarray, ...]:
        raise OpError(f"{name} has no finite-field semantics (it divides by computed values)")

    return refuse


def _batchnorm_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    if attrs.pop("training_mode", 0):
        return "BatchNormalization in training mode"
    attrs.pop("momentum", None)  # only used in training
    return attrs


def _batchnorm(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x, scale, bias, mean, var = xs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + attrs["epsilon"])  # type: ignore[operator]
    return ((x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)).astype(x.dtype)  # type: ignore[return-value]


BATCHNORM = _register(
    OpDef(
        "BatchNormalization",
        (5, 5),
        {"epsilon": 1e-5},
        _unary_shape,
        lambda xs, a, n: (_batchnorm(xs, a, n),),  # type: ignore[arg-type]
        "Inference batch norm: (x - mean) / sqrt(var + eps) * scale + bias, per channel (axis 1).",
        normalize=_batchnorm_normalize,
        field=_no_field("BatchNormalization"),
        tags=frozenset({EPILOGUE}),
    )
)


def _bn_inverse(scale: np.ndarray, var: np.ndarray, attrs: Attrs) -> np.ndarray:
    return scale / np.sqrt(var + np.asarray(attrs["epsilon"], var.dtype))  # type: ignore[arg-type]


def _per_channel_shape(types: Sequence[TensorType], channels: Dim, what: str) -> None:
    for t in types:
        if t.rank != 1 or (isinstance(channels, int) and t.shape not in (None, (channels,))):
            raise OpError(f"{what} needs one value per channel ({channels}), got {t}")


def _bn_kernel_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    w = types[0]
    if not w.rank:
        raise OpError("BnKernel needs a kernel with an output-channel axis")
    assert w.shape is not None
    _per_channel_shape(types[1:], w.shape[0], "BnKernel")
    return (w,)


def _bn_bias_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    _per_channel_shape(types, types[0].shape[0] if types[0].shape else None, "BnBias")
    return (types[0],)


def _bn_kernel(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    w, scale, var = xs
    return ((w * _bn_inverse(scale, var, attrs).reshape(-1, *(1,) * (w.ndim - 1))).astype(w.dtype),)


def _bn_bias(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    scale, bias, mean, var = xs[:4]
    before = xs[4] - mean if len(xs) > 4 else -mean
    return ((before * _bn_inverse(scale, var, attrs) + bias).astype(scale.dtype),)


BN_KERNEL = _register(
    OpDef(
        "BnKernel",
        (3, 3),
        {"epsilon": REQUIRED},
        _bn_kernel_shape,
        _bn_kernel,
        "A conv kernel with an inference BatchNormalization folded in: (w, scale, var) -> w * scale / "
        "sqrt(var + eps), per output channel. Weight-only, so always folded; it has no ONNX form.",
        onnx=False,
        field=_no_field("BnKernel"),
    )
)


BN_BIAS = _register(
    OpDef(
        "BnBias",
        (4, 5),
        {"epsilon": REQUIRED},
        _bn_bias_shape,
        _bn_bias,
        "The bias of a conv with an inference BatchNormalization folded in: (scale, bias, mean, var[, b]) -> "
        "(b - mean) * scale / sqrt(var + eps) + bias. Weight-only, so always folded; it has no ONNX form.",
        onnx=False,
        field=_no_field("BnBias"),
    )
)


def _channel_vector_shape(
    types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int
) -> tuple[TensorType, ...]:
    c = types[0]
    if not c.rank or c.shape is None or any(d != 1 for d in c.shape[1:]):
        raise OpError(f"ChannelVector needs a per-channel tensor (C, 1, ..., 1), got {c}")
    return (TensorType(c.dtype, c.shape[:1]),)


CHANNEL_VECTOR = _register(
    OpDef(
        "ChannelVector",
        (1, 1),
        {},
        _channel_vector_shape,
        lambda xs, attrs, n: (xs[0].reshape(xs[0].shape[:1]),),
        "A per-channel tensor (C, 1, ..., 1), which broadcasts over NCHW one value per channel, as the vector "
        "(C,) that BatchNormalization takes. Weight-only, so always folded; it has no ONNX form.",
        onnx=False,
        tags=frozenset({FIELD_EXACT}),
    )
)


def _layernorm(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    axes = tuple(range(_axis(int(attrs["axis"]), x.ndim), x.ndim))  # type: ignore[arg-type]
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + attrs["epsilon"]) * xs[1]  # type: ignore[operator]
    if len(xs) > 2:
        y = y + xs[2]
    return (y.astype(x.dtype),)


def _layernorm_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    if attrs.pop("stash_type", 1) != 1:
        return "LayerNormalization with stash_type other than float"
    return attrs


LAYERNORM = _register(
    OpDef(
        "LayerNormalization",
        (2, 3),
        {"axis": -1, "epsilon": 1e-5},
        _unary_shape,
        _layernorm,
        "Normalise over the axes from `axis` on, then scale and shift (only the first output is modelled).",
        min_opset=17,
        normalize=_layernorm_normalize,
        field=_no_field("LayerNormalization"),
        tags=frozenset({PRODUCT_EPILOGUE, SKIP_EPILOGUE}),
        no_spec="imported from ONNX only, no generated rule builds one; a spec would need division by a computed "
        "value, which the field refuses",
    )
)


def _softmax(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    e = np.exp(x - x.max(axis=int(attrs["axis"]), keepdims=True))  # type: ignore[arg-type]
    return ((e / e.sum(axis=int(attrs["axis"]), keepdims=True)).astype(x.dtype),)  # type: ignore[arg-type]


SOFTMAX = _register(
    OpDef(
        "Softmax",
        (1, 1),
        {"axis": -1},
        _unary_shape,
        _softmax,
        "exp(x) / sum(exp(x)) along one axis.",
        field=_no_field("Softmax"),
        tags=frozenset({BATCH_POLYMORPHIC, PRODUCT_EPILOGUE}),
        no_spec="imported from ONNX only, no generated rule builds one; a spec would need division by a computed "
        "value, which the field refuses",
    )
)


# ---- TASO's generator-only ops ------------------------------------------------------------------------------


def _enlarge_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    w = types[0]
    if w.rank != 4:
        raise OpError("Enlarge needs a 4-D kernel")
    assert w.shape is not None
    kh, kw = attrs["kernel_shape"]  # type: ignore[misc]
    for have, want in zip(w.shape[2:], (kh, kw)):
        if not isinstance(have, int) or have > want or (want - have) % 2:
            raise OpError(f"cannot centre a kernel of {have} in {want}")
    return (TensorType(w.dtype, (*w.shape[:2], kh, kw)),)


def _enlarge_pads(w_shape: Sequence[Dim], attrs: Attrs) -> list[int]:
    kh, kw = attrs["kernel_shape"]  # type: ignore[misc]
    ph, pw = (kh - int(w_shape[2])) // 2, (kw - int(w_shape[3])) // 2  # type: ignore[arg-type]
    return [ph, pw, ph, pw]


def _enlarge(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    return (_pad_hw(xs[0], _enlarge_pads(xs[0].shape, attrs)),)


def _enlarge_export(attrs: Attrs, types: Sequence[TensorType]) -> Export:
    assert types[0].shape is not None
    p = _enlarge_pads(types[0].shape, attrs)
    return Export("Pad", {"mode": "constant"}, (np.array([0, 0, p[0], p[1], 0, 0, p[2], p[3]], dtype=np.int64),))


ENLARGE = _register(
    OpDef(
        "Enlarge",
        (1, 1),
        {"kernel_shape": REQUIRED},
        _enlarge_shape,
        _enlarge,
        "Zero-pad a conv kernel, centred, to a larger odd size (TASO's enlarge); exported as Pad.",
        export=_enlarge_export,
        onnx=False,
        tags=frozenset({REARRANGES, FIELD_EXACT, PLANEWISE, TASO}),
    )
)


def _constant(
    name: str,
    doc: str,
    make: Callable[[Attrs], np.ndarray],
    shape: Callable[[Attrs], tuple],
    field: FieldRule | None = None,
) -> OpDef:
    """A zero-input op that produces a fixed tensor; exported as an ONNX Constant node."""

    def export(attrs: Attrs, types: Sequence[TensorType]) -> Export:
        return Export("Constant", {"value": make(attrs)})  # type: ignore[dict-item]

    return _register(
        OpDef(
            name,
            (0, 0),
            {"shape": REQUIRED, "dtype": "float32"},
            lambda types, a, c, n: (TensorType(str(a["dtype"]), shape(a)),),
            lambda xs, a, n: (make(a),),
            doc,
            export=export,
            onnx=False,
            tags=frozenset({CONSTANT, FIELD_EXACT, TASO}),
            field=field,
        )
    )


def _eye(attrs: Attrs) -> np.ndarray:
    n = int(attrs["shape"][0])  # type: ignore[index]
    return np.eye(n, dtype=str(attrs["dtype"]))


def _conv_identity(attrs: Attrs) -> np.ndarray:
    c, _, kh, kw = attrs["shape"]  # type: ignore[misc]
    w = np.zeros((c, 1, kh, kw), dtype=str(attrs["dtype"]))
    w[:, 0, kh // 2, kw // 2] = 1
    return w


def _pool_kernel(attrs: Attrs) -> np.ndarray:
    c, _, kh, kw = attrs["shape"]  # type: ignore[misc]
    return np.full((c, 1, kh, kw), 1 / (kh * kw), dtype=str(attrs["dtype"]))


ONES = _constant(
    "Ones",
    "A tensor of ones (mul by it is the identity).",
    lambda a: np.ones(a["shape"], str(a["dtype"])),  # type: ignore[arg-type]
    lambda a: tuple(a["shape"]),  # type: ignore[arg-type]
)
EYE = _constant(
    "Eye",
    "The identity matrix of shape (n, n) (matmul by it is the identity).",
    _eye,
    lambda a: (a["shape"][0], a["shape"][0]),  # type: ignore[index]
)
CONV_IDENTITY = _constant(
    "ConvIdentity",
    "Depthwise kernel (C, 1, kh, kw) with a centred 1: a SAME conv with group=C by it is the identity.",
    _conv_identity,
    lambda a: tuple(a["shape"]),  # type: ignore[arg-type]
)
POOL_KERNEL = _constant(
    "PoolKernel",
    "Depthwise kernel (C, 1, kh, kw) of 1/(kh*kw): a group=C conv by it is average pooling with padding counted.",
    _pool_kernel,
    lambda a: tuple(a["shape"]),  # type: ignore[arg-type]
    lambda xs, a, n, key: (np.full(a["shape"], ff.modinv(a["shape"][2] * a["shape"][3]), np.int64),),  # type: ignore[index, arg-type]
)


def infer(
    op: str, types: Sequence[TensorType], attrs: Attrs, consts: Sequence[np.ndarray | None] = (), n_outputs: int = 1
) -> tuple[TensorType, ...]:
    """Output types of ``op`` applied to inputs of ``types``; raises `OpError` on inputs it does not accept."""
    d = get(op)
    if not d.arity[0] <= len(types) <= d.arity[1]:
        raise OpError(f"{op} takes {d.arity[0]}..{d.arity[1]} inputs, got {len(types)}")
    consts = list(consts) + [None] * (len(types) - len(consts))
    return d.infer(types, attrs, consts, d.outputs or n_outputs)


# ---- what ONNX ops do with integer values, catalogued or not -------------------------------------------------
# The check must feed a model values it can run on; these say which of an op's inputs index or size something,
# for ops subst passes through untouched as much as for its own (whose `OpDef.static_inputs` say the same).

INDEX_INPUTS: Mapping[str, tuple[int, int]] = {"Gather": (1, 0), "GatherElements": (1, 0)}
"""Op -> (indices input, data input): the indices pick along the data's ``axis`` attribute (0 by default) and
must lie within it: token ids into an embedding."""

SHAPE_INPUTS: Mapping[str, tuple[int, int]] = {"Reshape": (1, 0), "Expand": (1, 0)}
"""Op -> (shape input, data input): the data's own shape is always a valid value of the shape input."""

SIZE_INPUTS: Mapping[str, tuple[int, ...]] = {
    "Expand": (1,),
    "Tile": (1,),
    "Range": (0, 1, 2),
    "ConstantOfShape": (0,),
    "Slice": (1, 2, 4),
    "Pad": (1,),
    "Resize": (3,),
    "TopK": (1,),
    "OneHot": (1,),
}
"""ONNX ops outside the catalogue -> inputs whose values size their result (repeats, lengths, counts, steps):
a small positive value is valid where 0 often is not (a Range or Slice step, a Tile count)."""

SHAPE_READERS = frozenset({"Shape", "Size"})
"""Ops whose output depends on their input's shape alone, never its values."""

MOVERS = frozenset({"Unsqueeze", "Squeeze", "Flatten", "Identity"})
"""ONNX ops outside the catalogue whose output holds only their first input's values, moved (as a catalogue op
tagged `REARRANGES` does): token ids reshaped before the Gather that reads them are still token ids."""


def moves_values(op: str) -> bool:
    """Whether ``op``'s output holds only its data inputs' values, moved (`MOVERS`, `REARRANGES`)."""
    return op in MOVERS or (op in OPS and REARRANGES in OPS[op].tags)


def size_inputs(op: str) -> tuple[int, ...]:
    """Positions of ``op``'s inputs whose values size or shape its result (`SIZE_INPUTS`, `OpDef.static_inputs`)."""
    return OPS[op].static_inputs if op in OPS else SIZE_INPUTS.get(op, ())
