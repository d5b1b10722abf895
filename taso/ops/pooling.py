"""2-D pooling: AveragePool and MaxPool."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops import field as ff
from taso.ops.opdef import REQUIRED, Arrays, Attrs, OpDef, OpError, register
from taso.ops.shapes import spatial_out
from taso.ops.traits import (
    FIELD_EXACT,
    PLANEWISE,
    TASO,
    WINDOWED,
)
from taso.ops.windows import is_2d, pad_hw, resolve_auto_pad, window_view


def _pool_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    if not is_2d(types[0]):
        return "only 2-D pooling (NCHW) is modelled"
    if attrs.pop("ceil_mode", 0):
        return "pooling with ceil_mode=1 is not modelled"
    if tuple(attrs.pop("dilations", (1, 1))) != (1, 1):
        return "dilated pooling is not modelled"
    if attrs.pop("storage_order", 0):
        return "MaxPool storage_order=1 is not modelled"
    if "kernel_shape" not in attrs:
        return "pooling without kernel_shape"
    return resolve_auto_pad(attrs, types[0], attrs["kernel_shape"])


def _pool_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.rank != 4:
        raise OpError("pooling needs a 4-D input")
    assert x.shape is not None
    k, pads = attrs["kernel_shape"], attrs["pads"]
    if any(p >= k[i % 2] for i, p in enumerate(pads)):  # type: ignore[index, operator, arg-type]
        # ONNX requires it, and the specs assume it of every window (a window of padding only has no value)
        raise OpError(f"pooling pads {pads} must each be smaller than the kernel {k}")
    oh, ow = spatial_out(x, attrs["kernel_shape"], attrs)  # type: ignore[arg-type]
    return (TensorType(x.dtype, (x.shape[0], x.shape[1], oh, ow)),)


def _avgpool(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    k, s, p = attrs["kernel_shape"], attrs["strides"], attrs["pads"]
    total = window_view(pad_hw(x, p), k, s, (1, 1)).sum(axis=(4, 5))  # type: ignore[arg-type]
    if attrs["count_include_pad"]:
        count = np.asarray(k[0] * k[1], dtype=x.dtype)  # type: ignore[index]
    else:
        ones = np.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
        count = window_view(pad_hw(ones, p), k, s, (1, 1)).sum(axis=(4, 5))  # type: ignore[arg-type]
    return ((total / count).astype(x.dtype),)


def _avgpool_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """Window sums times the modular inverse of each window's count."""
    x = xs[0]
    k, s, p = attrs["kernel_shape"], attrs["strides"], attrs["pads"]
    total = window_view(pad_hw(x, p), k, s, (1, 1)).sum(axis=(4, 5)) % z.m  # type: ignore[arg-type]
    if attrs["count_include_pad"]:
        return (total * z.modinv(k[0] * k[1]) % z.m,)  # type: ignore[index]
    ones = np.ones((1, 1, *x.shape[2:]), dtype=np.int64)
    count = window_view(pad_hw(ones, p), k, s, (1, 1)).sum(axis=(4, 5))  # type: ignore[arg-type]
    inverse = np.vectorize(z.modinv, otypes=[np.int64])(count)
    return (total * inverse % z.m,)


def _maxpool_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """A keyed random symmetric function of each window; padding is a value outside the field."""
    padded = pad_hw(xs[0], attrs["pads"], z.m)  # type: ignore[arg-type]
    win = window_view(padded, attrs["kernel_shape"], attrs["strides"], (1, 1))  # type: ignore[arg-type]
    return (ff.keyed_multiset(win.reshape(*win.shape[:4], -1), z, "MaxPool", z.m),)


def _maxpool(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    padded = pad_hw(x, attrs["pads"], -np.inf)  # type: ignore[arg-type]
    return (window_view(padded, attrs["kernel_shape"], attrs["strides"], (1, 1)).max(axis=(4, 5)).astype(x.dtype),)  # type: ignore[arg-type]


_POOL_ATTRS = {"kernel_shape": REQUIRED, "strides": (1, 1), "pads": (0, 0, 0, 0)}
AVGPOOL = register(
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
MAXPOOL = register(
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
