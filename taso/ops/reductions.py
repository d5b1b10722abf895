"""Reductions: ReduceSum, ReduceMean and GlobalAveragePool.

The IR holds a reduction's axes as a normalised attribute (sorted, non-negative, every axis when ONNX gives
none), whichever way the file wrote them: ONNX made ``axes`` a constant input (ReduceSum from opset 13,
ReduceMean from 18), and import reads that constant into the attribute, export writes it back as an input
(`OpDef.attr_inputs`). So one rule matches either exporter's form, and a node's axes are never a tensor a
rewrite could lose track of. Over Z_p a sum is exact and a mean is the sum times the inverse of the count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops import field as ff
from taso.ops.opdef import REQUIRED, Arrays, Attrs, FieldRule, NumpyRule, OpDef, OpError, register
from taso.ops.shapes import axis_index
from taso.ops.traits import BATCH_POLYMORPHIC, FIELD_EXACT


def _reduce_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """Axes sorted and non-negative; none given means every axis (noop_with_empty_axes=1 then an identity,
    which is not modelled)."""
    x = types[0]
    if x is None or not x.rank:
        return "a reduction over an input of unknown rank or a scalar"
    given = tuple(attrs.get("axes", ()))
    if not given and attrs.get("noop_with_empty_axes", 0):
        return "a reduction with noop_with_empty_axes=1 and no axes (an identity) is not modelled"
    attrs.pop("noop_with_empty_axes", None)
    try:
        axes = sorted({axis_index(int(a), x.rank) for a in given} if given else range(x.rank))
    except OpError as e:
        return str(e)
    if len(axes) != len(given or axes):
        return f"reduction axes {given} name an axis twice"
    attrs["axes"] = tuple(axes)
    return attrs


def _axes(x: np.ndarray | TensorType, attrs: Attrs) -> tuple[int, ...]:
    """The attribute's axes, checked to be as import normalises them (a generated node's are too)."""
    axes, keep = tuple(attrs["axes"]), attrs["keepdims"]  # type: ignore[arg-type]
    rank = x.ndim if isinstance(x, np.ndarray) else x.rank
    if not axes or list(axes) != sorted(set(axes)) or axes[0] < 0 or (rank is not None and axes[-1] >= rank):
        raise OpError(f"reduction axes {axes} must be distinct sorted axes of a rank-{rank} input")
    if keep not in (0, 1):
        raise OpError(f"keepdims must be 0 or 1, got {keep}")
    return axes  # type: ignore[return-value]


def _reduce_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    axes = _axes(x, attrs)
    if x.shape is None:
        return (TensorType(x.dtype, None),)
    keep = attrs["keepdims"]
    return (TensorType(x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)),)


def _sum(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    return (np.sum(x, axis=_axes(x, attrs), keepdims=bool(attrs["keepdims"])).astype(x.dtype),)


def _mean(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    return (np.mean(x, axis=_axes(x, attrs), keepdims=bool(attrs["keepdims"])).astype(x.dtype),)


def _sum_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """Exact in either component: elements below 2**25 add up in int64 far past any generated graph's sizes."""
    x = xs[0]
    return (np.sum(x, axis=_axes(x, attrs), keepdims=bool(attrs["keepdims"])) % z.m,)


def _mean_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """The sum times the inverse of the count (`Ring.mean`): a mean is a sum divided by a constant."""
    x = xs[0]
    mean = z.mean(x, _axes(x, attrs))
    return (mean if attrs["keepdims"] else np.squeeze(mean, axis=_axes(x, attrs)),)


def _reduce(name: str, run: NumpyRule, field: FieldRule, doc: str, axes_input_from: int, meaning: str) -> OpDef:
    """A reduction over normalised ``axes``: ReduceSum and ReduceMean differ only in their numpy and field code
    and in the opset that made ``axes`` an input."""
    return register(
        OpDef(
            name,
            (1, 1),
            {"axes": REQUIRED, "keepdims": 1},
            _reduce_shape,
            run,
            doc,
            normalize=_reduce_normalize,
            attr_inputs=(("axes", 1, axes_input_from),),
            field=field,
            tags=frozenset({FIELD_EXACT, BATCH_POLYMORPHIC}),  # its axes move past a stack's (`taso.rules.lifted`)
            meaning=meaning,
        )
    )


REDUCE_SUM = _reduce(
    "ReduceSum", _sum, _sum_field, "Sum over ``axes`` (keepdims=1 keeps them as size 1).", 13, "sum(a, axis)"
)
REDUCE_MEAN = _reduce(
    "ReduceMean", _mean, _mean_field, "Mean over ``axes`` (keepdims=1 keeps them as size 1).", 18, "mean(a, axis)"
)


def _spatial(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


def _gap_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    x = types[0]
    if x.shape is None:
        return (x,)
    if len(x.shape) < 3:
        raise OpError(f"GlobalAveragePool needs an input with spatial axes (N, C, ...), got rank {len(x.shape)}")
    return (TensorType(x.dtype, (*x.shape[:2], *(1,) * (len(x.shape) - 2))),)


def _gap_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    return (z.mean(xs[0], _spatial(xs[0])),)


GLOBAL_AVGPOOL = register(
    OpDef(
        "GlobalAveragePool",
        (1, 1),
        {},
        _gap_shape,
        lambda xs, a, n: (np.mean(xs[0], axis=_spatial(xs[0]), keepdims=True).astype(xs[0].dtype),),
        "Mean over every spatial axis (2 on), kept as size 1: ReduceMean over them with keepdims=1.",
        field=_gap_field,
        tags=frozenset({FIELD_EXACT}),
    )
)
