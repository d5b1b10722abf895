"""What subst knows of ONNX ops it does not model (they stay opaque and pass through untouched): how
onnxruntime runs them, which the cost model's units need, and what their integer inputs mean, which the check
needs to draw values a model can run on (`taso.execute.feeds`).

One entry per ONNX op, each fact stated once. An op the catalogue models later moves its facts to its
`taso.ops.OpDef` entry (a test holds the two apart).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from taso.ops.traits import ELEMENTWISE, REARRANGES, SHAPE_ONLY, VIEW


@dataclass(frozen=True)
class OnnxOp:
    """The facts about one ONNX op outside the catalogue."""

    traits: frozenset[str] = frozenset()
    """`taso.ops.traits` it has, as a catalogue entry's tags say of a modelled op."""
    indices: tuple[int, int] | None = None
    """(indices input, data input): the indices pick along the data's ``axis`` attribute (0 by default) and must
    lie within it: token ids into an embedding."""
    shape_of: tuple[int, int] | None = None
    """(shape input, data input): the data's own shape is always a valid value of the shape input."""
    sizes: tuple[int, ...] = ()
    """Inputs whose values size its result (repeats, lengths, counts, steps): a small positive value is valid
    where 0 often is not (a Range or Slice step, a Tile count)."""


_VIEW_MOVER = OnnxOp(frozenset({VIEW, REARRANGES}))
_BROADCASTING = (
    *("And", "Or", "Xor", "Not", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"),
    *("Max", "Min", "Abs", "IsNaN", "Cast"),
)
"""Element-wise ONNX ops subst does not model: numpy broadcasting of their inputs is their output's shape."""

ONNX_OPS: Mapping[str, OnnxOp] = {
    **dict.fromkeys(_BROADCASTING, OnnxOp(frozenset({ELEMENTWISE}))),
    **dict.fromkeys(("Flatten", "Identity"), _VIEW_MOVER),
    "Dropout": OnnxOp(frozenset({VIEW})),
    "GatherElements": OnnxOp(indices=(1, 0)),
    "Tile": OnnxOp(sizes=(1,)),
    "Range": OnnxOp(sizes=(0, 1, 2)),
    "ConstantOfShape": OnnxOp(sizes=(0,)),
    "Pad": OnnxOp(sizes=(1,)),
    "Resize": OnnxOp(sizes=(3,)),
    "TopK": OnnxOp(sizes=(1,)),
    "OneHot": OnnxOp(sizes=(1,)),
    "Size": OnnxOp(frozenset({SHAPE_ONLY})),
}
"""ONNX op name -> what subst knows of it."""
