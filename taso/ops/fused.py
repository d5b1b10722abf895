"""onnxruntime's fused kernels (issue 48): FastGelu, BiasGelu, QuickGelu, SkipLayerNormalization,
SimplifiedLayerNormalization (RMSNorm), SkipSimplifiedLayerNormalization and FusedMatMul, as its contrib-op
documentation (ContribOperators.md) defines them, each checked against its CPU kernel (tests/ops/cases.py).

Why they are catalogue ops: a rule "decomposition = fused op" is then proved like any other (specs/fused.py
lowers each onto the symbols of its decomposition) and the search costs the fused kernel like any unit. They run
on onnxruntime alone (`ORT_ONLY`), so they are rewrite targets only where the output is for it: ``standard_onnx``
keeps them out. All but SimplifiedLayerNormalization, which onnxruntime registers in the default domain, live in
``com.microsoft`` (version 1). Of the normalisations' extra outputs (mean, inverse deviation, the skip sum) none
is modelled: a node that uses one stays opaque.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops import elementwise, normalisation
from taso.ops import field as ff
from taso.ops.opdef import Arrays, Attrs, AttrValue, FieldRule, NumpyRule, OpDef, OpError, register
from taso.ops.shapes import axis_index, broadcast_shapes, first_type, same_dtype
from taso.ops.traits import BATCH_POLYMORPHIC, FIELD_EXACT, ORT_ONLY

CONTRIB = "com.microsoft"
"""onnxruntime's contrib domain; its ops are all at version 1."""
_FUSED = frozenset({ORT_ONLY})


def floats_only(attrs: dict[str, AttrValue], types: Sequence[TensorType | None], opset: int) -> dict | str:
    """onnxruntime's kernels take floats only; an input of unknown type leaves the node opaque."""
    if any(t is None or not t.dtype.startswith(("float", "bfloat")) for t in types):
        return "fused kernel of other than floats (or of an untyped input)"
    return attrs


def _last_axis_vectors(x: TensorType, vectors: Sequence[TensorType], op: str) -> None:
    """Biases, scales and shifts: one value per element of ``x``'s last axis."""
    if x.shape is None or not x.shape:
        raise OpError(f"{op} needs an input of known rank >= 1")
    for v in vectors:
        if v.shape is not None and (len(v.shape) != 1 or (isinstance(x.shape[-1], int) and v.shape != x.shape[-1:])):
            raise OpError(f"{op} needs vectors of the last axis's size {x.shape[-1]}, got {v}")


def _biased_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    same_dtype(types)
    _last_axis_vectors(types[0], types[1:], "a biased GELU")
    return (types[0],)


def _same_dim(a: object, b: object) -> bool:
    """Two dims that may be one: equal sizes, or a symbolic one (exporters name one dim twice, unk__1 and unk__2)."""
    return not (isinstance(a, int) and isinstance(b, int)) or a == b


def _skip_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    """input and skip of one shape, rank 2 or 3 (as onnxruntime's kernel takes them); the rest vectors."""
    x, skip = types[:2]
    same_dtype(types)
    if x.shape is None or skip.shape is None:
        raise OpError("a skip normalisation of an input of unknown rank")
    if x.rank not in (2, 3) or skip.rank != x.rank or not all(map(_same_dim, x.shape, skip.shape)):
        raise OpError(f"a skip normalisation needs input and skip of one 2-D or 3-D shape, got {x} and {skip}")
    _last_axis_vectors(x, types[2:], "a skip normalisation")
    return (x,)


def _biased(xs: Arrays) -> np.ndarray:
    """x plus the bias where there is one."""
    return xs[0] + xs[1] if len(xs) > 1 else xs[0]


def _gelu(form: str) -> tuple:
    """numpy and field rules of GELU (erf or tanh) of x plus an optional bias: `GELU`'s own, so that a fused op
    and the Gelu it fuses share their fingerprint."""
    attrs = {"approximate": form}

    def compute(xs: Arrays, a: Attrs, n: int) -> tuple[np.ndarray, ...]:
        return elementwise.GELU.run([_biased(xs).astype(xs[0].dtype)], attrs)

    def field(xs: Arrays, a: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
        assert elementwise.GELU.field is not None
        return elementwise.GELU.field([_biased(xs) % z.m], attrs, n, z)  # type: ignore[arg-type]

    return compute, field


FAST_GELU = register(
    OpDef(
        "FastGelu",
        (1, 2),
        {},
        _biased_shape,
        _gelu("tanh")[0],
        "The tanh approximation of GELU of x (plus an optional bias along the last axis): Gelu(approximate="
        "'tanh'), never the erf GELU (specs/fused.py keeps the two apart).",
        elementwise=True,
        domain=CONTRIB,
        min_opset=1,
        normalize=floats_only,
        field=_gelu("tanh")[1],  # type: ignore[arg-type]
        tags=_FUSED | {BATCH_POLYMORPHIC},
    )
)
BIAS_GELU = register(
    OpDef(
        "BiasGelu",
        (2, 2),
        {},
        _biased_shape,
        _gelu("none")[0],
        "The erf GELU of x plus a bias along the last axis: Gelu(Add(x, bias)).",
        elementwise=True,
        domain=CONTRIB,
        min_opset=1,
        normalize=floats_only,
        field=_gelu("none")[1],  # type: ignore[arg-type]
        tags=_FUSED | {BATCH_POLYMORPHIC},
    )
)


def _quick_gelu_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """x times Sigmoid's keyed function of alpha x (alpha exact): x * Sigmoid(x) is QuickGelu at alpha 1."""
    assert elementwise.SIGMOID.field is not None
    scaled = xs[0] * z.constant(float(attrs["alpha"])) % z.m  # type: ignore[arg-type]
    return (xs[0] * elementwise.SIGMOID.field([scaled], {}, n, z)[0] % z.m,)  # type: ignore[arg-type]


def _quick_gelu(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    return ((x / (1 + np.exp(-float(attrs["alpha"]) * x))).astype(x.dtype),)  # type: ignore[arg-type]


QUICK_GELU = register(
    OpDef(
        "QuickGelu",
        (1, 1),
        {"alpha": 1.702},
        first_type,
        _quick_gelu,
        "x * Sigmoid(alpha * x): GELU's sigmoid approximation at alpha 1.702 (CLIP's), SiLU at alpha 1.",
        elementwise=True,
        domain=CONTRIB,
        min_opset=1,
        normalize=floats_only,
        field=_quick_gelu_field,
        tags=_FUSED | {BATCH_POLYMORPHIC},
    )
)


def _skip_sum(xs: Arrays, bias: int | None) -> np.ndarray:
    """input + skip (+ the bias at position ``bias``, where given)."""
    s = xs[0] + xs[1]
    return s + xs[bias] if bias is not None and len(xs) > bias else s


def _skip(rules: tuple[NumpyRule, FieldRule], weights: slice, bias: int | None) -> tuple[NumpyRule, FieldRule]:
    """numpy and field rules of a skip norm: ``rules``' norm (`normalisation.norm_rules`) of input + skip (+ the
    bias at position ``bias``) over the last axis, its scale and shift the inputs ``weights``."""
    compute, field = rules

    def skip_compute(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
        norm = {"axis": xs[0].ndim - 1, "epsilon": attrs["epsilon"]}
        return compute([_skip_sum(xs, bias).astype(xs[0].dtype), *xs[weights]], norm, n)

    def skip_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
        norm = {"axis": xs[0].ndim - 1, "epsilon": attrs["epsilon"]}
        return field([_skip_sum(xs, bias) % z.m, *xs[weights]], norm, n, z)

    return skip_compute, skip_field


_LAYERNORM, _RMSNORM = normalisation.norm_rules(centre=True), normalisation.norm_rules(centre=False)
_SKIP_LAYERNORM, _SKIP_RMSNORM = _skip(_LAYERNORM, slice(2, 4), 4), _skip(_RMSNORM, slice(2, 3), None)


SKIP_LAYERNORM = register(
    OpDef(
        "SkipLayerNormalization",
        (3, 5),
        {"epsilon": 1e-12},
        _skip_shape,
        _SKIP_LAYERNORM[0],
        "LayerNormalization over the last axis of input + skip (+ bias, input 4), times gamma (plus beta, input "
        "3): the residual Add fused with the norm after it. Only output 0 is modelled.",
        domain=CONTRIB,
        min_opset=1,
        normalize=floats_only,
        field=_SKIP_LAYERNORM[1],
        tags=_FUSED,
    )
)


def _rmsnorm_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x, scale = types
    same_dtype(types)
    if x.shape is not None and scale.shape is not None:
        axis = axis_index(int(attrs["axis"]), len(x.shape))  # type: ignore[arg-type]
        if len(scale.shape) != len(x.shape) - axis:
            raise OpError(f"SimplifiedLayerNormalization needs a scale of the normalised shape, got {scale}")
    return (x,)


def _rmsnorm_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """LayerNormalization's attributes (`normalisation.norm_normalize`), of floats only."""
    out = normalisation.norm_normalize("SimplifiedLayerNormalization", attrs, types)
    return out if isinstance(out, str) else floats_only(out, types, opset)


SIMPLIFIED_LAYERNORM = register(
    OpDef(
        "SimplifiedLayerNormalization",
        (2, 2),
        {"axis": -1, "epsilon": 1e-5},
        _rmsnorm_shape,
        _RMSNORM[0],
        "RMSNorm: x / sqrt(mean(x^2) + epsilon) * scale over the axes from `axis` on; no centring, no shift, so "
        "never a LayerNormalization. onnxruntime registers it in the default domain; only output 0 is modelled.",
        min_opset=1,
        normalize=_rmsnorm_normalize,
        field=_RMSNORM[1],
        tags=_FUSED,
    )
)


SKIP_SIMPLIFIED_LAYERNORM = register(
    OpDef(
        "SkipSimplifiedLayerNormalization",
        (3, 3),
        {"epsilon": 1e-12},
        _skip_shape,
        _SKIP_RMSNORM[0],
        "RMSNorm over the last axis of input + skip, times gamma. Its optional bias input is left opaque: "
        "onnxruntime's kernels disagree on whether it enters the sum. Only output 0 is modelled.",
        domain=CONTRIB,
        min_opset=1,
        normalize=floats_only,
        field=_SKIP_RMSNORM[1],
        tags=_FUSED,
    )
)


def _flag(attrs: Attrs, name: str) -> bool:
    return bool(attrs[name])


def _operands(xs: Arrays, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """A and B with their last two axes swapped where transA / transB say."""
    a, b = xs
    return (
        np.swapaxes(a, -1, -2) if _flag(attrs, "transA") else a,
        np.swapaxes(b, -1, -2) if _flag(attrs, "transB") else b,
    )


def _fused_matmul_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    a, b = types
    dtype = same_dtype(types)
    if a.shape is None or b.shape is None:
        return (TensorType(dtype, None),)
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise OpError("FusedMatMul of a 1-D operand is not modelled")
    (m, k1), (k2, n_) = (
        a.shape[-2:][:: -1 if _flag(attrs, "transA") else 1],
        b.shape[-2:][:: -1 if _flag(attrs, "transB") else 1],
    )
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise OpError(f"FusedMatMul inner dimensions {k1} and {k2} differ")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    assert batch is not None
    return (TensorType(dtype, (*batch, m, n_)),)


def _fused_matmul_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """transBatchA / transBatchB (a batch axis moved in) are not modelled; transA / transB must be 0 or 1."""
    if attrs.pop("transBatchA", 0) or attrs.pop("transBatchB", 0):
        return "FusedMatMul with transBatchA or transBatchB"
    if any(attrs.get(k, 0) not in (0, 1) for k in ("transA", "transB")):
        return "FusedMatMul with transA or transB other than 0 or 1"
    if any(t is None or t.rank is None or t.rank < 2 for t in types):
        return "FusedMatMul with a 1-D or unranked operand"
    return floats_only(attrs, types, opset)


def _fused_matmul(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    a, b = _operands(xs, attrs)
    return ((np.matmul(a, b) * float(attrs["alpha"])).astype(xs[0].dtype),)  # type: ignore[arg-type]


def _fused_matmul_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """The product exactly, times alpha's exact residue."""
    a, b = _operands(xs, attrs)
    return (np.matmul(a, b) % z.m * z.constant(float(attrs["alpha"])) % z.m,)  # type: ignore[arg-type]


FUSED_MATMUL = register(
    OpDef(
        "FusedMatMul",
        (2, 2),
        {"alpha": 1.0, "transA": 0, "transB": 0},
        _fused_matmul_shape,
        _fused_matmul,
        "alpha * op(A) @ op(B), op swapping the last two axes where transA / transB is set: a MatMul with the "
        "Transposes of its operands and a scaling of its result fused in.",
        domain=CONTRIB,
        min_opset=1,
        normalize=_fused_matmul_normalize,
        field=_fused_matmul_field,
        tags=_FUSED | {FIELD_EXACT},
    )
)
