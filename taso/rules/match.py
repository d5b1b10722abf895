"""Finding a rule's source graph inside a model graph.

A match binds every source node to a model node of the same op and attributes, and every source value to a
model value, consistently: a value read by two source nodes is one model value. Sizes are free (a rule found
on 2x4 tensors applies to 128x768 ones; `taso.rewrite` then checks that its target type-checks at the real
shapes), but ranks must agree, and element types too, except that a rule's floats stand for any one
floating type (`FLOATS`), so float32 rules rewrite float16 models; a source weight binds only to a weight or a value
computed from weights alone, so whatever the target does to it can be folded ahead of time. Commutative ops
(declared in `taso.ops`) match their inputs in either order, so no rule needs to list swapped variants.
A rule's free attributes (`Rule.free_attrs`) match any value, the same value wherever the rule's example
value is the same, and the target takes the bound values.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache

from taso import ops
from taso.ir import AttrValue, Graph, Kind, Node
from taso.rules.rule import Rule


@dataclass(frozen=True)
class Match:
    rule: Rule
    nodes: dict[int, Node]
    """Index of each source node -> the model node it stands for."""
    values: dict[str, str]
    """Source value name -> model value name."""
    attrs: dict[tuple[str, AttrValue], AttrValue] = field(default_factory=dict)
    """(free attribute, the rule's example value) -> the model's value."""


FLOATS = frozenset({"float16", "float32", "float64"})
"""Element types a rule's float values stand for. A rule is proved over the reals (`taso.verify`), so it says
no more and no less about float16 rounding than about float32; one match binds one of them throughout."""


def element_class(dtype: str) -> str:
    """What matching compares of an element type: every float type is one class."""
    return "float" if dtype in FLOATS else dtype


def float_dtype(m: Match, g: Graph) -> str:
    """The floating type ``m`` binds the rule's floats to (float32 where it binds none)."""
    return next(iter(_bound_floats(m.rule.src, g, m.values)), "float32")


def _bound_floats(src: Graph, g: Graph, values: dict[str, str]) -> set[str]:
    """The model element types the rule's float values are bound to: one, or none, in a match."""
    return {g.types[mv].dtype for rv, mv in values.items() if src.types[rv].dtype in FLOATS and mv in g.types}


def _value_ok(rule_graph: Graph, g: Graph, rv: str, mv: str) -> bool:
    rt, mt = rule_graph.types.get(rv), g.types.get(mv)
    if rt is None or mt is None or element_class(rt.dtype) != element_class(mt.dtype) or rt.rank != mt.rank:
        return False
    if rv in rule_graph.weights:
        return g.kinds.get(mv) in (Kind.WEIGHT, Kind.CONSTANT) and _same_number(rule_graph, g, rv, mv)
    return True


def _same_number(rule_graph: Graph, g: Graph, rv: str, mv: str) -> bool:
    """A rule's 0-d float constant (an epsilon) is proved as that value (`taso.verify.lowering`), so it binds only
    a model constant of that very value; any other weight binds whatever it is."""
    data = rule_graph.data.get(rv)
    if data is None or data.dtype.kind != "f" or data.shape != ():
        return True
    return mv in g.data and g.data[mv].shape == () and float(g.data[mv].array) == float(data.array)


def _node_ok(pattern: Node, candidate: Node, free: frozenset[str], bound: Bindings) -> Bindings | None:
    """The attribute bindings with ``candidate`` standing for ``pattern``, or None where it cannot."""
    if (
        candidate.is_opaque
        or candidate.op != pattern.op
        or len(candidate.inputs) != len(pattern.inputs)
        or len([o for o in candidate.outputs if o]) != len(pattern.outputs)
    ):
        return None
    if not free:
        return bound if candidate.attrs == pattern.attrs else None
    have = candidate.attr
    if have.keys() != pattern.attr.keys():
        return None
    out = bound
    for k, example in pattern.attrs:
        if k not in free:
            if have[k] != example:
                return None
        elif out.get((k, example), have[k]) != have[k]:
            return None
        elif (k, example) not in out:
            out = {**out, (k, example): have[k]}
    return out


Bindings = dict[tuple[str, AttrValue], AttrValue]


@cache
def input_orders(op: str, arity: int) -> tuple[tuple[int, ...], ...]:
    """The orders a node of ``op`` with ``arity`` inputs matches a pattern's inputs in: either way round where the
    op commutes (declared in `taso.ops`), as given otherwise. Both matchers read it: this module's, and the
    term matcher of `taso.rules.fold`."""
    if ops.get(op).commutative and arity == 2:
        return ((0, 1), (1, 0))
    return (tuple(range(arity)),)


def nodes_by_op(g: Graph) -> dict[str, list[Node]]:
    """Catalogue nodes of ``g`` by op, in graph order: built once per graph, shared by all rules."""
    index: dict[str, list[Node]] = {}
    for n in g.nodes:
        if not n.is_opaque:
            index.setdefault(n.op, []).append(n)
    return index


class Census:
    """A graph's catalogue nodes by op, and by `_signature` under each set of free attributes asked for: built
    once per graph and shared by every rule. A rule with a source node that no model node could stand for is
    skipped before any matching (DenseNet-121: most of the ~10,000 rule variants a window tries, such as those
    of two-input Concats or of Mul by a scalar, where its Concats have many inputs and its Muls a per-channel
    weight)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.by_op = nodes_by_op(g)
        self._by_signature: dict[frozenset[str], dict[tuple, list[Node]]] = {}
        self._standins: dict[int, list[list[Node]] | None] = {}

    def with_signature(self, free: frozenset[str]) -> dict[tuple, list[Node]]:
        """Signature (with ``free`` attributes' values left out) -> the nodes that have it, in graph order."""
        if free not in self._by_signature:
            found: dict[tuple, list[Node]] = {}  # a signature names its op: each list keeps by_op's graph order
            for nodes in self.by_op.values():
                for n in nodes:
                    found.setdefault(_signature(self.g, n, free), []).append(n)
            self._by_signature[free] = found
        return self._by_signature[free]

    def standins(self, rule: Rule) -> list[list[Node]] | None:
        """For each source node of ``rule``, the model nodes that could stand for it; None where one has none."""
        if id(rule) not in self._standins:
            signatures = self.with_signature(rule.free_attrs)
            found = [signatures.get(s, []) for s in _pattern_signatures(rule.src, rule.free_attrs)]
            self._standins[id(rule)] = found if all(found) else None
        return self._standins[id(rule)]


def find_matches(g: Graph, rule: Rule, census: Census | None = None) -> Iterator[Match]:
    """Every match of ``rule.src`` in ``g`` (model node order, so the search is deterministic)."""
    src = rule.src
    census = Census(g) if census is None else census
    index = census.by_op
    if not src.nodes or any(len(index.get(op, ())) < k for op, k in _op_counts(src).items()):
        return
    standins = census.standins(rule)
    if standins is None:
        return
    # anchor on the source op the model has fewest of: fewest starting points to try
    anchor = min(range(len(src.nodes)), key=lambda i: (len(index[src.nodes[i].op]), -i))
    order = _plan(src, anchor)
    for candidate in standins[anchor]:
        for nodes, values, attrs in _extend(g, rule, order, 0, {anchor: candidate}, {}, {}):
            yield Match(rule, nodes, values, attrs)


@cache
def _pattern_signatures(src: Graph, free: frozenset[str]) -> tuple[tuple, ...]:
    return tuple(_signature(src, n, free) for n in src.nodes)


@cache
def _op_counts(src: Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in src.nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
    return counts


@cache
def _plan(src: Graph, anchor: int) -> list[int]:
    """Source nodes in an order where each one after the anchor shares a value with an earlier one."""
    order = [anchor]
    remaining = set(range(len(src.nodes))) - {anchor}
    while remaining:
        seen = {v for i in order for v in (*src.nodes[i].reads, *src.nodes[i].outputs)}
        nxt = next(
            (i for i in sorted(remaining, reverse=True) if seen & {*src.nodes[i].reads, *src.nodes[i].outputs}), None
        )
        if nxt is None:
            nxt = max(remaining)
        order.append(nxt)
        remaining.discard(nxt)
    return order


def _bind(src: Graph, g: Graph, values: dict[str, str], rv: str, mv: str) -> dict[str, str] | None:
    bound = values.get(rv)
    if bound is not None:
        return values if bound == mv else None
    if not _value_ok(src, g, rv, mv):
        return None
    # a source input may share a model value with another input (the rule holds for equal inputs too), but
    # an internal source value is produced by exactly one node
    if rv not in src.inputs and rv not in src.weights and mv in values.values():
        return None
    return {**values, rv: mv}


def _extend(
    g: Graph,
    rule: Rule,
    order: list[int],
    k: int,
    nodes: dict[int, Node],
    values: dict[str, str],
    attrs: Bindings,
) -> Iterator[tuple[dict[int, Node], dict[str, str], Bindings]]:
    src = rule.src
    idx = order[k]
    pattern, candidate = src.nodes[idx], nodes[idx]
    attrs_now = _node_ok(pattern, candidate, rule.free_attrs, attrs)
    if attrs_now is None or any(candidate is other for j, other in nodes.items() if j != idx):
        return
    for perm in input_orders(pattern.op, len(pattern.inputs)):
        bound: dict[str, str] | None = values
        for rv, j in zip(pattern.outputs, range(len(pattern.outputs))):
            bound = _bind(src, g, bound, rv, candidate.outputs[j]) if bound is not None else None
        for pos, j in enumerate(perm):
            if bound is None:
                break
            bound = _bind(src, g, bound, pattern.inputs[pos], candidate.inputs[j])
        if bound is None:
            continue
        if k + 1 == len(order):
            if len(_bound_floats(src, g, bound)) <= 1:
                yield dict(nodes), bound, attrs_now
            continue
        nxt = order[k + 1]
        yield from (
            found
            for option in _options(g, src.nodes[nxt], bound)
            for found in _extend(g, rule, order, k + 1, {**nodes, nxt: option}, bound, attrs_now)
        )


def _options(g: Graph, pattern: Node, values: dict[str, str]) -> list[Node]:
    """Model nodes that could stand for ``pattern`` given what is bound: producers of its bound outputs, or
    consumers of its bound inputs."""
    for rv in pattern.outputs:
        if rv in values:
            p = g.producers.get(values[rv])
            return [p] if p is not None else []
    options: list[Node] = []
    for rv in pattern.inputs:
        if rv in values:
            options += [n for n in g.consumers.get(values[rv], ()) if n.op == pattern.op and n not in options]
    return options


def _key(m: Match) -> tuple:
    return (id(m.rule), tuple(id(m.nodes[i]) for i in sorted(m.nodes)), tuple(sorted(m.values.items())))


def _signature(g: Graph, n: Node, free: frozenset[str] = frozenset()) -> tuple:
    """What `_extend` requires of a model node standing for pattern node ``n`` before it looks at neighbours:
    the same op and attributes (but for the ``free`` ones, whose names alone count), and inputs of the same
    element types and ranks (in any order where the op commutes). Model nodes and pattern nodes with different
    signatures never match."""
    types = [g.types.get(v) for v in n.inputs]
    inputs = [None if t is None else (element_class(t.dtype), t.rank) for t in types]
    if len(input_orders(n.op, len(n.inputs))) > 1:
        inputs.sort(key=str)
    attrs = tuple((k, None if k in free else v) for k, v in n.attrs) if free else n.attrs
    return n.op, attrs, tuple(inputs)


Covered = tuple[tuple[tuple[str, int], ...], ...]
"""Source op counts (sorted (op, count) pairs) of the rule groups a graph could match: `RuleIndex.covered`."""


class RuleIndex:
    """Rules prepared once for matching many graphs. A match needs a distinct model node for every source node,
    so a graph with fewer nodes of some op than a rule's source cannot match it: rules are grouped by their
    source's op counts (a store of ~10,000 rule variants has ~150 distinct ones), and a graph tries only the
    groups its census covers, without scanning the rest one by one. Source nodes are also indexed by
    `_signature`, so a new node is tried only where it could stand. Order is kept: rules are tried as given."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self.groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
        """Source op counts -> positions in ``rules`` of the rules whose source has exactly those counts."""
        self.anchors: dict[tuple, list[tuple[Rule, int, list[int]]]] = {}
        """(free attribute names, signature) -> every (rule, position of a source node with that signature, the
        matching order from there)."""
        self.free_sets = sorted({r.free_attrs for r in self.rules}, key=sorted)
        """The rules' distinct sets of free attributes: a model node is looked up once under each."""
        for i, rule in enumerate(self.rules):
            self.groups.setdefault(tuple(sorted(_op_counts(rule.src).items())), []).append(i)
            for position, pattern in enumerate(rule.src.nodes):
                anchor = (rule, position, _plan(rule.src, position))
                key = (rule.free_attrs, _signature(rule.src, pattern, rule.free_attrs))
                self.anchors.setdefault(key, []).append(anchor)
        self._usable: dict[Covered, list[Rule]] = {}
        self._anchored: dict[tuple[tuple, Covered], list[tuple[Rule, int, list[int]]]] = {}
        self._shrinking: RuleIndex | None = None

    @classmethod
    def of_parts(
        cls,
        rules: Sequence[Rule],
        groups: dict[tuple[tuple[str, int], ...], list[int]],
        anchors: dict[tuple, list[tuple[Rule, int, list[int]]]],
        shrinking: RuleIndex | None = None,
    ) -> RuleIndex:
        """The index of ``rules`` from its ``groups`` and ``anchors`` made before (the shipped rules' are, by
        `taso.search.rulecache`, which checks them against the rules): computing them takes a second of a cold
        start. Matching checks every node of a match itself, so they only say where to look."""
        index = cls([])
        index.rules, index.groups, index.anchors = list(rules), groups, anchors
        index.free_sets = sorted({r.free_attrs for r in index.rules}, key=sorted)
        index._shrinking = shrinking
        return index

    @property
    def shrinking(self) -> RuleIndex:
        """The index of the rules that shrink (`Rule.shrinks`), made when first asked for."""
        if self._shrinking is None:
            self._shrinking = RuleIndex([r for r in self.rules if r.shrinks])
        return self._shrinking

    def covered(self, census: dict[str, list[Node]]) -> Covered:
        """The op-count groups a graph with these nodes by op (`nodes_by_op`) has enough nodes for."""
        return tuple(need for need in self.groups if need and all(len(census.get(op, ())) >= k for op, k in need))

    def usable(self, covered: Covered) -> list[Rule]:
        """The rules of the ``covered`` groups, in order."""
        if covered not in self._usable:
            self._usable[covered] = [self.rules[i] for i in sorted(i for need in covered for i in self.groups[need])]
        return self._usable[covered]

    def anchored(self, g: Graph, node: Node, covered: Covered) -> list[tuple[Rule, int, list[int]]]:
        """The ``anchors`` a model node of ``g`` could stand for, only of the rules of the ``covered`` groups."""
        signature = _signature(g, node)
        if (signature, covered) not in self._anchored:
            usable = {id(r) for r in self.usable(covered)}
            found = [
                a
                for free in self.free_sets
                for a in self.anchors.get((free, _signature(g, node, free)), ())
                if id(a[0]) in usable
            ]
            self._anchored[signature, covered] = found
        return self._anchored[signature, covered]


def all_matches(g: Graph, rules: Sequence[Rule] | RuleIndex) -> list[Match]:
    """Every match of every rule in ``g``, rules in order."""
    census = Census(g)
    usable = rules.usable(rules.covered(census.by_op)) if isinstance(rules, RuleIndex) else rules
    return [m for rule in usable for m in find_matches(g, rule, census)]


def matches_after(g: Graph, rules: RuleIndex, parent: Graph, parent_matches: list[Match]) -> list[Match]:
    """Every match in ``g``, a rewrite of ``parent``, without rescanning what did not change.

    Nodes are immutable and shared, so a parent match whose nodes all survive is still a match (the types and
    kinds of the values it binds are unchanged); every other match contains a node the rewrite made, and is
    found by anchoring each pattern (`RuleIndex.anchored`) at those nodes."""
    return surviving(g, parent_matches) + fresh_matches(g, rules, parent)


def surviving(g: Graph, parent_matches: list[Match]) -> list[Match]:
    """The matches of a parent graph that ``g``, its rewrite, still has: those whose nodes all survive."""
    alive = {id(n) for n in g.nodes}
    return [m for m in parent_matches if all(id(n) in alive for n in m.nodes.values())]


def fresh_matches(g: Graph, rules: RuleIndex, parent: Graph) -> list[Match]:
    """The matches in ``g``, a rewrite of ``parent``, that hold a node the rewrite made: what the rewrite
    opened (`matches_after` adds the parent's matches that survive)."""
    before = {id(p) for p in parent.nodes}
    born = [n for n in g.nodes if id(n) not in before and not n.is_opaque]
    census = Census(g)
    covered = rules.covered(census.by_op)
    seen: set[tuple] = set()  # a new match holds a new node, so only new matches can repeat (via two of them)
    fresh: list[Match] = []
    for node in born:
        for rule, position, plan in rules.anchored(g, node, covered):
            if census.standins(rule) is None:
                continue
            for nodes, values, attrs in _extend(g, rule, plan, 0, {position: node}, {}, {}):
                m = Match(rule, nodes, values, attrs)
                if _key(m) not in seen:
                    seen.add(_key(m))
                    fresh.append(m)
    return fresh
