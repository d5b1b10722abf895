"""Partially-equivalent transformations (PET, OSDI'21): a mutant of a compute op plus an exact correction.

A *mutant* computes a Conv's output another way that agrees with it on most of the output but not all: the
batch laid side by side as one wide image lets the kernel see the neighbour's pixels instead of zero padding
at the seams. Where a mutant differs is found exactly, never guessed:

1. Both the op and its mutant are evaluated over Z_p (`taso.fingerprint.field_eval`) on random inputs, twice,
   at the model's batch and spatial sizes. Channel counts do not change *where* they differ (every channel is
   summed the same way on both sides), so the test runs with at most two channels per group: cheap at any size.
2. Conv is multi-linear, so the positions where the two differ form boxes. Each mutant kind names its per-axis
   split points (the seams); a few test positions per box of that grid (its corners and centre) decide the box.
3. The mismatched boxes are covered by slabs along one output axis (the axis that recomputes least), and each
   slab is recomputed by the original op on just the input region it needs: Split -> Conv -> Concat into the
   mutant's output.
4. The corrected mutant is evaluated once more on fresh inputs and must equal the original *everywhere*; a
   mutant whose mismatch the boxes did not fully cover is rejected here.

Mutant kinds are data (`MUTATORS`), each a function that builds the mutant with a `Builder`; the search
(`taso.search`) takes the corrected mutants as candidates beside the proved rules' rewrites, and the measured
cost model decides, correction kernels included.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from taso import ops
from taso.fingerprint import field_eval, input_values
from taso.ir import (
    AttrValue,
    Graph,
    Node,
    TensorType,
    WeightData,
    eliminate_dead,
    fresh_names,
    lint,
    make_attrs,
    topological_order,
)

PREFIX = "pet "
"""How the search's history (and so the report) names a mutation: ``pet <kind> <node> (corrects <share>)``."""

MAX_FRACTION = 0.5
"""A mutant whose correction recomputes more than this share of the output is not worth building."""


class Builder:
    """Appends catalogue nodes with fresh value names and inferred types; integer constants become weights."""

    def __init__(self, types: Mapping[str, TensorType], used: Sequence[str]) -> None:
        self.types = dict(types)
        self.nodes: list[Node] = []
        self.data: dict[str, WeightData] = {}
        self._fresh = fresh_names(used, "pet_")

    def const(self, values: Sequence[int]) -> str:
        name = next(self._fresh)
        self.data[name] = WeightData(np.array(values, np.int64))
        self.types[name] = TensorType("int64", (len(values),))
        return name

    def add(self, op: str, inputs: Sequence[str], n_outputs: int = 1, **attrs: AttrValue) -> list[str]:
        d = ops.get(op)
        full = {**{k: v for k, v in d.attrs.items() if v is not ops.REQUIRED}, **attrs}
        consts = [self.data[v].array if v in self.data else None for v in inputs]
        outs = ops.infer(op, [self.types[v] for v in inputs], full, consts, n_outputs)  # type: ignore[arg-type]
        names = [next(self._fresh) for _ in outs]
        self.types.update(zip(names, outs))
        self.nodes.append(Node(op, tuple(inputs), tuple(names), make_attrs(full)))
        return names

    def one(self, op: str, inputs: Sequence[str], **attrs: AttrValue) -> str:
        return self.add(op, inputs, **attrs)[0]

    def shape(self, v: str) -> tuple[int, ...]:
        return self.types[v].shape  # type: ignore[return-value]

    def split(self, v: str, axis: int, cuts: Sequence[int]) -> list[str]:
        """``v`` cut along ``axis`` at ``cuts`` into non-empty pieces (one piece: ``v`` itself)."""
        bounds = [0, *(c for c in cuts if 0 < c < self.shape(v)[axis]), self.shape(v)[axis]]
        sizes = [b - a for a, b in itertools.pairwise(sorted(set(bounds)))]
        if len(sizes) == 1:
            return [v]
        return self.add("Split", [v, self.const(sizes)], len(sizes), axis=axis)


@dataclass(frozen=True)
class Mutant:
    """A mutant's output value and the split points (output coordinates) of the boxes where it may differ."""

    output: str
    splits: Mapping[int, tuple[int, ...]]


Mutator = Callable[[Builder, Node], "Mutant | None"]
MUTATORS: dict[str, Mutator] = {}


def mutator(kind: str) -> Callable[[Mutator], Mutator]:
    def register(fn: Mutator) -> Mutator:
        MUTATORS[kind] = fn
        return fn

    return register


def _batch_to_space(axis: int) -> Mutator:
    """The batch laid out along spatial ``axis`` (2: one tall image, 3: one wide image), one Conv over it, and
    the batch taken back out. Needs a stride-1 'same' conv along that axis; the seams see the neighbouring
    image where the original saw zero padding, so rows/columns within the padding of each edge may differ."""

    def build(b: Builder, conv: Node) -> Mutant | None:
        a = conv.attr
        n, c, h, w = b.shape(conv.inputs[0])
        k, stride, dil = a["kernel_shape"][axis - 2], a["strides"][axis - 2], a["dilations"][axis - 2]  # type: ignore[index]
        lo, hi = a["pads"][axis - 2], a["pads"][axis]  # type: ignore[index]
        if n < 2 or stride != 1 or dil != 1 or lo + hi != k - 1:
            return None
        perm, wide = ((1, 2, 0, 3), (1, c, h, n * w)) if axis == 3 else ((1, 0, 2, 3), (1, c, n * h, w))
        x = b.one("Reshape", [b.one("Transpose", [conv.inputs[0]], perm=perm), b.const(wide)])
        y = b.one("Conv", [x, *conv.inputs[1:]], **a)
        _, m, oh, ow = b.shape(y)
        back = (m, oh, n, ow // n) if axis == 3 else (m, n, oh // n, ow)
        out = b.one("Transpose", [b.one("Reshape", [y, b.const(back)])], perm=(2, 0, 1, 3) if axis == 3 else perm)
        size = b.shape(out)[axis]
        return Mutant(out, {0: (1, n - 1), axis: (lo, size - hi)})

    return build


mutator("batch-to-height")(_batch_to_space(2))
mutator("batch-to-width")(_batch_to_space(3))


@mutator("dilation-to-batch")
def _dilation_to_batch(b: Builder, conv: Node) -> Mutant | None:
    """A dilated Conv as an undilated one over the d x d phases of the image moved into the batch
    (space-to-batch, conv, batch-to-space): exact where the pads and sizes divide by the dilation."""
    a = conv.attr
    n, c, h, w = b.shape(conv.inputs[0])
    d = a["dilations"][0]  # type: ignore[index]
    if d < 2 or a["dilations"] != (d, d) or a["strides"] != (1, 1) or h % d or w % d:  # type: ignore[operator]
        return None
    if any(p % d for p in a["pads"]):  # type: ignore[union-attr]
        return None
    phases = b.one("Reshape", [conv.inputs[0], b.const((n, c, h // d, d, w // d, d))])
    x = b.one("Transpose", [phases], perm=(0, 3, 5, 1, 2, 4))
    x = b.one("Reshape", [x, b.const((n * d * d, c, h // d, w // d))])
    pads = tuple(p // d for p in a["pads"])  # type: ignore[union-attr]
    y = b.one("Conv", [x, *conv.inputs[1:]], **{**a, "dilations": (1, 1), "pads": pads})
    _, m, oh, ow = b.shape(y)
    y = b.one("Reshape", [y, b.const((n, d, d, m, oh, ow))])
    y = b.one("Transpose", [y], perm=(0, 3, 4, 1, 5, 2))
    return Mutant(b.one("Reshape", [y, b.const((n, m, oh * d, ow * d))]), {})


# ---- where a mutant differs, and its correction ---------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How to correct a mutant: recompute these index ranges of the output along ``axis`` with the original op."""

    axis: int
    intervals: tuple[tuple[int, int], ...]
    fraction: float
    """Share of the output the correction recomputes."""


def _input_region(conv: Node, axis: int, start: int, stop: int, size: int) -> tuple[int, int, int, int]:
    """The input range [lo, hi) along spatial ``axis`` that output range [start, stop) reads, and the pads
    (before, after) that stand for the part of the window outside the input."""
    a = conv.attr
    i = axis - 2
    k, stride, dil, pad = a["kernel_shape"][i], a["strides"][i], a["dilations"][i], a["pads"][i]  # type: ignore[index]
    lo = start * stride - pad
    hi = (stop - 1) * stride - pad + (k - 1) * dil + 1
    return max(lo, 0), min(hi, size), max(-lo, 0), max(hi - size, 0)


def correct(b: Builder, conv: Node, mutant: str, plan: Plan) -> str:
    """The mutant's output with ``plan``'s slabs recomputed by ``conv`` on the input regions they read."""
    if not plan.intervals:
        return mutant
    axis = plan.axis
    cuts = sorted({e for iv in plan.intervals for e in iv})
    fixes = dict(plan.intervals)
    x, *params = conv.inputs
    pieces = []
    start = 0
    for piece in b.split(mutant, axis, cuts):
        stop = start + b.shape(piece)[axis]
        if start not in fixes:
            pieces.append(piece)
        elif axis == 0:
            pieces.append(b.one("Conv", [b.split(x, 0, (start, stop))[1 if start else 0], *params], **conv.attr))
        else:
            lo, hi, before, after = _input_region(conv, axis, start, stop, b.shape(x)[axis])
            region = b.split(x, axis, (lo, hi))[1 if lo else 0]
            pads = list(conv.attr["pads"])  # type: ignore[arg-type]
            pads[axis - 2], pads[axis] = before, after
            pieces.append(b.one("Conv", [region, *params], **{**conv.attr, "pads": tuple(pads)}))
        start = stop
    return pieces[0] if len(pieces) == 1 else b.one("Concat", pieces, axis=axis)


def _reduced(conv: Node, types: Mapping[str, TensorType]) -> dict[str, TensorType]:
    """Input types with at most two channels per group: where a layout mutant differs does not depend on them."""
    group = int(conv.attr["group"])  # type: ignore[arg-type]
    x, w = types[conv.inputs[0]], types[conv.inputs[1]]
    cg, mg = min(w.shape[1], 2), min(w.shape[0] // group, 2)  # type: ignore[index, operator]
    out = {
        conv.inputs[0]: TensorType("int64", (x.shape[0], cg * group, *x.shape[2:])),  # type: ignore[index]
        conv.inputs[1]: TensorType("int64", (mg * group, cg, *w.shape[2:])),  # type: ignore[index]
    }
    if len(conv.inputs) > 2:
        out[conv.inputs[2]] = TensorType("int64", (mg * group,))
    return out


def _differs(graphs: Sequence[Graph], seeds: Sequence[int]) -> np.ndarray:
    """Where the graphs' single outputs differ over Z_p, on random inputs from each seed."""
    g0 = graphs[0]
    mask = np.zeros(g0.types[g0.outputs[0]].shape, bool)  # type: ignore[arg-type]
    for seed in seeds:
        feeds = {v: input_values(v, g0.types[v].shape, seed) for v in g0.inputs}  # type: ignore[arg-type]
        outs = [field_eval(g, feeds, key=seed)[g.outputs[0]] for g in graphs]
        mask |= outs[0] != outs[1]
    return mask


def _boxes(mask: np.ndarray, splits: Mapping[int, tuple[int, ...]]) -> list[tuple[tuple[int, int], ...]]:
    """The boxes of the split-point grid that differ, each decided by its corners and centre."""
    edges = [sorted({0, size, *(s for s in splits.get(i, ()) if 0 < s < size)}) for i, size in enumerate(mask.shape)]
    found = []
    for box in itertools.product(*(list(itertools.pairwise(e)) for e in edges)):
        probes = itertools.product(*({lo, hi - 1, (lo + hi) // 2} for lo, hi in box))
        if any(mask[p] for p in probes):
            found.append(box)
    return found


def _cover(boxes: list[tuple[tuple[int, int], ...]], shape: tuple[int, ...]) -> Plan:
    """Slabs along the one axis (batch or spatial) whose union over the boxes recomputes the least."""
    best = None
    for axis in (0, 2, 3):
        merged: list[list[int]] = []
        for lo, hi in sorted(box[axis] for box in boxes):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        plan = Plan(axis, tuple((lo, hi) for lo, hi in merged), sum(hi - lo for lo, hi in merged) / shape[axis])
        if best is None or plan.fraction < best.fraction:
            best = plan
    assert best is not None
    return best


def _graph(b: Builder, inputs: Sequence[str], out: str) -> Graph:
    return Graph(tuple(b.nodes), tuple(inputs), (out,), b.types, tuple(b.data), b.data)


def plan(kind: str, conv: Node, types: Mapping[str, TensorType]) -> Plan | None:
    """The correction that makes ``kind``'s mutant of ``conv`` exact, or None (not applicable, too large a
    correction, or a mismatch the boxes do not cover)."""
    reduced = _reduced(conv, types)
    return _plan(kind, conv.attrs, tuple(reduced[v] for v in conv.inputs))


@cache
def _plan(kind: str, attrs: tuple, in_types: tuple[TensorType, ...]) -> Plan | None:
    names = ("x", "w", "b")[: len(in_types)]
    conv = Node("Conv", names, ("y",), attrs)
    types = dict(zip(names, in_types))
    original = Graph((conv,), names, ("y",), {**types, "y": ops.infer("Conv", in_types, conv.attr)[0]})
    b = Builder(types, names)
    try:
        mutant = MUTATORS[kind](b, conv)
    except ops.OpError:
        return None
    if mutant is None:
        return None
    variant = _graph(b, names, mutant.output)
    mask = _differs((original, variant), seeds=(1, 2))
    fix = _cover(_boxes(mask, mutant.splits), mask.shape) if mask.any() else Plan(0, (), 0.0)
    if fix.fraction > MAX_FRACTION:
        return None
    fixed = correct(b, conv, mutant.output, fix)
    corrected = _graph(b, names, fixed)
    if _differs((original, corrected), seeds=(3, 4)).any():
        return None  # the boxes missed part of the mismatch: never use this mutant
    return fix


# ---- mutants in a model graph -----------------------------------------------------------------------------------


def mutate(g: Graph, conv: Node, kind: str, fix: Plan) -> Graph:
    """``g`` with ``conv`` replaced by ``kind``'s mutant corrected by ``fix``."""
    b = Builder(g.types, list(g.values()))
    mutant = MUTATORS[kind](b, conv)
    assert mutant is not None, "a planned mutant must build"
    out = correct(b, conv, mutant.output, fix)
    nodes = [
        replace(n, outputs=tuple(conv.outputs[0] if o == out else o for o in n.outputs)) for n in b.nodes
    ]  # the last value takes over the conv's output name: every consumer stays valid
    kept = [n for n in g.nodes if n is not conv]
    order = topological_order(kept + nodes, set(g.inputs) | set(g.weights) | set(b.data))
    assert order is not None, "a mutant reads only the conv's inputs"
    types = {**{v: t for v, t in b.types.items() if v != out}, conv.outputs[0]: g.types[conv.outputs[0]]}
    return lint(
        eliminate_dead(
            replace(g, nodes=tuple(order), weights=(*g.weights, *b.data), data={**g.data, **b.data}, types=types)
        )
    )


def mutations(g: Graph) -> Iterator[tuple[str, Graph]]:
    """Every corrected mutant of every Conv of ``g`` with static shapes: the search's PET candidates, each
    named by kind, node and the share of its output the correction recomputes."""
    for n in g.nodes:
        if n.op != "Conv" or n.is_opaque or not all(g.types[v].is_static for v in (*n.inputs, *n.outputs)):
            continue
        for kind in MUTATORS:
            fix = plan(kind, n, g.types)
            if fix is not None:
                name = f"{PREFIX}{kind} {n.name or n.outputs[0]} (corrects {fix.fraction:.1%})"
                yield name, mutate(g, n, kind, fix)
