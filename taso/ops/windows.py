"""Sliding windows over NCHW images, in numpy and in ONNX's attributes: the window view and padding that
convolution and pooling compute with, 2-D convolution itself, and ``auto_pad`` resolved to explicit pads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops.opdef import Attrs


def window_view(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
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


def pad_hw(x: np.ndarray, pads: Sequence[int], value: float = 0) -> np.ndarray:
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
    win = window_view(pad_hw(x, attrs["pads"]), (kh, kw), attrs["strides"], attrs["dilations"])  # type: ignore[arg-type]
    n, _, oh, ow = win.shape[:4]
    # one matrix product per group, kernel times windows as columns (im2col; a 1x1 conv's input is its own
    # column matrix at batch 1): 10x faster than einsum over the window view on DenseNet's convs, which the
    # float64 reference of the check runs whole
    cols = win.reshape(n, group, cg, oh, ow, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4).reshape(group, cg * kh * kw, -1)
    y = w.reshape(group, m // group, -1) @ cols
    return y.reshape(group, m // group, n, oh, ow).transpose(2, 0, 1, 3, 4).reshape(n, m, oh, ow)


def resolve_auto_pad(attrs: dict, x: TensorType | None, kernel: Sequence[int]) -> dict | str:
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


def is_2d(t: TensorType | None) -> bool:
    return t is not None and t.rank == 4
