"""Which growing rewrites the search costs: those that open a rewrite that does not grow with the nodes around them.

TASO's alpha lets a graph a few percent dearer into the queue so that a rewrite that costs can be repaid by
one it opens. A rule that only grows the graph (the reverse of a fusion, a merge or a cancellation) repays
nothing unless what it builds takes part in a cheaper rewrite; where it opens only its own undo, costing it
spends the search's candidates (`taso.search.backtrack.CANDIDATES`) on graphs that are never chosen.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable

from taso.ir import Graph, Kind, Node
from taso.rules import Match, Rule, RuleIndex
from taso.search.opening import Present, opening

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


TIERS = (3, 4)
"""The most source nodes of the rules of each tier but the last that `Opens` asks about apart (`tiers`): of the
shipped index's ~17,600 rules that do not grow, 90 % have at most 3 nodes, 9 % have 4 and a few up to 10."""


@functools.lru_cache(maxsize=4)
def tiers(index: RuleIndex) -> tuple[tuple[RuleIndex, frozenset[int]], ...]:
    """``index`` kept to its rules that do not grow (only those count in `Opens`), cut by their sources' nodes at
    `TIERS`, smallest first, each with its rules' ids; made from its parts (no rule is indexed again)."""
    grow = growing(index)
    bounds = (0, *TIERS, max((len(r.src.nodes) for r in index.rules), default=0))
    cuts = [
        frozenset(id(r) for r in index.rules if id(r) not in grow and low < len(r.src.nodes) <= high)
        for low, high in itertools.pairwise(bounds)
    ]
    return tuple((_kept(index, keep), keep) for keep in cuts)


def _kept(index: RuleIndex, keep: frozenset[int]) -> RuleIndex:
    groups = {
        need: kept for need, ps in index.groups.items() if (kept := [i for i in ps if id(index.rules[i]) in keep])
    }
    anchors = {k: kept for k, entries in index.anchors.items() if (kept := [a for a in entries if id(a[0]) in keep])}
    return RuleIndex.of_parts(index.rules, groups, anchors)


def reach(index: RuleIndex) -> int:
    """The most nodes of a source of ``index``'s rules (`Opens`): as many steps from a match as a match of one of
    them that holds a node next to it can reach."""
    return max((len(index.rules[i].src.nodes) for ps in index.groups.values() for i in ps), default=0)


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
    would give. Each of the `tiers` is asked apart, smallest rules first (where one opens, the rest are not
    asked), its answers kept under the nodes within its own reach: a few rules reach 10 steps, which in a region
    of ViT-B/16 is almost every node, so an answer kept under those alone was never asked for again (3,072
    asked, 36 s of its 85 s search, profiled); the rules of up to 3 nodes had 3,039 of their 3,072 answers
    kept, those of 4 had 1,074, the rest none (from 5 nodes up, none cut at 6 either). A tier's answer is kept
    under the match's own nodes and values too, as two matches of a rule can have the same nodes within a short
    reach. The whole answer is kept by the rule and the nodes within reach of every rule alone: two matches of a
    rule there share it (the wrap of a chain's last Relu is told what the wrap of its first opened), a coarser
    check kept on purpose: keyed by the match too, three zoo models came out costlier (efficientnet_b0_ts
    0.9698 -> 0.9731, inception_v3 and inception_v3_ts by 0.1 %), none cheaper, and the search took 1.08-1.24x
    the CPU (coldsearch, bench/results/2026-11-29/search-cpu-growthkey.json)."""

    def __init__(self, opened: Opened) -> None:
        self.opened = opened
        self.tiers = [(opening(t), rules, reach(t)) for t, rules in tiers(opened.index)]
        self.reach = max((steps for _, _, steps in self.tiers), default=0)
        self.known: dict[tuple, tuple[bool, tuple[Node, ...]]] = {}
        """Answers by (rule, the ids of the nodes within reach of any rule), each with those nodes: held, their ids
        are not reused by other nodes while the answer stands."""
        self.tier_known: dict[tuple, tuple[bool, tuple[Node, ...]]] = {}
        """Each tier's answers by (rule, tier, the match's nodes and values, the ids of the nodes within the tier's
        reach), each with those nodes."""

    def __call__(self, new: Graph, current: Graph, match: Match) -> bool:
        around = near(current, match.nodes.values(), self.reach)
        key = (match.rule.id, frozenset(around))
        if key not in self.known:
            opens = any(self._opens(new, current, match, k) for k in range(len(self.tiers)))
            self.known[key] = (opens, tuple(around.values()))
        return self.known[key][0]

    def _opens(self, new: Graph, current: Graph, match: Match, tier: int) -> bool:
        """Whether the rewrite opens a match of a rule of ``tier`` that holds an older node."""
        find, rules, steps = self.tiers[tier]
        around = near(current, match.nodes.values(), steps)
        site = (tuple(id(n) for n in match.nodes.values()), tuple(sorted(match.values.items())))
        key = (match.rule.id, tier, site, frozenset(around))
        if key not in self.tier_known:
            born = {id(n) for n in new.nodes} - {id(n) for n in current.nodes}
            found = self.opened.known.get((id(new), id(current)))
            opened = (
                (m for m in found[2] if id(m.rule) in rules)
                if found is not None
                else find(new, current, self.opened.census(new))  # the first that holds an older node answers
            )
            opens = any(not {id(n) for n in m.nodes.values()} <= born for m in opened)
            self.tier_known[key] = (opens, tuple(around.values()))
        return self.tier_known[key][0]


class Opened:
    """The matches each rewrite opened (`fresh_matches`), found once per graph and parent for a search pass: the
    growth check (`Opens`), the lookahead (its shrinking ones, and all of them for a pair's graph) and the
    expansion of a queued graph each asked again for the same ones (ResNet-50's search on the CPU: 3,436 calls,
    29 s of its 105). Each answer holds its two graphs, so their ids are not reused while it stands."""

    def __init__(self, index: RuleIndex) -> None:
        self.index = index
        self.known: dict[tuple[int, int], tuple[Graph, Graph, list[Match]]] = {}
        self.last: Present | None = None

    def census(self, g: Graph) -> Present:
        """``g``'s `Present`, kept for the graph asked last: a candidate is asked of in turn by the growth check's
        two tiers, the lookahead and its expansion, and each built it anew (its node signatures under every set
        of free attributes). Told by identity, so a new graph at an old id is not taken for it."""
        if self.last is None or self.last.g is not g:
            self.last = Present(g)
        return self.last

    def __call__(self, g: Graph, parent: Graph) -> list[Match]:
        """Every match in ``g``, a rewrite of ``parent``, that holds a node the rewrite made."""
        key = (id(g), id(parent))
        if key not in self.known:
            self.known[key] = (g, parent, list(opening(self.index)(g, parent, self.census(g))))
        return self.known[key][2]

    def shrinking(self, g: Graph, parent: Graph) -> list[Match]:
        """Those of the rules that shrink (`RuleIndex.shrinking`), in its order: taken from all of them where
        they were found (the shrinking index keeps the full one's order), else found alone (fewer rules)."""
        known = self.known.get((id(g), id(parent)))
        if known is not None:
            return [m for m in known[2] if m.rule.shrinks]
        return list(opening(self.index.shrinking)(g, parent, self.census(g)))


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
