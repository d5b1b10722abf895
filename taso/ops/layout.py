"""Layout ops, which only move values: Concat, Split, Transpose, Reshape."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import Dim, TensorType
from taso.ops.opdef import REQUIRED, Arrays, Attrs, OpDef, OpError, register
from taso.ops.shapes import axis_index, same_dtype
from taso.ops.traits import (
    BATCH_POLYMORPHIC,
    FIELD_EXACT,
    REARRANGES,
    TASO,
    VIEW,
)


def _concat_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    dtype = same_dtype(types)
    if any(t.shape is None for t in types):
        return (TensorType(dtype, None),)
    rank = len(types[0].shape)  # type: ignore[arg-type]
    if any(t.rank != rank for t in types):
        raise OpError("Concat inputs differ in rank")
    axis = axis_index(int(attrs["axis"]), rank)  # type: ignore[arg-type]
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


CONCAT = register(
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
    axis = axis_index(int(attrs["axis"]), len(x.shape))  # type: ignore[arg-type]
    sizes = _split_sizes(x.shape[axis], attrs, consts[1] if len(consts) > 1 else None, n)
    return tuple(TensorType(x.dtype, (*x.shape[:axis], s, *x.shape[axis + 1 :])) for s in sizes)


def _split(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x, axis = xs[0], int(attrs["axis"])  # type: ignore[arg-type]
    sizes = _split_sizes(x.shape[axis], attrs, xs[1] if len(xs) > 1 else None, n)
    return tuple(np.split(x, np.cumsum(sizes[:-1]).astype(int), axis=axis))  # type: ignore[arg-type]


def _split_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    attrs.pop("num_outputs", None)  # the node's output count says the same
    return attrs


SPLIT = register(
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


TRANSPOSE = register(
    OpDef(
        "Transpose",
        (1, 1),
        {"perm": REQUIRED},
        _transpose_shape,
        lambda xs, a, n: (np.transpose(xs[0], a["perm"]),),  # type: ignore[arg-type]
        "Permute axes.",
        normalize=_transpose_normalize,
        tags=frozenset({REARRANGES, FIELD_EXACT, BATCH_POLYMORPHIC, TASO}),
        meaning="transpose(a, perm)",
    )
)


def _reshape_target(shape: tuple[Dim, ...], target: Sequence[int], allowzero: int) -> tuple[Dim, ...]:
    copied = [i for i, d in enumerate(target) if d == 0 and not allowzero]
    if copied and copied[-1] >= len(shape):
        raise OpError(f"Reshape to {tuple(target)} copies dim {copied[-1]} of a rank-{len(shape)} input")
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


RESHAPE = register(
    OpDef(
        "Reshape",
        (2, 2),
        {"allowzero": 0},
        _reshape_shape,
        _reshape,
        "Give a tensor a new shape read from the second input (0 copies a dimension, -1 infers one).",
        static_inputs=(1,),
        shape_of=(1, 0),
        tags=frozenset({REARRANGES, VIEW, FIELD_EXACT}),
    )
)
