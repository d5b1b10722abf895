"""The rules as the search uses them: each with its lifts to higher ranks and read backwards where its proof
covers that (`both_directions`), and the rules marked ``always`` applied wherever they match before the search
(`apply_everywhere`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

from taso.ir import Graph
from taso.rules import REVERSE, Rule, RuleIndex, all_matches, lifted, matches_after
from taso.search.rewrite import Declined, apply, buildable


def with_lifts(rules: Iterable[Rule], lift_to: tuple[int, ...] = (3, 4)) -> list[Rule]:
    """Each rule, then its lifts to the given ranks where that is sound (`taso.rules.lifted`): a proved rule is
    an equality at every batch size."""
    out = []
    for r in rules:
        out.append(r)
        out.extend(v for k in lift_to if (v := lifted(r, k - 2)) is not None)
    return out


def both_directions(rules: Iterable[Rule], lift_to: tuple[int, ...] = (3, 4)) -> list[Rule]:
    """Each rule `with_lifts` and its reverse (when the reverse has a source to match), but for those whose
    target can never be built (`buildable`): matched everywhere, they would be declined everywhere."""
    out = []
    for r in rules:
        for v in with_lifts([r], lift_to):
            out.append(v)
            if v.dst.nodes and v.reversible:
                out.append(
                    replace(v, src=v.dst, dst=v.src, name=f"{r.name}{REVERSE}" if r.name else "", id=f"{r.id}{REVERSE}")
                )
    return [v for v in out if buildable(v)]


ALWAYS_WORK = 4
"""Rewrites the always pass makes per node of the graph it starts from, at most: an honest always rule folds
or removes what it matches, so a graph has far fewer of them than this; one whose target matches its own
source (true, so verify proves it) would rewrite forever."""


def apply_everywhere(g: Graph, rules: Sequence[Rule]) -> tuple[Graph, Counter]:
    """``g`` with ``rules`` (`with_lifts`) applied wherever they match, until none does or `ALWAYS_WORK`
    rewrites per node of ``g`` are made (every rewrite is proved, so where it stops the graph is still
    equivalent), and how often each was applied: the rules marked ``always`` (`Rule.always`), which
    cost nothing or less and open matches for the search. Where matches overlap, the rule given first wins: the
    store keeps the order rules were written in, and specs/rules/batchnorm.rules folds a Mul and an Add into
    their BatchNorm before the BatchNorm into its Conv. One rewrite at a time, the matches of each graph found
    from its parent's (`matches_after`): DenseNet-121's 183 folds rescanned whole took 5 s."""
    applied: Counter = Counter()
    if not rules:
        return g, applied
    rules = with_lifts(rules)
    index, folds = RuleIndex(rules), {}
    rank = {id(r): i for i, r in enumerate(rules)}
    declined: set[tuple] = set()
    found = all_matches(g, index)
    work = ALWAYS_WORK * max(1, len(g.nodes))
    while applied.total() < work:
        for m in sorted(found, key=lambda m: rank[id(m.rule)]):
            key = (m.rule.name, tuple(id(n) for n in m.nodes.values()))
            if key in declined:
                continue
            try:
                new = apply(g, m, folds)
            except Declined:
                declined.add(key)
                continue
            applied[m.rule.id] += 1
            g, found = new, matches_after(new, index, g, found)
            break
        else:
            return g, applied
    return g, applied
