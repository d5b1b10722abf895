"""Views and shapes: Unsqueeze, Squeeze, Expand and Shape.

Unsqueeze and Squeeze are row-major reshapes that add or drop size-1 axes; onnxruntime runs them as views. Their
``axes`` became a constant input at opset 13, and import reads that constant into a normalised attribute (sorted,
non-negative: `OpDef.attr_inputs`, as for ReduceSum), so one rule matches either form. Expand is numpy's
``broadcast_to`` with ONNX's two-way broadcasting; its shape stays an input, a whole shape like Reshape's target
(`OpDef.shape_of`), which a rewrite writes at the model's sizes; a computed shape leaves the node opaque. Shape's
value is its input's dims, a constant wherever they are static (`taso.execute.precompute` folds it); its spec
(specs/shape.py) speaks of it as z3 sees a shape, the vector of those dims. All of them only move values, so
each is exact over Z_p.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops.opdef import REQUIRED, Arrays, Attrs, Export, OpDef, OpError, register
from taso.ops.shapes import axis_index, broadcast_shapes
from taso.ops.traits import FIELD_EXACT, REARRANGES, SHAPE_ONLY, VIEW


def _distinct_axes(given: Sequence[int], rank: int, op: str) -> tuple[int, ...] | str:
    """``given`` sorted and non-negative for a result of ``rank`` axes, or why they are not valid axes."""
    try:
        axes = sorted({axis_index(int(a), rank) for a in given})
    except OpError as e:
        return str(e)
    if len(axes) != len(given):
        return f"{op} axes {tuple(given)} name an axis twice"
    return tuple(axes)


def _unsqueeze_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    x = types[0]
    if x is None or x.rank is None or not attrs.get("axes"):
        return "Unsqueeze of an input of unknown rank or without axes"
    axes = _distinct_axes(attrs["axes"], x.rank + len(attrs["axes"]), "Unsqueeze")
    return {**attrs, "axes": axes} if isinstance(axes, tuple) else axes


def _squeeze_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """Axes as for Unsqueeze; none given means every axis of size 1, which only static dims decide."""
    x = types[0]
    if x is None or x.shape is None:
        return "Squeeze of an input of unknown rank"
    if not attrs.get("axes"):
        if not all(isinstance(d, int) for d in x.shape):
            return "Squeeze without axes of an input whose dims are not all static"
        return {**attrs, "axes": tuple(i for i, d in enumerate(x.shape) if d == 1)}
    axes = _distinct_axes(attrs["axes"], x.rank, "Squeeze")  # type: ignore[arg-type]
    return {**attrs, "axes": axes} if isinstance(axes, tuple) else axes


def _axes(attrs: Attrs, rank: int | None, op: str) -> tuple[int, ...]:
    """The attribute's axes, checked to be as import normalises them (a generated node's are too)."""
    axes = tuple(int(a) for a in attrs["axes"])  # type: ignore[union-attr]
    if list(axes) != sorted(set(axes)) or (axes and axes[0] < 0) or (rank is not None and axes and axes[-1] >= rank):
        raise OpError(f"{op} axes {axes} must be distinct sorted axes of rank {rank}")
    return axes


def _unsqueeze_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.shape is None:
        raise OpError("Unsqueeze of an input of unknown rank")
    rank = len(x.shape) + len(attrs["axes"])  # type: ignore[arg-type]
    axes = _axes(attrs, rank, "Unsqueeze")
    dims = iter(x.shape)
    return (TensorType(x.dtype, tuple(1 if i in axes else next(dims) for i in range(rank))),)


def _squeeze_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.shape is None:
        raise OpError("Squeeze of an input of unknown rank")
    axes = _axes(attrs, len(x.shape), "Squeeze")
    wide = [a for a in axes if isinstance(x.shape[a], int) and x.shape[a] != 1]
    if wide:
        raise OpError(f"Squeeze of axis {wide[0]}, of size {x.shape[wide[0]]}, not 1")
    return (TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes)),)


UNSQUEEZE = register(
    OpDef(
        "Unsqueeze",
        (1, 1),
        {"axes": REQUIRED},
        _unsqueeze_shape,
        lambda xs, a, n: (np.expand_dims(xs[0], _axes(a, xs[0].ndim + len(a["axes"]), "Unsqueeze")),),  # type: ignore[arg-type]
        "Insert size-1 axes at ``axes`` (of the result): a row-major reshape.",
        normalize=_unsqueeze_normalize,
        attr_inputs=(("axes", 1, 13),),
        tags=frozenset({REARRANGES, VIEW, FIELD_EXACT}),
    )
)


def _squeeze(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    _squeeze_shape([TensorType(str(x.dtype), x.shape)], attrs, (), 1)  # refuses an axis not of size 1
    return (np.squeeze(x, axis=_axes(attrs, x.ndim, "Squeeze")),)


SQUEEZE = register(
    OpDef(
        "Squeeze",
        (1, 1),
        {"axes": REQUIRED},
        _squeeze_shape,
        _squeeze,
        "Drop the size-1 axes ``axes``: a row-major reshape.",
        normalize=_squeeze_normalize,
        attr_inputs=(("axes", 1, 13),),
        tags=frozenset({REARRANGES, VIEW, FIELD_EXACT}),
    )
)


def _expand_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    """The broadcast of the input's shape with the target's (ONNX's Expand broadcasts both ways: a target dim
    of 1 keeps the input's); a target that is computed is not modelled (the node stays opaque)."""
    x, target = types[0], consts[1] if len(consts) > 1 else None
    if target is None:
        raise OpError("Expand to a computed shape is not modelled")
    if np.ndim(target) != 1 or any(int(d) < 1 for d in target):
        raise OpError(f"Expand to {np.asarray(target).tolist()}: a shape of positive sizes is modelled")
    return (TensorType(x.dtype, broadcast_shapes(x.shape, tuple(int(d) for d in target))),)


def _expand(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x, target = xs[0], tuple(int(d) for d in xs[1])
    return (np.broadcast_to(x, np.broadcast_shapes(x.shape, target)).copy(),)


EXPAND = register(
    OpDef(
        "Expand",
        (2, 2),
        {},
        _expand_shape,
        _expand,
        "Broadcast a tensor to the shape read from the second input (numpy's broadcast_to, both ways).",
        static_inputs=(1,),
        shape_of=(1, 0),
        tags=frozenset({REARRANGES, FIELD_EXACT}),
    )
)


def _shape_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """``start`` and ``end`` (opset 15) clamped into [0, rank], as ONNX reads them; absent, the whole shape."""
    x = types[0]
    if x is None or x.rank is None:
        return "Shape of an input of unknown rank"
    bounds = {}
    for k, default in (("start", 0), ("end", x.rank)):
        v = int(attrs.get(k, default))
        bounds[k] = min(max(v + x.rank if v < 0 else v, 0), x.rank)
    return {**attrs, **bounds}


def _shape_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x, start, end = types[0], int(attrs["start"]), int(attrs["end"])  # type: ignore[call-overload]
    if x.rank is None or not 0 <= start <= x.rank or not 0 <= end <= x.rank:
        raise OpError(f"Shape from {start} to {end} of an input of rank {x.rank}")
    return (TensorType("int64", (max(end - start, 0),)),)


def _shape_export(attrs: Attrs, types: Sequence[TensorType]) -> Export:
    """The whole shape with no attributes (valid before opset 15); a part with its bounds."""
    whole = attrs["start"] == 0 and attrs["end"] == types[0].rank
    return Export("Shape", {} if whole else dict(attrs))


SHAPE = register(
    OpDef(
        "Shape",
        (1, 1),
        {"start": 0, "end": REQUIRED},
        _shape_shape,
        lambda xs, a, n: (np.array(xs[0].shape[int(a["start"]) : int(a["end"])], np.int64),),  # type: ignore[call-overload,misc]
        "Its input's dims from ``start`` to ``end``, an int64 vector: a constant wherever those dims are static.",
        normalize=_shape_normalize,
        export=_shape_export,
        tags=frozenset({SHAPE_ONLY, FIELD_EXACT}),
    )
)
