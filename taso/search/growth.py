"""Which growing rewrites the search costs: those that open a rewrite that does not grow with the nodes around them.

TASO's alpha lets a graph a few percent dearer into the queue so that a rewrite that costs can be repaid by
one it opens. A rule that only grows the graph (the reverse of a fusion, a merge or a cancellation) repays
nothing unless what it builds takes part in a cheaper rewrite; where it opens only its own undo, costing it
spends the search's candidates (`taso.search.backtrack.CANDIDATES`) on graphs that are never chosen.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from taso.ir import Graph, Kind, Node
from taso.rules import Match, Rule, RuleIndex, fresh_matches

DEAD_END = "the rewrite grows the graph and opens no rewrite that could repay it"
"""Why a growing rewrite is not costed (`Opens`): the reason the search counts it under."""


def grows(rule: Rule) -> bool:
    """Whether ``rule``'s target runs more ops on activations than its source (`Rule.shrinks` read the other
    way: weight-only ops fold away)."""
    return _live_ops(rule.dst) > _live_ops(rule.src)


def _live_ops(g: Graph) -> int:
    return sum(any(g.kinds.get(o) is Kind.ACTIVATION for o in n.outputs) for n in g.nodes)


@functools.lru_cache(maxsize=4)
def growing(index: RuleIndex) -> frozenset[int]:
    """The ids of ``index``'s rules that grow the graph (`grows`), asked once per index: a search builds an
    `Opens` for every region and pass, and asking each of the shipped index's ~18,000 variants anew cost
    ELECTRA's search on the CPU 0.4 s of its 2.55 s (the index is held here, so its rules' ids stay theirs)."""
    return frozenset(id(r) for r in index.rules if grows(r))


@functools.lru_cache(maxsize=4)
def not_growing(index: RuleIndex) -> RuleIndex:
    """``index`` kept to its rules that do not grow, made from its parts (no rule is indexed again): what `Opens`
    matches where the rewrite's matches were not found yet, as only those count there."""
    grow = growing(index)
    groups = {
        need: kept for need, ps in index.groups.items() if (kept := [i for i in ps if id(index.rules[i]) not in grow])
    }
    anchors = {
        k: kept for k, entries in index.anchors.items() if (kept := [a for a in entries if id(a[0]) not in grow])
    }
    return RuleIndex.of_parts(index.rules, groups, anchors)


@functools.lru_cache(maxsize=4)
def reach(index: RuleIndex) -> int:
    """The most nodes of a source of ``index``'s rules that do not grow (`Opens`), asked once per index."""
    grow = growing(index)
    return max((len(r.src.nodes) for r in index.rules if id(r) not in grow), default=0)


class Opens:
    """Whether a growing rewrite opens a match of a rule that does not grow (one that shrinks, or moves an op
    through another: a shrink may repay it later) holding a node around what it built: only then can it lead to
    a cheaper graph. Without this, the reverse rules that wrap a Relu in two Transposes were most of the 3,000
    candidates of RegNet's search, each costed and queued (alpha lets a graph a few percent dearer in), none
    expanded into anything cheaper. A match within what it built only
    rewrites the growth (its undo), and a rewrite of the rest that the grown nodes take no part in is as open
    to the graph before the growth. Asking for a shrinking match alone was too strict: EfficientNet-B0's best
    graph splits a Conv over an Add, then merges and widens it, three steps to the first that pays
    (0.970 of the original's cost, 0.973 without them).

    The same growth recurs in every graph of a pass that keeps its match, so each answer is kept under the
    match and every node within reach of it (as many steps, node to value to node, as the largest source of a
    rule that does not grow has nodes): what a match there could hold, so a kept answer is the one matching
    would give."""

    def __init__(self, opened: Opened) -> None:
        self.opened = opened
        self.index = opened.index
        self.growing = growing(self.index)
        self.rest = not_growing(self.index)
        self.reach = reach(self.index)
        self.known: dict[tuple, tuple[bool, tuple[Node, ...]]] = {}
        """Answers by (rule, the ids of the nodes within reach), each with those nodes: held, their ids are not
        reused by other nodes while the answer stands."""

    def __call__(self, new: Graph, current: Graph, match: Match) -> bool:
        around = near(current, match.nodes.values(), self.reach)
        key = (match.rule.id, frozenset(around))
        if key not in self.known:
            born = {id(n) for n in new.nodes} - {id(n) for n in current.nodes}
            found = self.opened.known.get((id(new), id(current)))
            opening = (
                [m for m in found[2] if id(m.rule) not in self.growing]
                if found is not None
                else fresh_matches(new, self.rest, current)
            )
            opens = any(not {id(n) for n in m.nodes.values()} <= born for m in opening)
            self.known[key] = (opens, tuple(around.values()))
        return self.known[key][0]


class Opened:
    """The matches each rewrite opened (`fresh_matches`), found once per graph and parent for a search pass: the
    growth check (`Opens`), the lookahead (its shrinking ones, and all of them for a pair's graph) and the
    expansion of a queued graph each asked again for the same ones (ResNet-50's search on the CPU: 3,436 calls,
    29 s of its 105). Each answer holds its two graphs, so their ids are not reused while it stands."""

    def __init__(self, index: RuleIndex) -> None:
        self.index = index
        self.known: dict[tuple[int, int], tuple[Graph, Graph, list[Match]]] = {}

    def __call__(self, g: Graph, parent: Graph) -> list[Match]:
        """Every match in ``g``, a rewrite of ``parent``, that holds a node the rewrite made."""
        key = (id(g), id(parent))
        if key not in self.known:
            self.known[key] = (g, parent, fresh_matches(g, self.index, parent))
        return self.known[key][2]

    def shrinking(self, g: Graph, parent: Graph) -> list[Match]:
        """Those of the rules that shrink (`RuleIndex.shrinking`), in its order: taken from all of them where
        they were found (the shrinking index keeps the full one's order), else found alone (fewer rules)."""
        known = self.known.get((id(g), id(parent)))
        if known is not None:
            return [m for m in known[2] if m.rule.shrinks]
        return fresh_matches(g, self.index.shrinking, parent)


def near(g: Graph, nodes: Iterable[Node], steps: int) -> dict[int, Node]:
    """The nodes of ``g`` within ``steps`` of ``nodes``, by id, a step being to a node that reads or writes
    a value the node reads or writes (siblings of a shared input are a step apart)."""
    ring = {id(n): n for n in nodes}
    edge = list(ring.values())
    for _ in range(steps):
        nxt = []
        for n in edge:
            for v in (*n.reads, *n.outputs):
                producer = g.producers.get(v)
                for m in (*g.consumers.get(v, ()), *((producer,) if producer is not None else ())):
                    if id(m) not in ring:
                        ring[id(m)] = m
                        nxt.append(m)
        edge = nxt
    return ring
