"""Matrix products and convolutions: MatMul, Gemm, Conv, and BlockDiagonal, the kernel that makes a grouped
conv a plain one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops.field import P
from taso.ops.opdef import REQUIRED, Arrays, Attrs, OpDef, OpError, register
from taso.ops.shapes import broadcast_shapes, same_dtype, spatial_out
from taso.ops.traits import (
    BATCH_POLYMORPHIC,
    EPILOGUE,
    FIELD_EXACT,
    PRODUCT_EPILOGUE,
    REARRANGES,
    TASO,
    WINDOWED,
)
from taso.ops.windows import conv2d, is_2d, resolve_auto_pad


def _matmul_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    a, b = types
    dtype = same_dtype(types)
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


MATMUL = register(
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
        meaning="matmul(a, b)",
    )
)


def _gemm_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    a, b = types[:2]
    if a.rank != 2 or b.rank != 2:
        raise OpError("Gemm needs 2-D operands")
    assert a.shape is not None and b.shape is not None
    m, k1 = (a.shape[1], a.shape[0]) if attrs["transA"] else a.shape
    k2, nn = (b.shape[1], b.shape[0]) if attrs["transB"] else b.shape
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise OpError(f"Gemm inner dimensions {k1} and {k2} differ")
    if len(types) > 2:  # C broadcasts one way only, to the product's (M, N)
        c = types[2].shape
        if c is not None and (len(c) > 2 or broadcast_shapes(c, (m, nn)) != (m, nn)):
            raise OpError(f"Gemm's C of shape {c} does not broadcast to ({m}, {nn})")
    return (TensorType(same_dtype(types), (m, nn)),)


def _gemm_operands(xs: Arrays, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    return (xs[0].T if attrs["transA"] else xs[0]), (xs[1].T if attrs["transB"] else xs[1])


def _gemm(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    a, b = _gemm_operands(xs, attrs)
    y = attrs["alpha"] * (a @ b)  # type: ignore[operator]
    if len(xs) > 2:
        y = y + attrs["beta"] * xs[2]  # type: ignore[operator]
    return (y.astype(xs[0].dtype),)


def _gemm_field(xs: Arrays, attrs: Attrs, n: int, key: int) -> tuple[np.ndarray, ...]:
    """Over Z_p, reduced after each product (numpy over floats would round a sum of products near 2**52); an
    alpha or beta that is not an integer has no field value here, so a rule with one is not refuted in the
    field (the random real pre-check still runs)."""
    scales = [attrs["alpha"], attrs["beta"]]
    if any(float(s) != int(s) for s in scales):  # type: ignore[arg-type]
        raise OpError("Gemm with a fractional alpha or beta has no finite-field semantics here")
    alpha, beta = (int(s) % P for s in scales)  # type: ignore[call-overload]
    a, b = _gemm_operands(xs, attrs)
    y = (a @ b) % P * alpha % P
    if len(xs) > 2:
        y = (y + np.broadcast_to(xs[2], y.shape) * beta) % P
    return (y,)


GEMM = register(
    OpDef(
        "Gemm",
        (2, 3),
        {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
        _gemm_shape,
        _gemm,
        "alpha * op(A) @ op(B) + beta * C, op = optional transpose, C broadcast to the product's shape; the fully "
        "connected layer, whose bias onnxruntime adds in the product's kernel.",
        field=_gemm_field,
        tags=frozenset({FIELD_EXACT}),
        fuses=frozenset({EPILOGUE, PRODUCT_EPILOGUE}),
    )
)


def _conv_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    x, w = types[0], types[1]
    if not is_2d(x) or not is_2d(w):
        return "only 2-D convolution (NCHW) is modelled"
    assert w is not None and w.shape is not None
    if not all(isinstance(d, int) for d in w.shape):
        return "Conv kernel of unknown shape"
    kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        return "Conv kernel_shape disagrees with the weight"
    attrs["kernel_shape"] = kernel
    return resolve_auto_pad(attrs, x, kernel)


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
    oh, ow = spatial_out(x, w.shape[2:], attrs)  # type: ignore[arg-type]
    return (TensorType(same_dtype(types), (x.shape[0], m, oh, ow)),)


def _conv(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    y = conv2d(xs[0], xs[1], attrs)
    if len(xs) > 2:
        y = y + xs[2].reshape(1, -1, 1, 1)
    return (y.astype(xs[0].dtype),)


CONV = register(
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


BLOCK_DIAGONAL = register(
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
