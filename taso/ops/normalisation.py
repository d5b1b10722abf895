"""Normalisation layers (BatchNormalization, LayerNormalization, Softmax) and the weight-only ops that fold an
inference BatchNormalization into the conv before it (BnKernel, BnBias) or a per-channel Mul and Add into it
(ChannelVector)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import Dim, TensorType
from taso.ops import field as ff
from taso.ops.opdef import REQUIRED, Arrays, Attrs, FieldRule, NumpyRule, OpDef, OpError, register
from taso.ops.shapes import axis_index, first_type
from taso.ops.traits import (
    BATCH_POLYMORPHIC,
    EPILOGUE,
    FIELD_EXACT,
    PRODUCT_EPILOGUE,
    SKIP_EPILOGUE,
)


def _no_field(name: str) -> FieldRule:
    """For ops given no field rule yet (numpy's followed by ``% p`` would be wrong): refuse, never guess."""

    def refuse(xs: Arrays, attrs: Attrs, n: int, key: int) -> tuple[np.ndarray, ...]:
        raise OpError(f"{name} has no finite-field semantics (it divides by computed values)")

    return refuse


def _norm_axes(x: np.ndarray, attrs: Attrs) -> tuple[int, ...]:
    return tuple(range(axis_index(int(attrs["axis"]), x.ndim), x.ndim))  # type: ignore[arg-type]


def norm_rules(centre: bool) -> tuple[NumpyRule, FieldRule]:
    """The numpy and field rules of LayerNormalization (``centre``) or of RMSNorm (onnxruntime's
    SimplifiedLayerNormalization, `taso.ops.fused`), which is LayerNorm without the centring and the bias: x
    (centred) over the root of its mean square along the axes from ``axis`` on plus epsilon, times the scale
    (plus the bias, input 2, where there is one). In Z_m means are sums times the inverse of the count, epsilon
    its exact residue, the root `Ring.sqrt`'s (so the result is exact where the mean square plus epsilon is a
    residue)."""

    def compute(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
        x = xs[0]
        axes = _norm_axes(x, attrs)
        d = x - x.mean(axis=axes, keepdims=True) if centre else x
        y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + attrs["epsilon"]) * xs[1]  # type: ignore[operator]
        return ((y + xs[2] if len(xs) > 2 else y).astype(x.dtype),)

    def field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
        x = xs[0]
        axes = _norm_axes(x, attrs)
        d = (x - z.mean(x, axes)) % z.m if centre else x
        scale = z.inverse(z.sqrt(z.mean(d * d % z.m, axes) + z.constant(float(attrs["epsilon"]))))  # type: ignore[arg-type]
        y = d * scale % z.m * xs[1] % z.m
        return ((y + xs[2]) % z.m if len(xs) > 2 else y,)

    return compute, field


def _keyed_along(x: np.ndarray, axis: int, z: ff.Ring, op: str) -> np.ndarray:
    """A keyed random function of each element and the multiset of those it is normalised with (the elements
    sharing its index off ``axis``), in ``z``'s component."""
    moved = np.moveaxis(x, axis, -1)
    h = ff.keyed_multiset(moved, z, op)[..., None]
    with np.errstate(over="ignore"):  # both below 2**25: h * P + x names the pair (h, x) without collision
        pairs = h.astype(np.uint64) * np.uint64(ff.P) + moved.astype(np.uint64)
    return np.moveaxis(z.keyed(pairs, op), -1, axis)


def _softmax_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """exp(x) / sum(exp(x)) with Exp's exact w ** x (`taso.ops.powers`), so softmax(x + c) = softmax(x) holds;
    numpy's subtraction of the maximum only keeps floats finite and is left out. Z_q: keyed, as Exp's, but of
    each element with its whole row: keyed by the element alone, softmax over either axis gave one Z_q value,
    and a softmax of a softmax (which reads it) paired the two axes, which differ."""
    if z.partner is None:
        return (_keyed_along(xs[0], int(attrs["axis"]), z, "Softmax"),)  # type: ignore[arg-type]
    e = z.exp(z.partner[0])
    return (e * z.inverse(e.sum(axis=int(attrs["axis"]), keepdims=True) % z.m) % z.m,)  # type: ignore[arg-type]


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


BATCHNORM = register(
    OpDef(
        "BatchNormalization",
        (5, 5),
        {"epsilon": 1e-5},
        first_type,
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


BN_KERNEL = register(
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


BN_BIAS = register(
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


CHANNEL_VECTOR = register(
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


def _axis_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    """The input's type, where ``axis`` names one of its dimensions: an axis past the rank has no meaning (the
    kernel would fail at run time, not at inference, and a rule could be built on it)."""
    x = types[0]
    if x.rank is not None:
        axis_index(int(attrs["axis"]), x.rank)  # type: ignore[arg-type]
    return (x,)


def _axis_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """The axis made non-negative, as a generated rule (and a lifted one) writes it: -1 and rank - 1 are one
    node, and a rule matches only attributes equal to its own."""
    x = types[0]
    if x is None or x.rank is None:
        return "normalisation over an input of unknown rank"
    try:
        attrs["axis"] = axis_index(int(attrs.get("axis", -1)), x.rank)
    except OpError as e:
        return str(e)
    return attrs


def norm_normalize(op: str, attrs: dict, types: Sequence[TensorType | None]) -> dict | str:
    """A norm's attributes as LayerNormalization's and RMSNorm's rules read them: stash_type other than float
    is not modelled, and the axis is made non-negative (`_axis_normalize`)."""
    if attrs.pop("stash_type", 1) != 1:
        return f"{op} with stash_type other than float"
    return _axis_normalize(attrs, types, 0)


LAYERNORM = register(
    OpDef(
        "LayerNormalization",
        (2, 3),
        {"axis": -1, "epsilon": 1e-5},
        _axis_shape,
        norm_rules(centre=True)[0],
        "Normalise over the axes from `axis` on, then scale and shift (only the first output is modelled).",
        min_opset=17,
        normalize=lambda attrs, types, opset: norm_normalize("LayerNormalization", attrs, types),
        field=norm_rules(centre=True)[1],
        tags=frozenset({PRODUCT_EPILOGUE, SKIP_EPILOGUE}),
    )
)


def _softmax(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    e = np.exp(x - x.max(axis=int(attrs["axis"]), keepdims=True))  # type: ignore[arg-type]
    return ((e / e.sum(axis=int(attrs["axis"]), keepdims=True)).astype(x.dtype),)  # type: ignore[arg-type]


SOFTMAX = register(
    OpDef(
        "Softmax",
        (1, 1),
        {"axis": -1},
        _axis_shape,
        _softmax,
        "exp(x) / sum(exp(x)) along one axis.",
        normalize=_axis_normalize,
        field=_softmax_field,
        tags=frozenset({BATCH_POLYMORPHIC, PRODUCT_EPILOGUE, ff.EXPONENTIAL}),
        meaning="softmax(a, axis)",
    )
)
