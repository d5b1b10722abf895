"""Rules as JSON: the layout of a rule form (`taso.search.rulecache`), data that no reader runs.

A form used to be a pickle, and a planted pickle ran a command; this one is read by `json`, and weights by
`numpy.frombuffer` (no object dtype). Each distinct type, node and graph is written once and named by its
position: the shipped store's rules and lifts hold 78,211 types, 42,947 nodes and 14,800 graphs, of which 604,
1,260 and 8,287 are distinct, so reading builds each once and shares it (all three are immutable and compared
by value, as the parser's equal ones are). A malformed body fails in `json`, in a constructor's own checks or
on a position out of range (`ValueError`, `TypeError`, `KeyError`, `IndexError`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from taso.ir import Graph, Node, TensorType
from taso.ir.weights import WeightData
from taso.rules import Rule, RuleIndex

Lifts = dict[int, list[Rule]]
"""The lifts of each rule (`taso.rules.lifted`), by the rule's ``id()``."""


class _Tables:
    """The distinct types, nodes and graphs met so far, each with its position."""

    def __init__(self) -> None:
        self.types: dict[TensorType, int] = {}
        self.nodes: dict[Node, int] = {}
        self.graphs: dict[str, int] = {}

    def type(self, t: TensorType) -> int:
        return self.types.setdefault(t, len(self.types))

    def node(self, n: Node) -> int:
        if n.opaque is not None:
            raise ValueError("an opaque node has no rule form")
        return self.nodes.setdefault(n, len(self.nodes))

    def graph(self, g: Graph) -> int:
        """``g``'s position: what the rule text can say (no opaque node, no model metadata), weights as bytes."""
        if g.meta != type(g.meta)():
            raise ValueError("a graph with model metadata has no rule form")
        data = [[v, str(d.dtype), d.shape, base64.b64encode(d.array.tobytes()).decode()] for v, d in g.data.items()]
        types = [[v, self.type(t)] for v, t in g.types.items()]
        entry = json.dumps([[self.node(n) for n in g.nodes], g.inputs, g.outputs, types, g.weights, data])
        return self.graphs.setdefault(entry, len(self.graphs))


def encode(rules: Sequence[Rule], lifts: Mapping[int, Sequence[Rule]], index: dict | None = None) -> str:
    """``rules`` and their ``lifts`` as JSON, with the ``index`` of their variants (`index_parts`) where given; a
    lift as the position of the rule it lifts and only what lifting changes (its graphs, and its proof's
    conditions, whose axes move)."""
    t = _Tables()
    position = {id(r): i for i, r in enumerate(rules)}
    body = {
        "rules": [
            [t.graph(r.src), t.graph(r.dst), r.name, r.conditions, r.status, r.detail, r.row, r.id] for r in rules
        ],
        "lifts": [
            [position[rid], t.graph(v.src), t.graph(v.dst), v.detail.get("conditions")]
            for rid, vs in lifts.items()
            for v in vs
        ],
    }
    body["types"] = [[t.dtype, t.shape] for t in t.types]
    body["nodes"] = [[n.op, n.inputs, n.outputs, n.attrs, n.name, n.domain, n.doc, n.implicit] for n in t.nodes]
    body["graphs"] = [json.loads(entry) for entry in t.graphs]
    if index is not None:
        body["index"] = index
    return json.dumps(body, separators=(",", ":"))


def decode(text: str | bytes) -> tuple[list[Rule], Lifts, dict | None]:
    """The rules, lifts and index parts (unchecked: `restore` checks what it uses) ``text`` (`encode`) holds;
    each lift is filed under the rule it names."""
    body = json.loads(text)
    types = [TensorType(dtype, None if shape is None else tuple(shape)) for dtype, shape in body["types"]]
    nodes = [
        Node(op, tuple(i), tuple(o), tuple((k, _attr(v)) for k, v in attrs), name, domain, doc, None, tuple(imp))
        for op, i, o, attrs, name, domain, doc, imp in body["nodes"]
    ]
    graphs = [
        Graph(
            tuple(nodes[_at(i, nodes)] for i in ns),
            tuple(ins),
            tuple(outs),
            {v: types[_at(i, types)] for v, i in tys},
            tuple(ws),
            {v: WeightData(_array(dtype, shape, b64)) for v, dtype, shape, b64 in data},
        )
        for ns, ins, outs, tys, ws, data in body["graphs"]
    ]
    rules = [
        Rule(graphs[_at(s, graphs)], graphs[_at(d, graphs)], name, tuple(conditions), status, detail, row, rule_id)
        for s, d, name, conditions, status, detail, row, rule_id in body["rules"]
    ]
    lifts: Lifts = {id(r): [] for r in rules if not r.always}
    for i, s, d, conditions in body["lifts"]:
        base = rules[_at(i, rules)]
        detail = base.detail if conditions is None else {**base.detail, "conditions": conditions}
        lifts[id(base)].append(replace(base, src=graphs[_at(s, graphs)], dst=graphs[_at(d, graphs)], detail=detail))
    return rules, lifts, body.get("index")


def index_parts(variants: Sequence[Rule], index: RuleIndex) -> dict:
    """``index`` (of ``variants``) and its shrinking one as JSON, each rule named by its position in
    ``variants``: what `restore` makes an index of some of them from, without computing it again."""
    at = {id(r): i for i, r in enumerate(variants)}

    def parts(ix: RuleIndex) -> dict:
        return {
            "rules": [at[id(r)] for r in ix.rules],
            "groups": [[need, [at[id(ix.rules[i])] for i in ps]] for need, ps in ix.groups.items()],
            "anchors": [
                [sorted(free), *signature, [[at[id(r)], node, plan] for r, node, plan in entries]]
                for (free, signature), entries in ix.anchors.items()
            ],
        }

    return {"count": len(variants), **parts(index), "shrinking": parts(index.shrinking)}


def restore(parts: dict, variants: Mapping[int, Rule], count: int) -> RuleIndex:
    """The index `index_parts` wrote of ``count`` variants, kept to ``variants`` (by their positions among
    those): every entry of another is dropped, and each kept anchor is checked to be a node of its rule's
    source with a matching order over all of them (`ValueError` else). What it is filed under (op counts,
    signatures) only says where matching looks: a match is checked node by node (`taso.rules.match`)."""
    if parts["count"] != count:
        raise ValueError(f"an index of {parts['count']} variants, not {count}")
    shrinking = _restored(parts["shrinking"], [p for p in parts["shrinking"]["rules"] if p in variants], variants)
    return _restored(parts, sorted(variants), variants, shrinking)


def _restored(
    parts: dict, order: list[int], variants: Mapping[int, Rule], shrinking: RuleIndex | None = None
) -> RuleIndex:
    at = {p: i for i, p in enumerate(order)}
    groups = {}
    for need, ps in parts["groups"]:
        if kept := [at[p] for p in ps if p in at]:
            groups[tuple((op, n) for op, n in need)] = kept
    anchors, first = {}, {}
    for free, op, attrs, inputs, entries in parts["anchors"]:
        kept = [(variants[p], node, plan) for p, node, plan in entries if p in at]
        for rule, node, plan in kept:
            if plan[:1] != [node] or sorted(plan) != list(range(len(rule.src.nodes))):
                raise ValueError(f"rule {rule.id}: {plan} is no matching order from node {node}")
        if kept:
            key = tuple((k, _attr(v)) for k, v in attrs), tuple(None if i is None else tuple(i) for i in inputs)
            anchors[frozenset(free), (op, *key)] = kept
            first[frozenset(free), (op, *key)] = next((at[p], node) for p, node, _ in entries if p in at)
    # in the order a built index files them (each by its first variant kept), not the order of all the variants
    # the form was made of: a variant left out (`taso.search.rewrite.buildable`) may have come first
    groups = dict(sorted(groups.items(), key=lambda kv: kv[1][0]))
    anchors = {k: anchors[k] for k in sorted(anchors, key=first.__getitem__)}
    return RuleIndex.of_parts([variants[p] for p in order], groups, anchors, shrinking)


def _at(i: int, seq: Sequence) -> int:
    """``i``, a position in ``seq``; `IndexError` where it is none (Python would read a negative one from the end)."""
    if not 0 <= i < len(seq):
        raise IndexError(f"position {i} of {len(seq)}")
    return i


def _attr(v: Any) -> Any:  # noqa: ANN401 (an AttrValue, whose tuples JSON wrote as lists)
    return tuple(v) if isinstance(v, list) else v


def _array(dtype: str, shape: list[int], b64: str) -> np.ndarray:
    """A weight's data from its bytes (`numpy.frombuffer`: no object dtype, nothing that runs)."""
    kind = np.dtype(dtype)
    if kind.hasobject:
        raise ValueError(f"a weight of dtype {dtype} has no rule form")
    return np.frombuffer(base64.b64decode(b64), dtype=kind).reshape(shape)
