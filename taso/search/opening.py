"""The matches a rewrite opened (`taso.rules.fresh_matches`), found as a search asks for them: thousands of times.

A search asks `fresh_matches` for every candidate it weighs (the growth check, the lookahead, the expansion), and
ViT-B/16's cold search spent 49 s of its 85 in it (profiled on the 2-core machine): 7 of them telling which of
the index's ~400 op-count groups each graph covers, and 14 telling, for each of ~250 rules anchored at a new node,
whether the graph has a node for every node of its source. Both answers depend on far less than a graph: the
groups covered on each op's count up to the most any group needs, which the graphs of a search share; the second
on the set of node signatures the graph has, one subset test a rule. `Opening` keeps the first and tests the
second; the matching itself is `taso.rules.match`'s, called as `fresh_matches` calls it, so the matches and their
order are its. That module is verifier code (`taso.rules.provenance.VERIFIER_CODE`: a byte changed there makes
every shipped proof stale), hence this one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, KeysView

from taso.ir import Graph, Node
from taso.rules import Match, Rule, RuleIndex
from taso.rules.match import Census, Covered, _extend, _key, _pattern_signatures

KEPT = 64
"""Sets of node signatures whose fitting anchors an `Opening` keeps (`Opening.fitting`): past it, it starts anew."""


class Opening:
    """`fresh_matches` for one index, with the groups each op-count census covers kept (`covered`)."""

    def __init__(self, index: RuleIndex) -> None:
        self.index = index
        self.most: dict[str, int] = {}
        """Each op's largest count in any group: a graph's count above it covers no more."""
        for need in index.groups:
            for op, k in need:
                self.most[op] = max(self.most.get(op, 0), k)
        self.known: dict[tuple[tuple[str, int], ...], Covered] = {}
        self.needs: dict[int, frozenset[tuple]] = {}
        """The signatures of each rule's source nodes (`Present.fits`), by the rule's id: the index holds it."""
        self.near: dict[tuple[int, int], Neighbours] = {}
        """What each source node needs next to it (`_neighbours`), by the rule's id and the node's position."""
        self.fitting: dict[frozenset[tuple], dict[int, tuple[list, list[tuple[Rule, int, list[int], Neighbours]]]]] = {}
        """By the node signatures a graph has (`Present.signatures`): the anchors of each list `RuleIndex.anchored`
        gave (by its id, with the list, which holds it) whose rule fits such a graph (`Present.fits`), each with
        what its source node needs next to it. Which rules fit depends on those signatures alone (under free
        attributes they are these with the free values left out), and a pass's graphs share few sets of them:
        asking each rule of each list at each new node was 4 million calls in Llama's search (7 % of it,
        profiled). `KEPT` sets at most."""

    def covered(self, by_op: dict[str, list[Node]]) -> Covered:
        """`RuleIndex.covered`, kept by the counts that decide it."""
        counts = tuple(sorted((op, min(len(ns), self.most[op])) for op, ns in by_op.items() if op in self.most))
        if counts not in self.known:
            self.known[counts] = self.index.covered(by_op)
        return self.known[counts]

    def __call__(self, g: Graph, parent: Graph, census: Present | None = None) -> Iterator[Match]:
        """`fresh_matches(g, self.index, parent)`, one match at a time, in its order: a caller may stop early.
        ``census`` is ``g``'s, where the caller has it from another index's call."""
        before = {id(p) for p in parent.nodes}
        born = [n for n in g.nodes if id(n) not in before and not n.is_opaque]
        census = Present(g) if census is None else census
        covered = self.covered(census.by_op)
        seen: set[tuple] = set()  # a new match holds a new node, so only new matches can repeat (via two of them)
        fitting = self.fitting.get(census.signatures)
        if fitting is None:
            if len(self.fitting) >= KEPT:
                self.fitting.clear()
            fitting = self.fitting[census.signatures] = {}
        for node in born:
            anchors = self.index.anchored(g, node, covered)
            fit = fitting.get(id(anchors))
            if fit is None:
                fit = fitting[id(anchors)] = (
                    anchors,
                    [(*a, self._near(*a[:2])) for a in anchors if self._fits(census, a[0])],
                )
            for rule, position, plan, near in fit[1]:
                if not _neighbours_fit(g, node, near):
                    continue
                for nodes, values, attrs in _extend(g, rule, plan, 0, {position: node}, {}, {}):
                    m = Match(rule, nodes, values, attrs)
                    if _key(m) not in seen:
                        seen.add(_key(m))
                        yield m

    def _fits(self, census: Present, rule: Rule) -> bool:
        need = self.needs.get(id(rule))
        if need is None:
            need = self.needs[id(rule)] = frozenset(_pattern_signatures(rule.src, rule.free_attrs))
        return census.fits(rule, need)

    def _near(self, rule: Rule, position: int) -> Neighbours:
        near = self.near.get((id(rule), position))
        if near is None:
            near = self.near[id(rule), position] = _neighbours(rule.src, position)
        return near


Neighbours = tuple[tuple[tuple[int, str], ...], tuple[str, ...]]
"""What a model node standing for a source node must have next to it (`_neighbours`)."""


def _neighbours(src: Graph, position: int) -> Neighbours:
    """For source node ``position``: each (output index, op) of a source node that reads that output, and the op
    of each source node that makes one of its inputs. A match binds those readers to readers of the model node's
    output of that index, of the same op, and those makers to makers of its inputs, so a model node without
    them has no match there (`_neighbours_fit`)."""
    node = src.nodes[position]
    readers = {(j, q.op) for j, o in enumerate(node.outputs) for q in src.nodes if o in q.inputs}
    makers = {src.producers[v].op for v in node.inputs if v in src.producers}
    return tuple(sorted(readers)), tuple(sorted(makers))


def _neighbours_fit(g: Graph, node: Node, needed: Neighbours) -> bool:
    """Whether ``node`` of ``g`` has the neighbours ``needed``: told before `_extend` binds a value (Llama's
    search spent 41 % of its time in `_extend`, 3 million calls, profiled; with this and `Opening.fitting`, its
    search took 0.67x the CPU seconds, the same result: bench/results/2026-11-29/search-cpu-coldsearch.json)."""
    readers, makers = needed
    consumers, producers = g.consumers, g.producers
    for j, op in readers:
        if j >= len(node.outputs) or not any(c.op == op for c in consumers.get(node.outputs[j], ())):
            return False
    for op in makers:
        if not any((p := producers.get(v)) is not None and p.op == op for v in node.inputs):
            return False
    return True


@functools.lru_cache(maxsize=8)
def opening(index: RuleIndex) -> Opening:
    """The `Opening` of ``index``, made once: a search makes an `Opened` every pass (the index is held here, so its
    rules' ids stay theirs)."""
    return Opening(index)


class Present(Census):
    """A `Census` that also tells whether a rule has a stand-in for every source node (`Census.standins` is not
    None) from the signatures present alone, without the lists. It depends on the graph alone, so the indexes
    asked of one graph share it (`taso.search.growth.Opened.census`)."""

    def __init__(self, g: Graph) -> None:
        super().__init__(g)
        self._fits: dict[int, bool] = {}
        self._present: dict[frozenset[str], KeysView[tuple]] = {}

    @functools.cached_property
    def signatures(self) -> frozenset[tuple]:
        """The signatures of the graph's nodes with every attribute (`Census.with_signature`): what `fits` says
        for any rule follows from them."""
        return frozenset(self.with_signature(frozenset()).keys())

    def fits(self, rule: Rule, need: frozenset[tuple]) -> bool:
        """Whether every signature in ``need``, ``rule``'s source nodes', is present under its free attributes."""
        found = self._fits.get(id(rule))
        if found is None:
            present = self._present.get(rule.free_attrs)
            if present is None:
                present = self._present[rule.free_attrs] = self.with_signature(rule.free_attrs).keys()
            found = self._fits[id(rule)] = present >= need
        return found
