"""Shape arithmetic the ops' shape rules share: broadcasting, axes, element types, sliding windows."""

from __future__ import annotations

from collections.abc import Sequence

from taso.ir import Dim, TensorType
from taso.ops.opdef import Attrs, OpError


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


def axis_index(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise OpError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def same_dtype(types: Sequence[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise OpError(f"mixed element types {sorted(dtypes)}")
    return types[0].dtype


def window_dim(size: Dim, k: int, stride: int, pad: int, dilation: int = 1) -> Dim:
    if not isinstance(size, int):
        return None
    out = (size + pad - dilation * (k - 1) - 1) // stride + 1
    if out <= 0:
        raise OpError(f"window of {k} does not fit a dimension of {size}")
    return out


def spatial_out(x: TensorType, kernel: Sequence[int], attrs: Attrs) -> tuple[Dim, Dim]:
    assert x.shape is not None
    strides, pads = attrs["strides"], attrs["pads"]
    dil = attrs.get("dilations", (1, 1))
    assert isinstance(strides, tuple) and isinstance(pads, tuple) and isinstance(dil, tuple)
    return tuple(  # type: ignore[return-value]
        window_dim(x.shape[2 + i], int(kernel[i]), int(strides[i]), int(pads[i]) + int(pads[i + 2]), int(dil[i]))
        for i in range(2)
    )


def first_type(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    return (types[0],)
