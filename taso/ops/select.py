"""Selection ops, which pick some of their input's elements: Slice, Gather (by constant indices) and Where.

What they select is fixed by constants, so the IR holds it as attributes: ONNX passes Slice's starts, ends,
axes and steps (from opset 10) and Gather's indices as inputs, which import reads into the attributes when they
are constants (`OpDef.attr_inputs`) and export writes back; a computed one (token ids into an embedding) leaves
the node opaque, with what the check needs to know of it (`OpDef.opaque`). A Slice is normalised so that equal
slices compare equal: axes sorted and non-negative, steps filled in, and along a dimension of known size a
step-1 range clamped into it (the ``INT64_MAX`` end exporters write becomes the size). Where's condition is any
boolean tensor (a mask, usually a constant).

Over Z_p each is exact: the values move (or are chosen) as numbers, so numpy followed by ``% p`` is their
field semantics; a boolean condition lifts to 0 and 1 and selects per element as it does over the reals.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import Dim, TensorType
from taso.ops.onnx_facts import OnnxOp
from taso.ops.opdef import REQUIRED, Arrays, Attrs, OpDef, OpError, register
from taso.ops.shapes import axis_index, broadcast_shapes, same_dtype
from taso.ops.traits import FIELD_EXACT, REARRANGES


def _ints(v: object) -> tuple[int, ...]:
    return tuple(int(x) for x in v) if isinstance(v, tuple | list) else (int(v),)  # type: ignore[call-overload]


def _slice_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """Axes filled in (every leading one), made non-negative and sorted with their ranges; steps filled with 1;
    a step-1 range over a dimension of known size clamped into it."""
    x = types[0]
    if x is None or x.rank is None:
        return "a Slice of an input of unknown rank"
    starts, ends = _ints(attrs.get("starts", ())), _ints(attrs.get("ends", ()))
    axes = _ints(attrs.get("axes", tuple(range(len(starts)))))
    steps = _ints(attrs.get("steps", (1,) * len(starts)))
    if not starts or not len(starts) == len(ends) == len(axes) == len(steps):
        return "a Slice whose starts, ends, axes and steps differ in length"
    try:
        axes = tuple(axis_index(a, x.rank) for a in axes)
    except OpError as e:
        return str(e)
    if len(set(axes)) != len(axes) or 0 in steps:
        return "a Slice naming an axis twice or with a step of 0"
    ranges = []
    for a, s, e, k in sorted(zip(axes, starts, ends, steps)):
        d = x.shape[a]  # type: ignore[index]
        if k == 1 and isinstance(d, int):
            s, e, _ = slice(s, e).indices(d)
        ranges.append((a, s, e, k))
    attrs.update({key: tuple(r[i] for r in ranges) for i, key in enumerate(("axes", "starts", "ends", "steps"))})
    return attrs


def slice_ranges(attrs: Attrs) -> list[list[int]]:
    """A catalogue Slice's starts, ends, axes and steps, as the passes that read an ONNX Slice's constant inputs
    (`taso.optimize.nops`, `taso.optimize.shapefold`) take them."""
    return [list(_ints(attrs[k])) for k in ("starts", "ends", "axes", "steps")]


def gather_indices(attrs: Attrs) -> tuple[tuple[int, ...], list[int]]:
    """A catalogue Gather's indices as an ONNX Gather's constant input reads: (shape, elements)."""
    indices = attrs["indices"]
    return ((len(indices),) if isinstance(indices, tuple) else ()), list(_ints(indices))


def _slices(attrs: Attrs, rank: int) -> list[tuple[int, slice]]:
    """(axis, Python slice) per sliced axis, checked to be as `_slice_normalize` leaves them."""
    axes, starts, ends, steps = (_ints(attrs[k]) for k in ("axes", "starts", "ends", "steps"))
    if not len(axes) == len(starts) == len(ends) == len(steps) or list(axes) != sorted(set(axes)):
        raise OpError(f"Slice axes {axes} must be distinct and sorted, one per start, end and step")
    if axes and (axes[0] < 0 or axes[-1] >= rank) or 0 in steps:
        raise OpError(f"Slice axes {axes} out of rank {rank}, or a step of 0")
    return [(a, slice(s, e, k)) for a, s, e, k in zip(axes, starts, ends, steps)]


def _slice_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.shape is None:
        return (x,)
    dims: list[Dim] = list(x.shape)
    for a, sl in _slices(attrs, len(dims)):
        d = dims[a]
        if isinstance(d, int):
            dims[a] = len(range(*sl.indices(d)))
            if not dims[a]:
                raise OpError(f"an empty Slice [{sl.start}:{sl.stop}:{sl.step}] of a dimension of {d}")
        else:
            dims[a] = None
    return (TensorType(x.dtype, tuple(dims)),)


def _slice(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    index = [slice(None)] * xs[0].ndim
    for a, sl in _slices(attrs, xs[0].ndim):
        index[a] = sl
    return (xs[0][tuple(index)],)


SLICE = register(
    OpDef(
        "Slice",
        (1, 1),
        {"starts": REQUIRED, "ends": REQUIRED, "axes": REQUIRED, "steps": REQUIRED},
        _slice_shape,
        _slice,
        "Take a range of each of ``axes`` (numpy's x[s:e:k], ends clamped): a constant window of a tensor.",
        normalize=_slice_normalize,
        attr_inputs=(("starts", 1, 10), ("ends", 2, 10), ("axes", 3, 10), ("steps", 4, 10)),
        opaque=OnnxOp(sizes=(1, 2, 4)),
        tags=frozenset({REARRANGES, FIELD_EXACT}),
    )
)


def _gather_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """Axis non-negative; a negative index counted from the end where the dimension's size is known."""
    x = types[0]
    if x is None or not x.rank:
        return "a Gather from an input of unknown rank or a scalar"
    try:
        axis = attrs["axis"] = axis_index(int(attrs.get("axis", 0)), x.rank)
    except OpError as e:
        return str(e)
    d, indices = x.shape[axis], attrs.get("indices")  # type: ignore[index]
    if isinstance(d, int) and indices is not None:
        fixed = tuple(i + d if i < 0 else i for i in _ints(indices))
        attrs["indices"] = fixed if isinstance(indices, tuple) else fixed[0]
    return attrs


def _gather_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x, indices = types[0], attrs["indices"]
    if x.shape is None:
        return (x,)
    axis = axis_index(int(attrs["axis"]), len(x.shape))  # type: ignore[arg-type]
    if isinstance(indices, tuple) and not indices or isinstance(indices, str | float):
        raise OpError(f"Gather indices {indices!r} must be an integer or a non-empty tuple of them")
    d = x.shape[axis]
    if isinstance(d, int) and not all(-d <= i < d for i in _ints(indices)):
        raise OpError(f"Gather indices {indices} out of a dimension of {d}")
    picked = (len(indices),) if isinstance(indices, tuple) else ()
    return (TensorType(x.dtype, (*x.shape[:axis], *picked, *x.shape[axis + 1 :])),)


GATHER = register(
    OpDef(
        "Gather",
        (1, 1),
        {"axis": 0, "indices": REQUIRED},
        _gather_shape,
        lambda xs, a, n: (np.take(xs[0], np.asarray(a["indices"]), axis=int(a["axis"])),),  # type: ignore[arg-type]
        "Pick entries of ``axis`` by constant indices: an integer drops the axis (x[:, 0]), a tuple keeps it.",
        normalize=_gather_normalize,
        attr_inputs=(("indices", 1, 1),),
        opaque=OnnxOp(indices=(1, 0)),
        tags=frozenset({REARRANGES, FIELD_EXACT}),
    )
)


def _where_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    c, x, y = types
    if c.dtype != "bool":
        raise OpError(f"Where's condition must be bool, not {c.dtype}")
    return (TensorType(same_dtype([x, y]), broadcast_shapes(c.shape, x.shape, y.shape)),)


WHERE = register(
    OpDef(
        "Where",
        (3, 3),
        {},
        _where_shape,
        lambda xs, a, n: (np.where(xs[0], xs[1], xs[2]),),
        "Per element, the second input where the boolean first one holds, else the third (all broadcast).",
        elementwise=True,
        tags=frozenset({FIELD_EXACT}),
    )
)
