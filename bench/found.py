"""Which hand-written rules a target run finds (issue 48's "found, not written"): a rule is found when a generated
rule says the same, by `taso.rules.rule_id` taken on a canonical form of both.

`rule_id` binds a rule to its content: ops, attributes, types, constants and which input each node reads, by
position. Two spellings the matcher treats as one are made one here: a commutative node's operand that is an input
or a constant goes second, after one a node computes (the generator writes ``Mul(c, x)`` and ``Add(m, s)``
where a hand writes ``Mul(x, c)`` and ``Add(s, m)``; the matcher tries both orders). Looser, `scalar_constants` says whether a rule is found but for the form of its constants (one (1,)
weight per operand in the file, one scalar in the generator's pool): such a rule matches other models, so it
is reported apart, never counted as found."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from taso import ops
from taso.ir import Graph, TensorType, WeightData
from taso.rules import Rule, rule_id
from taso.verify.admit import normalised


def _leaves_second(g: Graph) -> Graph:
    """``g`` with each commutative binary node's leaf operand (an input or a constant) second."""
    leaves = {*g.inputs, *g.weights}
    nodes = []
    for n in g.nodes:
        a = n.inputs
        if len(a) == 2 and ops.OPS[n.op].commutative and a[0] in leaves and a[1] not in leaves:
            n = dataclasses.replace(n, inputs=(a[1], a[0]))
        nodes.append(n)
    return dataclasses.replace(g, nodes=tuple(nodes))


def canonical_id(rule: Rule) -> str:
    """The id of ``rule`` in the catalogue's normal form, leaf operands second."""
    r = normalised(rule)
    return rule_id(Rule(_leaves_second(r.src), _leaves_second(r.dst), r.name, r.conditions))


def scalar_constants(rule: Rule) -> Rule:
    """``rule`` with each one-element float constant of its source a scalar, constants of one value one weight."""
    g = rule.src
    keep: dict[float, str] = {}
    rename: dict[str, str] = {}
    for w in g.weights:
        d = g.data.get(w)
        if d is not None and d.array.size == 1 and d.array.dtype.kind == "f":
            rename[w] = keep.setdefault(float(d.array.reshape(())), w)
    weights = tuple(dict.fromkeys(rename.get(w, w) for w in g.weights))
    dropped = set(rename) - set(weights)
    types = {v: t for v, t in g.types.items() if v not in dropped}
    types |= {w: TensorType(g.types[w].dtype, ()) for w in keep.values()}
    data = {v: d for v, d in g.data.items() if v not in dropped}
    data |= {w: WeightData(g.data[w].array.reshape(())) for w in keep.values()}
    nodes = tuple(dataclasses.replace(n, inputs=tuple(rename.get(i, i) for i in n.inputs)) for n in g.nodes)
    src = dataclasses.replace(g, nodes=nodes, weights=weights, types=types, data=data)
    return Rule(src, rule.dst, rule.name, rule.conditions)


@dataclass(frozen=True)
class Finding:
    """One hand-written rule and what generation made of it."""

    name: str
    found: bool
    """A generated rule is the same rule (`canonical_id`)."""
    found_but_constants: bool
    """Not found, but found once its constants are scalars, one per value (`scalar_constants`)."""


def findings(written: Sequence[Rule], generated: Sequence[Rule]) -> list[Finding]:
    """For each rule of ``written``, whether ``generated`` holds it."""
    ids = {canonical_id(r) for r in generated}
    out = []
    for r in written:
        found = canonical_id(r) in ids
        out.append(Finding(r.name, found, not found and canonical_id(scalar_constants(r)) in ids))
    return out
