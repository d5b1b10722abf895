"""Mutant kinds: each builds, with a `Builder`, a mutant of one compute op (or of sibling ops at once) that
agrees with it on most of the output, and names the split points of the boxes where it may differ."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from taso import ops
from taso.ir import AttrValue, Node, TensorType, WeightData, fresh_names, make_attrs


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
