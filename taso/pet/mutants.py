"""Partially-equivalent transformations (PET, OSDI'21): a mutant of compute ops plus an exact correction.

A *mutant* computes the output of one compute op (or of several sibling ops at once) another way that agrees
with it on most of the output but not all: the batch laid side by side as one wide image lets the kernel see
the neighbour's pixels instead of zero padding at the seams. Where a mutant differs is found exactly, never
guessed:

1. The ops and their mutant are evaluated over Z_p (`taso.fingerprint.field_eval`) on random inputs, twice,
   at the model's sizes, except along the axes each op declares reducible (`COMPUTE`): a conv's channels and
   groups, a matmul's inner dimension. Those are summed (or run side by side) the same way on both sides, so
   they do not change *where* the two differ, and the test stays cheap at any size.
2. The compute ops are multi-linear, so the positions where the two differ form boxes. Each mutant names its
   per-axis split points (the seams); a few test positions per box of that grid (corners and centre) decide it.
3. Each output's mismatched boxes are covered by slabs along one output axis (the axis that recomputes least),
   and each slab is recomputed by the original op on just the input region it reads (the op's `Compute.slab`):
   Split -> op -> Concat into the mutant's output.
4. The corrected mutant is evaluated once more on fresh inputs and must equal the original *everywhere*; a
   mutant whose mismatch the boxes did not fully cover is rejected here.

Mutant kinds are data (`MUTATORS`): the op they apply to, whether they merge sibling nodes, and a function that
builds the mutant with a `Builder`. The search (`taso.search`) takes the corrected mutants as candidates beside
the proved rules' rewrites, and the measured cost model decides, correction kernels included.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from taso import ops
from taso.generate import field_eval, input_values
from taso.ir import (
    AttrValue,
    Graph,
    Kind,
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
"""How the search's history (and so the report) names a mutation: ``pet <kind> <nodes> (corrects <share>)``."""

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

    def zeros(self, shape: tuple[int, ...], dtype: str) -> str:
        """A weight of zeros (what a Pad of a weight would add: the catalogue has no Pad)."""
        name = next(self._fresh)
        self.data[name] = WeightData(np.zeros(shape, dtype))
        self.types[name] = TensorType(dtype, shape)
        return name

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

    def take(self, v: str, axis: int, start: int, stop: int) -> str:
        """The index range [start, stop) of ``v`` along ``axis``."""
        return self.split(v, axis, (start, stop))[1 if start > 0 else 0]


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


# ---- mutant kinds ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """The mutant's value for each output of the mutated nodes, and for each the split points (output
    coordinates, by axis) of the boxes where it may differ."""

    outputs: tuple[str, ...]
    splits: tuple[Mapping[int, tuple[int, ...]], ...]


Mutator = Callable[[Builder, tuple[Node, ...]], "Mutant | None"]


@dataclass(frozen=True)
class MutantKind:
    """One entry of `MUTATORS`: the op it mutates, how it builds the mutant, and whether it merges siblings."""

    op: str
    build: Mutator
    merges: tuple[str, ...] | None = None
    """None: mutates one node at a time. Else it merges sibling nodes (reading one activation, the rest of
    their inputs weights) whose attributes agree except for these."""


MUTATORS: dict[str, MutantKind] = {}


def mutator(kind: str, op: str, merges: tuple[str, ...] | None = None) -> Callable[[Mutator], Mutator]:
    def register(fn: Mutator) -> Mutator:
        MUTATORS[kind] = MutantKind(op, fn, merges)
        return fn

    return register


def single(output: str, splits: Mapping[int, tuple[int, ...]] | None = None) -> Mutant:
    """The mutant of one node."""
    return Mutant((output,), (splits or {},))


def _batch_to_space(axis: int) -> Mutator:
    """The batch laid out along spatial ``axis`` (2: one tall image, 3: one wide image), one Conv over it, and
    the batch taken back out. The seams see the neighbouring image where the original saw zero padding, so
    outputs whose window reaches over an image's edge may differ.

    Pad-conv-slice makes this hold for more than 'same' stride-1 convs: the wide conv is padded so that every
    image owns a block of ``size / stride`` outputs, and each block is sliced back to the conv's own output
    size. So a 'valid' conv (its extra outputs straddle a seam and are dropped: exact everywhere), a partly
    padded or dilated one, and a strided one (image size a multiple of the stride) all qualify. A 1x1 conv
    does not: it is one matrix product over all pixels whatever their layout, so only the transposes change."""

    def build(b: Builder, nodes: tuple[Node, ...]) -> Mutant | None:
        (conv,) = nodes
        a = conv.attr
        n, c, h, w = b.shape(conv.inputs[0])
        i = axis - 2
        size = (h, w)[i]
        k, s, d = a["kernel_shape"][i], a["strides"][i], a["dilations"][i]  # type: ignore[index]
        lo, hi = a["pads"][i], a["pads"][axis]  # type: ignore[index]
        reach = d * (k - 1) + 1
        out = (size + lo + hi - reach) // s + 1
        if n < 2 or a["kernel_shape"] == (1, 1) or size % s or lo > reach - 1 or out > size // s:
            return None
        pads = list(a["pads"])  # type: ignore[arg-type]
        pads[axis] = reach - 1 - lo  # the wide output is then exactly n blocks of size // s
        perm, wide = ((1, 2, 0, 3), (1, c, h, n * w)) if axis == 3 else ((1, 0, 2, 3), (1, c, n * h, w))
        x = b.one("Reshape", [b.one("Transpose", [conv.inputs[0]], perm=perm), b.const(wide)])
        y = b.one("Conv", [x, *conv.inputs[1:]], **{**a, "pads": tuple(pads)})
        _, m, oh, ow = b.shape(y)
        back = (m, oh, n, ow // n) if axis == 3 else (m, n, oh // n, ow)
        y = b.take(b.one("Reshape", [y, b.const(back)]), 3 if axis == 3 else 2, 0, out)
        y = b.one("Transpose", [y], perm=(2, 0, 1, 3) if axis == 3 else perm)
        left, right = -(-lo // s), -(-(size - reach + lo + 1) // s)  # windows before these start/end inside
        return single(y, {0: (1, n - 1), axis: (left, right)})

    return build


mutator("batch-to-height", "Conv")(_batch_to_space(2))
mutator("batch-to-width", "Conv")(_batch_to_space(3))


@mutator("dilation-to-batch", "Conv")
def _dilation_to_batch(b: Builder, nodes: tuple[Node, ...]) -> Mutant | None:
    """A dilated Conv as an undilated one over the d x d phases of the image moved into the batch
    (space-to-batch, conv, batch-to-space): exact where the pads and sizes divide by the dilation."""
    (conv,) = nodes
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
    return single(b.one("Reshape", [y, b.const((n, m, oh * d, ow * d))]))


@mutator("stride-to-channels", "Conv")
def _stride_to_channels(b: Builder, nodes: tuple[Node, ...]) -> Mutant | None:
    """A strided Conv as a stride-1 one over the s x s phases of the image moved into the channels
    (space-to-depth): the kernel is zero-padded in front so its start lands on a phase boundary, cut into s x s
    phases the same way, and the output sliced to the conv's size. Exact everywhere. Why: a stem with few input
    channels (ResNet's 7x7/2 over RGB) becomes a 4x4/1 conv over 12 channels, a shape GPUs run far better. Not
    for 1x1 convs, whose phases but one would be all zeros."""
    (conv,) = nodes
    a = conv.attr
    x, w = conv.inputs[:2]
    n, c, h, wd = b.shape(x)
    m, cg, kh, kw = b.shape(w)
    s = a["strides"][0]  # type: ignore[index]
    if s < 2 or a["strides"] != (s, s) or a["dilations"] != (1, 1) or a["group"] != 1 or h % s or wd % s:
        return None
    if (kh, kw) == (1, 1):
        return None
    front = [-p % s for p in a["pads"][:2]]  # type: ignore[index]
    taps = [-(-(k + f) // s) for k, f in zip((kh, kw), front)]  # phase-kernel size along each axis
    for axis, (k, f, q) in enumerate(zip((kh, kw), front, taps), start=2):
        pieces = [b.zeros((*b.shape(w)[:axis], f, *b.shape(w)[axis + 1 :]), b.types[w].dtype)] if f else []
        back = q * s - k - f
        tail = [b.zeros((*b.shape(w)[:axis], back, *b.shape(w)[axis + 1 :]), b.types[w].dtype)] if back else []
        if pieces or tail:
            w = b.one("Concat", [*pieces, w, *tail], axis=axis)
    w = b.one("Reshape", [w, b.const((m, cg, taps[0], s, taps[1], s))])
    w = b.one("Reshape", [b.one("Transpose", [w], perm=(0, 1, 3, 5, 2, 4)), b.const((m, cg * s * s, *taps))])
    x = b.one("Reshape", [x, b.const((n, c, h // s, s, wd // s, s))])
    x = b.one("Reshape", [b.one("Transpose", [x], perm=(0, 1, 3, 5, 2, 4)), b.const((n, c * s * s, h // s, wd // s))])
    out = b.shape(conv.outputs[0])[2:]
    lo = [(p + f) // s for p, f in zip(a["pads"][:2], front)]  # type: ignore[index]
    hi = [max(0, o - 1 + q - size // s - p) for o, q, size, p in zip(out, taps, (h, wd), lo)]
    attrs = {**a, "kernel_shape": tuple(taps), "strides": (1, 1), "pads": (*lo, *hi)}
    y = b.one("Conv", [x, w, *conv.inputs[2:]], **attrs)
    return single(b.take(b.take(y, 2, 0, out[0]), 3, 0, out[1]))


@mutator("merge-convs", "Conv", merges=("kernel_shape", "pads"))
def _merge_convs(b: Builder, convs: tuple[Node, ...]) -> Mutant | None:
    """Sibling convs over one input, with kernels of different sizes (odd differences, like 1x3 beside 3x1 or
    1x1 beside 5x5) and different pads, as one conv: each kernel zero-padded (`Enlarge`) to the largest and
    centred, the kernels concatenated, the merged conv padded so that every sibling's window lies inside it,
    and each sibling's channels sliced back out at its own offset and output size. Exact everywhere (the zero
    taps read nothing), so the correction is empty; it costs the enlarged kernels' extra taps."""
    a0 = convs[0].attr
    if a0["group"] != 1:
        return None
    size = b.shape(convs[0].inputs[0])[2:]
    kernel = tuple(max(c.attr["kernel_shape"][i] for c in convs) for i in (0, 1))  # type: ignore[index]
    lo, hi, offsets = [0, 0], [0, 0], [[0, 0] for _ in convs]
    for i in (0, 1):
        s, d = a0["strides"][i], a0["dilations"][i]  # type: ignore[index]
        ks = [c.attr["kernel_shape"][i] for c in convs]  # type: ignore[index]
        if any((kernel[i] - k) % 2 for k in ks):
            return None
        starts = [c.attr["pads"][i] + (kernel[i] - k) // 2 * d for c, k in zip(convs, ks)]  # type: ignore[index]
        lo[i] = max(starts)
        if any((lo[i] - p) % s for p in starts):
            return None  # a sibling's windows fall between the merged conv's
        reach = d * (kernel[i] - 1) + 1
        need = 0
        for j, (c, p) in enumerate(zip(convs, starts)):
            offsets[j][i] = (lo[i] - p) // s
            need = max(need, offsets[j][i] + b.shape(c.outputs[0])[2 + i])
        hi[i] = max(0, (need - 1) * s + reach - size[i] - lo[i])
    ws = [c.inputs[1] for c in convs]
    ws = [w if b.shape(w)[2:] == kernel else b.one("Enlarge", [w], kernel_shape=kernel) for w in ws]
    params = [b.one("Concat", ws, axis=0)]
    if len(convs[0].inputs) > 2:
        params.append(b.one("Concat", [c.inputs[2] for c in convs], axis=0))
    attrs = {**a0, "kernel_shape": kernel, "pads": (*lo, *hi)}
    y = b.one("Conv", [convs[0].inputs[0], *params], **attrs)
    channels = list(itertools.accumulate(b.shape(c.outputs[0])[1] for c in convs))
    outs = []
    for c, part, (oh, ow) in zip(convs, b.split(y, 1, channels[:-1]), offsets):
        _, _, h, w = b.shape(c.outputs[0])
        outs.append(b.take(b.take(part, 2, oh, oh + h), 3, ow, ow + w))
    return Mutant(tuple(outs), tuple({} for _ in convs))


@mutator("batch-to-rows", "MatMul")
def _batch_to_rows(b: Builder, nodes: tuple[Node, ...]) -> Mutant | None:
    """A batched left operand times one matrix ([..., M, K] @ [K, N], BERT's projections) as one matrix
    product over all the batch's rows ([B*M, K] @ [K, N]), reshaped back. Exact everywhere: a matmul has no
    window, so a layout change that keeps each row with its own weights is right everywhere or nowhere."""
    (mm,) = nodes
    a, c = mm.inputs
    sa, sc = b.shape(a), b.shape(c)
    if len(sa) < 3 or len(sc) > len(sa) or any(d != 1 for d in sc[:-2]):
        return None
    if len(sc) > 2:
        c = b.one("Reshape", [c, b.const(sc[-2:])])
    y = b.one("MatMul", [b.one("Reshape", [a, b.const((math.prod(sa[:-1]), sa[-1]))]), c])
    return single(b.one("Reshape", [y, b.const((*sa[:-1], sc[-1]))]))


@mutator("merge-matmuls", "MatMul", merges=())
def _merge_matmuls(b: Builder, mms: tuple[Node, ...]) -> Mutant | None:
    """Sibling MatMuls of one left operand by matrices ([..., K] @ [K, N_i]: Q, K and V projections) as one
    product by the matrices side by side, split back. Exact everywhere; TASO's rules reach the same merge two
    siblings at a time, this takes any number in one step."""
    if any(len(b.shape(m.inputs[1])) != 2 for m in mms):
        return None
    y = b.one("MatMul", [mms[0].inputs[0], b.one("Concat", [m.inputs[1] for m in mms], axis=1)])
    cuts = list(itertools.accumulate(b.shape(m.inputs[1])[1] for m in mms))
    return Mutant(tuple(b.split(y, len(b.shape(y)) - 1, cuts[:-1])), tuple({} for _ in mms))


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


# ---- mutants in a model graph -----------------------------------------------------------------------------------


def sites(g: Graph, kind: MutantKind) -> Iterator[tuple[Node, ...]]:
    """The nodes of ``g`` that ``kind`` may mutate together: each node of its op alone, or for a merging kind
    each group of two or more siblings (one activation read first, weights beside it, attributes alike except
    the ones the kind reconciles)."""
    static = [
        n
        for n in g.nodes
        if n.op == kind.op and not n.is_opaque and all(g.types[v].is_static for v in (*n.inputs, *n.outputs))
    ]
    if kind.merges is None:
        yield from ((n,) for n in static)
        return
    kinds = g.kinds
    groups: dict[tuple, list[Node]] = {}
    for n in static:
        if all(kinds[v] is not Kind.ACTIVATION for v in n.inputs[1:]):
            alike = tuple((k, v) for k, v in n.attrs if k not in kind.merges)
            groups.setdefault((n.inputs[0], len(n.inputs), alike), []).append(n)
    yield from (tuple(group) for group in groups.values() if len(group) > 1)


def mutate(g: Graph, nodes: Sequence[Node], kind: str, fix: Plan) -> Graph | None:
    """``g`` with ``nodes`` replaced by ``kind``'s mutant corrected by ``fix`` (None if that makes a cycle)."""
    b = Builder(g.types, list(g.values()))
    mutant = MUTATORS[kind].build(b, tuple(nodes))
    assert mutant is not None, "a planned mutant must build"
    outs = correct(b, nodes, mutant, fix)
    rename = {new: n.outputs[0] for n, new in zip(nodes, outs)}  # the originals' names: consumers stay valid
    new_nodes = [
        replace(n, inputs=tuple(rename.get(v, v) for v in n.inputs), outputs=tuple(rename.get(o, o) for o in n.outputs))
        for n in b.nodes
    ]
    kept = [n for n in g.nodes if all(n is not m for m in nodes)]
    order = topological_order(kept + new_nodes, set(g.inputs) | set(g.weights) | set(b.data))
    if order is None:
        return None
    types = {v: t for v, t in b.types.items() if v not in rename}
    types.update((n.outputs[0], g.types[n.outputs[0]]) for n in nodes)
    return lint(
        eliminate_dead(
            replace(g, nodes=tuple(order), weights=(*g.weights, *b.data), data={**g.data, **b.data}, types=types)
        )
    )


def mutations(g: Graph) -> Iterator[tuple[str, Graph]]:
    """Every corrected mutant of ``g``'s compute ops with static shapes: the search's PET candidates, each
    named by kind, nodes and the share of their output the correction recomputes."""
    for kind, spec in MUTATORS.items():
        for nodes in sites(g, spec):
            fix = plan(kind, nodes, g.types)
            if fix is None:
                continue
            h = mutate(g, nodes, kind, fix)
            if h is not None:
                label = "+".join(n.name or n.outputs[0] for n in nodes)
                yield f"{PREFIX}{kind} {label} (corrects {fix.fraction:.1%})", h
