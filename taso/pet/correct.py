"""Where a mutant differs from the ops it replaces, found exactly over Z_p, and its correction: the boxes that
differ covered by slabs the original ops recompute on just the input region each reads."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from taso import ops
from taso.generate import field_eval, input_values
from taso.ir import Graph, Node, TensorType, make_attrs
from taso.pet.mutants import MUTATORS, Builder, Mutant

MAX_FRACTION = 0.5
"""A mutant whose correction recomputes more than this share of the output is not worth building."""


# ---- what the machinery needs to know about each compute op --------------------------------------------------


@dataclass(frozen=True)
class Compute:
    """One compute op as PET sees it: how to shrink it for the Z_p test, along which output axes a correction
    may cut, and how to recompute a slab of its output from the input region that slab reads."""

    reduce: Callable[[Node, Mapping[str, TensorType]], tuple[Node, dict[str, TensorType]]]
    """The node and its input types (int64, for Z_p) with the reducible axes cut to at most two."""
    axes: Callable[[int], tuple[int, ...]]
    """Output axes (by output rank) a correction may cut along."""
    slab: Callable[[Builder, Node, int, int, int], str]
    """The node's output range [start, stop) along an axis, computed by the node's op on what it reads."""


def _conv_reduce(conv: Node, types: Mapping[str, TensorType]) -> tuple[Node, dict[str, TensorType]]:
    """At most two groups, two input and two output channels per group."""
    group = int(conv.attr["group"])  # type: ignore[arg-type]
    x, w = types[conv.inputs[0]].shape, types[conv.inputs[1]].shape
    g, cg, mg = min(group, 2), min(w[1], 2), min(w[0] // group, 2)  # type: ignore[index, operator, type-var]
    out = {
        conv.inputs[0]: TensorType("int64", (x[0], g * cg, *x[2:])),  # type: ignore[index]
        conv.inputs[1]: TensorType("int64", (g * mg, cg, *w[2:])),  # type: ignore[index]
    }
    if len(conv.inputs) > 2:
        out[conv.inputs[2]] = TensorType("int64", (g * mg,))
    return replace(conv, attrs=make_attrs({**conv.attr, "group": g})), out


def _input_region(conv: Node, axis: int, start: int, stop: int, size: int) -> tuple[int, int, int, int]:
    """The input range [lo, hi) along spatial ``axis`` that output range [start, stop) reads, and the pads
    (before, after) that stand for the part of the window outside the input."""
    a = conv.attr
    i = axis - 2
    k, stride, dil, pad = a["kernel_shape"][i], a["strides"][i], a["dilations"][i], a["pads"][i]  # type: ignore[index]
    lo = start * stride - pad
    hi = (stop - 1) * stride - pad + (k - 1) * dil + 1
    return max(lo, 0), min(hi, size), max(-lo, 0), max(hi - size, 0)


def _conv_slab(b: Builder, conv: Node, axis: int, start: int, stop: int) -> str:
    x, *params = conv.inputs
    if axis == 0:
        return b.one("Conv", [b.take(x, 0, start, stop), *params], **conv.attr)
    lo, hi, before, after = _input_region(conv, axis, start, stop, b.shape(x)[axis])
    pads = list(conv.attr["pads"])  # type: ignore[arg-type]
    pads[axis - 2], pads[axis] = before, after
    return b.one("Conv", [b.take(x, axis, lo, hi), *params], **{**conv.attr, "pads": tuple(pads)})


def _matmul_reduce(mm: Node, types: Mapping[str, TensorType]) -> tuple[Node, dict[str, TensorType]]:
    """An inner dimension of at most two."""
    a, c = (types[v].shape for v in mm.inputs)
    k = min(a[-1], 2)  # type: ignore[index, type-var]
    left = TensorType("int64", (*a[:-1], k))  # type: ignore[index]
    right = TensorType("int64", (*c[:-2], k, c[-1]))  # type: ignore[index]
    return mm, {mm.inputs[0]: left, mm.inputs[1]: right}


def _matmul_slab(b: Builder, mm: Node, axis: int, start: int, stop: int) -> str:
    """Rows of the left operand, columns of the right one, or a batch range of whichever operand has it."""
    rank = max(len(b.shape(v)) for v in mm.inputs)
    operands = list(mm.inputs)
    for i, v in enumerate(operands):
        own = axis - (rank - len(b.shape(v)))  # the output axis in this operand's (right-aligned) axes
        inner = len(b.shape(v)) - 1 - i  # the axis this operand sums over
        if own >= 0 and own != inner and b.shape(v)[own] > 1:
            operands[i] = b.take(v, own, start, stop)
    return b.one("MatMul", operands)


COMPUTE: dict[str, Compute] = {
    "Conv": Compute(_conv_reduce, lambda rank: (0, 2, 3), _conv_slab),
    "MatMul": Compute(_matmul_reduce, lambda rank: tuple(range(rank)), _matmul_slab),
}


# ---- where a mutant differs, and its correction ---------------------------------------------------------------


@dataclass(frozen=True)
class Fix:
    """Recompute these index ranges of one output along ``axis`` with the original op (none: keep it)."""

    axis: int
    intervals: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Plan:
    """How to correct a mutant: one `Fix` per mutated output."""

    fixes: tuple[Fix, ...]
    fraction: float
    """Share of all the outputs' elements the correction recomputes."""


def _differs(graphs: Sequence[Graph], seeds: Sequence[int]) -> list[np.ndarray]:
    """Per output, where the two graphs' outputs differ over Z_p, on random inputs from each seed."""
    g0, g1 = graphs
    masks = [np.zeros(g0.types[o].shape, bool) for o in g0.outputs]  # type: ignore[arg-type]
    for seed in seeds:
        feeds = {v: input_values(v, g0.types[v].shape, seed) for v in g0.inputs}  # type: ignore[arg-type]
        y0, y1 = field_eval(g0, feeds, key=seed), field_eval(g1, feeds, key=seed)
        for mask, o0, o1 in zip(masks, g0.outputs, g1.outputs):
            mask |= y0[o0] != y1[o1]
    return masks


def _boxes(mask: np.ndarray, splits: Mapping[int, tuple[int, ...]]) -> list[tuple[tuple[int, int], ...]]:
    """The boxes of the split-point grid that differ, each decided by its corners and centre."""
    edges = [sorted({0, size, *(s for s in splits.get(i, ()) if 0 < s < size)}) for i, size in enumerate(mask.shape)]
    found = []
    for box in itertools.product(*(list(itertools.pairwise(e)) for e in edges)):
        probes = itertools.product(*({lo, hi - 1, (lo + hi) // 2} for lo, hi in box))
        if any(mask[p] for p in probes):
            found.append(box)
    return found


def _cover(boxes: list[tuple[tuple[int, int], ...]], shape: tuple[int, ...], axes: Sequence[int]) -> Fix:
    """Slabs along the one of ``axes`` whose union over the boxes recomputes the least (none for no boxes)."""
    best, least = Fix(axes[0], ()), math.inf
    for axis in axes:
        merged: list[list[int]] = []
        for lo, hi in sorted(box[axis] for box in boxes):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        share = sum(hi - lo for lo, hi in merged) / shape[axis]
        if share < least:
            best, least = Fix(axis, tuple((lo, hi) for lo, hi in merged)), share
    return best


def _recomputed(fix: Fix, shape: tuple[int, ...]) -> int:
    return sum(hi - lo for lo, hi in fix.intervals) * math.prod(shape) // shape[fix.axis]


def correct(b: Builder, nodes: Sequence[Node], mutant: Mutant, plan: Plan) -> list[str]:
    """The mutant's outputs with ``plan``'s slabs recomputed by the original nodes on the regions they read."""
    out = []
    for node, value, fix in zip(nodes, mutant.outputs, plan.fixes):
        if not fix.intervals:
            out.append(value)
            continue
        fixes = dict(fix.intervals)
        pieces, start = [], 0
        for piece in b.split(value, fix.axis, sorted({e for iv in fix.intervals for e in iv})):
            stop = start + b.shape(piece)[fix.axis]
            pieces.append(COMPUTE[node.op].slab(b, node, fix.axis, start, stop) if start in fixes else piece)
            start = stop
        out.append(pieces[0] if len(pieces) == 1 else b.one("Concat", pieces, axis=fix.axis))
    return out


def _graph(b: Builder, inputs: Sequence[str], outputs: Sequence[str]) -> Graph:
    return Graph(tuple(b.nodes), tuple(inputs), tuple(outputs), b.types, tuple(b.data), b.data)


def plan(kind: str, nodes: Sequence[Node], types: Mapping[str, TensorType]) -> Plan | None:
    """The correction that makes ``kind``'s mutant of ``nodes`` exact, or None (not applicable, too large a
    correction, or a mismatch the boxes do not cover)."""
    reduced: dict[str, TensorType] = {}
    small = []
    for n in nodes:
        node, in_types = COMPUTE[n.op].reduce(n, types)
        if any(reduced.setdefault(v, t) != t for v, t in in_types.items()):
            return None  # siblings that reduce a shared input differently
        small.append(node)
    names = {v: f"i{i}" for i, v in enumerate(dict.fromkeys(v for n in nodes for v in n.inputs))}
    site = tuple(
        replace(n, inputs=tuple(names[v] for v in n.inputs), outputs=(f"o{i}",), name="") for i, n in enumerate(small)
    )
    return _plan(kind, site, tuple(reduced[v] for v in names))


@cache
def _plan(kind: str, nodes: tuple[Node, ...], in_types: tuple[TensorType, ...]) -> Plan | None:
    """`plan` on the nodes standing alone, reading inputs ``i0, i1, ...`` and writing ``o0, o1, ...``; cached by
    kind name, so a name must keep meaning one mutator."""
    names = tuple(f"i{i}" for i in range(len(in_types)))
    types = dict(zip(names, in_types))
    try:
        for n in nodes:
            types[n.outputs[0]] = ops.infer(n.op, [types[v] for v in n.inputs], n.attr)[0]
        b = Builder(types, [*names, *types])
        mutant = MUTATORS[kind].build(b, nodes)
    except ops.OpError:
        return None
    if mutant is None:
        return None
    outputs = tuple(n.outputs[0] for n in nodes)
    original = Graph(nodes, names, outputs, types)
    masks = _differs((original, _graph(b, names, mutant.outputs)), seeds=(1, 2))
    axes = [COMPUTE[n.op].axes(m.ndim) for n, m in zip(nodes, masks)]
    fixes = tuple(_cover(_boxes(m, s), m.shape, ax) for m, s, ax in zip(masks, mutant.splits, axes))
    fraction = sum(_recomputed(f, m.shape) for f, m in zip(fixes, masks)) / sum(m.size for m in masks)
    if fraction > MAX_FRACTION:
        return None
    fix = Plan(fixes, fraction)
    corrected = _graph(b, names, correct(b, nodes, mutant, fix))
    if any(m.any() for m in _differs((original, corrected), seeds=(3, 4))):
        return None  # the boxes missed part of the mismatch: never use this mutant
    return fix
