"""A rule's sides compared again at other sizes, so that a pair equal only at its example's sizes never reaches
the store.

A fingerprint is exact, but only at the sizes it evaluates, and a stored rule is read as a schema over sizes
(`taso.rules.match`: a rule found on 2x4 tensors applies to 128x768 ones). A mean over an axis of size 2 plus
itself equals the sum over it at [2, 4] and nowhere else; z3 can never prove such a pair (it is false at other
sizes), and it would cost `subst verify` its time and read as a missing axiom. So each candidate is evaluated
once more with its sizes grown: every size n of its inputs, of a generator's ``shape`` attribute, of a Slice's
bounds and of a sizing input's data (`OpDef.static_inputs`: a Split's sizes, an Expand's target) becomes
n * `GROW`, shapes are inferred again, and the two sides' exact fingerprints (`taso.generate.fingerprint`)
must still agree, output by output.

Growing a size 1 too catches a mean over a size-1 axis passed for a sum; where that does not type-check (a
row broadcast over a matrix) or the sides' shapes part, sizes of 1 stay 1 and the rest grow. Every size grows
alike, so sizes equal at the example stay equal and sums of them stay sums: a proof may rest on those (a
proved rule's `SameSize` conditions; a softmax's mean over a square weight), and growing one axis apart
would drop such rules. A rule no instantiation fits (a Reshape target that is a product of sizes, a Gather's
indices, a convolution) keeps the one check it had: it is counted as not resized, and stored as before.

A run screens its pairs (`screen`) before its fold (`taso.generate.driver`), so that no true rule is folded away
as derivable through a pair the screen then drops.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import NamedTuple

import numpy as np

from taso import ops
from taso.generate.fingerprint import output_digests
from taso.ir import Graph, TensorType, WeightData, make_attrs
from taso.rules import Rule

GROW = 3
"""What every grown size is multiplied by. A product keeps the sums between sizes that a Concat or a Split
makes (a [4] of two [2] pieces becomes a [12] of two [6] pieces), and keeps each seam where it was relative
to the sizes; a product of sizes (a Reshape target) it does not keep, so such a rule does not resize."""

SIZE_ATTRS = ("shape", "starts", "ends")
"""Attributes that are sizes or positions: a generator's (Ones, Eye) output shape, a Slice's bounds."""

FIXING = ("indices", "kernel_shape")
"""Attributes no grown size fits: positions listed one by one (a Gather's), a window's or an Enlarge's kernel
(its pads and strides were chosen for the example's sizes). A windowed op (`ops.WINDOWED`) fixes its rule too."""

_END = 1 << 30
"""Positions this far out are "to the end" (ONNX writes INT64_MAX): they stay as they are."""


class Verdict(Enum):
    """What the second instantiation says of a pair."""

    HOLDS = "holds at grown sizes"
    DIFFERS = "differs at grown sizes (true only at its example's sizes)"
    FIXED = "its sizes cannot be grown (kept on the one check)"


class Screened(NamedTuple):
    """A run's (fingerprint, rule) pairs, those that differ at grown sizes dropped, and the counts."""

    rules: list[tuple[str, Rule]]
    size_dependent: int
    """Dropped: the sides differ at grown sizes (`Verdict.DIFFERS`), so no proof can hold."""
    fixed: list[bool]
    """For each kept rule: whether it is kept on the one check, its sizes unable to grow (`Verdict.FIXED`)."""


def screen(rules: list[tuple[str, Rule]]) -> Screened:
    """``rules`` but those whose sides differ at grown sizes, in order."""
    verdicts = [check(rule) for _, rule in rules]
    kept = [(r, v) for r, v in zip(rules, verdicts) if v is not Verdict.DIFFERS]
    return Screened([r for r, _ in kept], len(rules) - len(kept), [v is Verdict.FIXED for _, v in kept])


def check(rule: Rule, seed: int = 0) -> Verdict:
    """Whether ``rule``'s sides compute the same outputs, output by output, at grown sizes (sizes of 1 grown
    too where the rule allows it)."""
    for keep_ones in (False, True):
        verdict = _compare(rule, keep_ones, seed)
        if verdict is not Verdict.FIXED:
            return verdict
    return Verdict.FIXED


def _compare(rule: Rule, keep_ones: bool, seed: int) -> Verdict:
    src, dst = grown(rule.src, keep_ones), grown(rule.dst, keep_ones)
    if src is None or dst is None or _shapes(src) != _shapes(dst):
        return Verdict.FIXED
    try:
        same = output_digests(src, seed) == output_digests(dst, seed)
    except (ops.OpError, ValueError):
        return Verdict.FIXED
    return Verdict.HOLDS if same else Verdict.DIFFERS


def _shapes(g: Graph) -> list:
    return [g.types[o].shape for o in g.outputs]


def _size(n: int, keep_ones: bool) -> int:
    """A size or position times `GROW` (counted from the end too), except 0, "to the end", and 1 with
    ``keep_ones``."""
    return n if abs(n) >= _END or (keep_ones and n == 1) else n * GROW


def grown(g: Graph, keep_ones: bool) -> Graph | None:
    """``g`` with every size of its data-free inputs, its size attributes and its sizing data grown (`_size`)
    and its other types inferred again; None where it no longer type-checks or cannot grow."""
    sizing = {v for n in g.nodes for k, v in enumerate(n.inputs) if k in ops.size_inputs(n.op)}
    types = dict(g.types)
    data = dict(g.data)
    for name in (*g.inputs, *g.weights):
        t = g.types[name]
        if name in sizing and name in g.data:
            sizes = [
                _size(d, keep_ones) if d > 0 else d for d in g.data[name].array.reshape(-1).tolist()
            ]  # -1: inferred
            data[name] = WeightData(np.array(sizes, dtype=np.int64).reshape(g.data[name].shape))
        elif name not in g.data:
            if not t.is_static:
                return None
            types[name] = TensorType(t.dtype, tuple(_size(int(d), keep_ones) for d in t.shape or ()))
    nodes = []
    for n in g.nodes:
        attrs = n.attr
        if n.op in ops.having(ops.WINDOWED) or any(a in attrs for a in FIXING):
            return None
        for a in SIZE_ATTRS:
            if a in attrs:
                attrs[a] = tuple(_size(int(d), keep_ones) for d in attrs[a])  # type: ignore[union-attr]
        consts = [data[v].array if v in data else None for v in n.inputs]
        try:
            outs = ops.infer(n.op, [types[v] for v in n.inputs], attrs, consts, len(n.outputs))
        except ops.OpError:
            return None
        types.update(zip(n.outputs, outs))
        nodes.append(replace(n, attrs=make_attrs(attrs)))
    return replace(g, nodes=tuple(nodes), types=types, data=data)
