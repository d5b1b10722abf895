"""What the search spends its work on. A growing rewrite that opens nothing but its own undo is no candidate, so it
spends none of the candidates; one that opens a shrinking rewrite with the nodes around it is costed, and its
pair is found. A match that does not fit its own shapes is built once a pass, not once a graph."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator
from dataclasses import replace

import pytest

from taso.ir import Graph, parse_graph
from taso.rules import Match, Rule, RuleIndex, all_matches, fresh_matches
from taso.rules.match import nodes_by_op
from taso.search import Declined, apply, backtrack
from taso.search import opening as opening_module
from taso.search.backtrack import search
from taso.search.growth import DEAD_END, TIERS, Opened, Opens, growing, tiers
from taso.search.opening import opening
from taso.search.rewrite import Unfit
from taso.search.variants import both_directions

WRAP = Rule(
    parse_graph(
        """graph(%y: float32[2,4]):
          %a = Transpose(%y) {perm=[1, 0]} : float32[4,2]
          %b = Relu(%a) : float32[4,2]
          %c = Transpose(%b) {perm=[1, 0]} : float32[2,4]
          return %c"""
    ),
    parse_graph(
        """graph(%y: float32[2,4]):
          %c = Relu(%y) : float32[2,4]
          return %c"""
    ),
    name="relu-through-transposes",
    status="proved",
)
"""Read backwards (`both_directions`), a Relu wrapped in two Transposes: a growing rule, as the shipped store's
reverse of Transpose,Relu,Transpose => Relu."""

TWICE = Rule(
    parse_graph(
        """graph(%y: float32[2,4]):
          %a = Relu(%y) : float32[2,4]
          %b = Relu(%a) : float32[2,4]
          return %b"""
    ),
    parse_graph(
        """graph(%y: float32[2,4]):
          %b = Relu(%y) : float32[2,4]
          return %b"""
    ),
    name="relu-twice",
    status="proved",
)

UNDO_TRANSPOSES = Rule(
    parse_graph(
        """graph(%y: float32[2,4]):
          %a = Transpose(%y) {perm=[1, 0]} : float32[4,2]
          %b = Transpose(%a) {perm=[1, 0]} : float32[2,4]
          %c = Relu(%b) : float32[2,4]
          return %c"""
    ),
    parse_graph(
        """graph(%y: float32[2,4]):
          %c = Relu(%y) : float32[2,4]
          return %c"""
    ),
    name="transposes-undone",
    status="proved",
)


RELUS = parse_graph(
    """graph(%x: float32[2,4], %u: float32[2,4], %v: float32[2,4], %w: float32[2,4]):
      %a = Relu(%x) : float32[2,4]
      %b = Relu(%a) : float32[2,4]
      %c = Relu(%u) : float32[2,4]
      %d = Relu(%v) : float32[2,4]
      %e = Relu(%w) : float32[2,4]
      return %b, %c, %d, %e"""
)
"""Five Relus to wrap in Transposes, two of them one after the other (`TWICE` makes them one)."""


def _nodes(g: Graph) -> float:
    return float(len(g.nodes))


def test_a_growing_rewrite_that_opens_only_its_undo_spends_no_candidate() -> None:
    """Each wrap is costed before the Relus made one (the rules' order) and opens nothing but its own unwrapping:
    with three candidates to spend, the search that costed the wraps found nothing."""
    rules = [r for r in both_directions([WRAP]) if r.id.endswith("~reverse")] + [TWICE]
    found = search(RELUS, rules, _nodes, budget=5, time_limit=1e9, candidates=3)
    assert found.declined[DEAD_END] >= 5  # the five of the first graph, then those of its rewrites
    assert found.cost_after == found.cost_before - 1
    assert [s.match.rule.name for s in found.steps if s.match] == ["relu-twice"]


TRANSPOSED = parse_graph(
    """graph(%x: float32[4,2]):
      %a = Transpose(%x) {perm=[1, 0]} : float32[2,4]
      %b = Relu(%a) : float32[2,4]
      return %b"""
)


def test_a_growing_rewrite_that_opens_a_shrinking_one_with_its_neighbours_is_costed_and_repaid() -> None:
    """Wrapping the Relu puts a Transpose after the model's: the two undo each other, leaving the Relu on the
    input and the Transpose after it, which this cost prefers (the wrap is dearer by one node, within alpha).
    The wrap is costed and its pair found."""
    rules = [r for r in both_directions([WRAP]) if r.id.endswith("~reverse")] + [UNDO_TRANSPOSES]

    def relu_first(g: Graph) -> float:
        relu = next(n for n in g.nodes if n.op == "Relu")
        after_transpose = any(n.op == "Transpose" and relu.inputs[0] in n.outputs for n in g.nodes)
        return 0.01 * len(g.nodes) + after_transpose

    found = search(TRANSPOSED, rules, relu_first, budget=5, time_limit=1e9)
    assert found.cost_after < found.cost_before
    assert [s.match.rule.name for s in found.steps if s.match] == [
        "relu-through-transposes~reverse",
        "transposes-undone",
    ]
    assert backtrack.CANDIDATES >= found.candidates > 0


TRANSPOSED_SQUARE = Rule(
    parse_graph(
        """graph(%y: float32[2,2]):
          %c = Relu(%y) : float32[2,2]
          return %c"""
    ),
    parse_graph(
        """graph(%y: float32[2,2]):
          %a = Relu(%y) : float32[2,2]
          %c = Transpose(%a) {perm=[1, 0]} : float32[2,2]
          return %c"""
    ),
    name="relu-transposed",
    status="proved",
)
"""A rule that holds only for square matrices (not a true rule: it is never built here): on the [2,4] Relus of
`RELUS` its target would change the output's shape, a decline nothing outside the matched Relu decides."""


def test_a_match_that_does_not_fit_its_shapes_is_built_once_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Relu's unfit match is built in the first graph only; the graphs after it, which keep the Relus,
    decline them unbuilt, each counted under the same reason."""
    built: list[tuple] = []
    apply = backtrack.apply

    def counted(g, m, folds):  # type: ignore[no-untyped-def]
        try:
            return apply(g, m, folds)
        except Unfit:
            built.append((m.rule.name, tuple(id(n) for n in m.nodes.values())))
            raise

    monkeypatch.setattr(backtrack, "apply", counted)
    found = search(RELUS, [TWICE, TRANSPOSED_SQUARE], _nodes, budget=5, time_limit=1e9)
    assert found.cost_after == found.cost_before - 1
    assert len(built) == len(set(built)) >= 5  # the five Relus, and the one the merge of two makes
    assert found.declined["the rewrite would change an output's shape or type"] > len(built)


def _keys(matches: list[Match]) -> list[tuple]:
    return [(m.rule.name, tuple(id(n) for n in m.nodes.values()), tuple(m.values.items())) for m in matches]


def test_each_rewrite_of_a_graph_has_its_own_opened_matches_and_its_shrinking_ones_in_the_index_order() -> None:
    """`Opened` answers by graph and parent: two rewrites of one graph open different matches, each as
    `fresh_matches` finds them, asked before or after the shrinking ones, which are the shrinking index's."""
    index = RuleIndex(both_directions([WRAP, TWICE, UNDO_TRANSPOSES]))
    children = []
    for m in all_matches(RELUS, index):
        with contextlib.suppress(Declined):
            children.append(apply(RELUS, m))
    opened = Opened(index)
    for k, child in enumerate(children):
        if k % 2:
            assert _keys(opened(child, RELUS)) == _keys(fresh_matches(child, index, RELUS))
        assert _keys(opened.shrinking(child, RELUS)) == _keys(fresh_matches(child, index.shrinking, RELUS))
        assert _keys(opened(child, RELUS)) == _keys(fresh_matches(child, index, RELUS))
    assert len({tuple(_keys(opened(c, RELUS))) for c in children}) > 1
    assert any(opened.shrinking(c, RELUS) for c in children)


def test_an_opened_answer_keeps_its_graphs_so_their_ids_are_not_reused() -> None:
    index = RuleIndex(both_directions([WRAP, TWICE]))
    child = apply(RELUS, next(iter(all_matches(RELUS, index))))
    opened, held = Opened(index), weakref.ref(child)
    opened(child, RELUS)
    del child
    gc.collect()
    assert held() is not None


def test_the_growth_check_matches_the_rules_that_do_not_grow_and_all_of_them() -> None:
    """`Opens` matches a rewrite it has no matches for with the `tiers`: together every opened match of a rule that
    does not grow, none of one that does (which could not repay the growth), the smallest rules' in the first."""
    index = RuleIndex(both_directions([WRAP, TWICE, UNDO_TRANSPOSES, FIVE]))
    grow, checked = growing(index), 0
    cut = tiers(index)
    ids = [rules for _, rules in cut]
    assert len(cut) == len(TIERS) + 1 and ids[0] and ids[-1] and not frozenset().union(*ids) & grow
    for m in all_matches(RELUS, index):
        with contextlib.suppress(Declined):
            child = apply(RELUS, m)
            every = fresh_matches(child, index, RELUS)
            checked += any(id(f.rule) in grow for f in every)
            kept = [f for f in every if id(f.rule) not in grow]
            split = [fresh_matches(child, tier, RELUS) for tier, _ in cut]
            assert sorted(_keys([f for found in split for f in found])) == sorted(_keys(kept))
            assert all(len(f.rule.src.nodes) <= TIERS[0] for f in split[0])
    assert checked


FIVE = Rule(
    parse_graph(
        """graph(%y: float32[2,4]):
          %a = Transpose(%y) {perm=[1, 0]} : float32[4,2]
          %b = Relu(%a) : float32[4,2]
          %c = Transpose(%b) {perm=[1, 0]} : float32[2,4]
          %d = Relu(%c) : float32[2,4]
          %e = Relu(%d) : float32[2,4]
          return %e"""
    ),
    parse_graph(
        """graph(%y: float32[2,4]):
          %e = Relu(%y) : float32[2,4]
          return %e"""
    ),
    name="wrapped-relu-thrice",
    status="proved",
)
"""A rule of five source nodes, in the last of the `tiers`: a wrap of the first of three Relus in a row opens it."""


CHAIN = parse_graph(
    """graph(%x: float32[2,4]):
      %a = Relu(%x) : float32[2,4]
      %b = Relu(%a) : float32[2,4]
      %c = Relu(%b) : float32[2,4]
      return %c"""
)
"""Three Relus in a row: every tier of the growth check reaches every node from any of them."""


def _wraps(index: RuleIndex) -> dict[str, Match]:
    """The wraps of `CHAIN`'s Relus in Transposes, by the value each reads."""
    return {m.nodes[0].inputs[0]: m for m in all_matches(CHAIN, index) if m.rule.id.endswith("~reverse")}


def test_a_growth_that_opens_only_a_large_rule_is_not_told_the_small_rules_answer() -> None:
    """The growth check keeps each tier's answer apart: in a graph of three nodes every tier reaches every node,
    and an answer kept by the nodes alone would tell the large rules that nothing opens, as the small found."""
    index = RuleIndex([r for r in both_directions([WRAP]) if r.id.endswith("~reverse")] + [TWICE, FIVE])
    wrap = _wraps(index)["x"]
    child = apply(CHAIN, wrap)
    assert [f.rule.name for f in fresh_matches(child, index, CHAIN) if f.rule is FIVE]
    assert Opens(Opened(index))(child, CHAIN, wrap)


def test_two_matches_of_one_rule_with_the_same_surroundings_get_a_tier_answer_each() -> None:
    """A tier's answer is kept under its match too: the wraps of the first and the last Relu of `CHAIN` have the
    same nodes within reach, and only the first opens the five-node rule."""
    index = RuleIndex([r for r in both_directions([WRAP]) if r.id.endswith("~reverse")] + [TWICE, FIVE])
    wraps, opens = _wraps(index), Opens(Opened(index))
    last = len(opens.tiers) - 1
    assert opens._opens(apply(CHAIN, wraps["x"]), CHAIN, wraps["x"], last)
    assert not opens._opens(apply(CHAIN, wraps["b"]), CHAIN, wraps["b"], last)


def test_the_groups_a_graph_covers_are_kept_by_its_op_counts_not_its_ops() -> None:
    """`Opening.covered` answers a graph of one Relu and then one of two as the index does: kept by the ops alone,
    the second would be told that no rule of two Relus could match it."""
    index = RuleIndex(both_directions([WRAP, TWICE]))
    one = parse_graph(
        """graph(%x: float32[2,4]):
          %a = Relu(%x) : float32[2,4]
          return %a"""
    )
    find = opening(index)
    for g in (one, RELUS):
        assert find.covered(nodes_by_op(g)) == index.covered(nodes_by_op(g))
    assert find.covered(nodes_by_op(one)) != find.covered(nodes_by_op(RELUS))


def test_the_census_a_pass_keeps_is_of_the_graph_asked_not_the_one_before() -> None:
    """`Opened.census` keeps one graph's: asked of another next, a census of the first (no Relu) would cover no
    rule of Relus, and the second's match would go unfound."""
    transposed = parse_graph(
        """graph(%x: float32[2,4]):
          %a = Transpose(%x) {perm=[1, 0]} : float32[4,2]
          return %a"""
    )
    index = RuleIndex(both_directions([TWICE]))
    opened = Opened(index)
    opened.census(transposed)
    found = opened(RELUS, transposed)
    assert found and _keys(found) == _keys(fresh_matches(RELUS, index, transposed))


def test_a_new_node_without_the_neighbours_a_rule_needs_is_not_matched_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Opening` asks `_extend` only from a new node with the neighbours the rule's source node has there: not
    from a new Relu for a rule whose Relu reads or feeds a Transpose (`WRAP`, `UNDO_TRANSPOSES`, `FIVE`) where
    the graph's Transpose is elsewhere; and it finds what `fresh_matches` finds, there and in every rewrite of
    `RELUS`, where the Transposes are next to the Relus."""
    index = RuleIndex(both_directions([WRAP, TWICE, UNDO_TRANSPOSES, FIVE]))
    asked: list[Rule] = []
    extend = opening_module._extend

    def counted(g: Graph, rule: Rule, *rest: object) -> Iterator:
        asked.append(rule)
        return extend(g, rule, *rest)

    monkeypatch.setattr(opening_module, "_extend", counted)
    apart = parse_graph(
        """graph(%x: float32[2,4], %u: float32[2,4]):
          %t = Transpose(%u) {perm=[1, 0]} : float32[4,2]
          %w = Transpose(%t) {perm=[1, 0]} : float32[2,4]
          %a = Relu(%x) : float32[2,4]
          return %w, %a"""
    )
    before = replace(apart, nodes=apart.nodes[:2], outputs=("w",))
    assert _keys(list(opening(index)(apart, before))) == _keys(fresh_matches(apart, index, before))
    assert asked and not any("Transpose" in r.src.op_census() for r in asked)
    for m in all_matches(RELUS, index):
        with contextlib.suppress(Declined):
            child = apply(RELUS, m)
            assert _keys(list(opening(index)(child, RELUS))) == _keys(fresh_matches(child, index, RELUS))


def test_graphs_with_other_node_signatures_do_not_share_which_rules_fit() -> None:
    """`Opening.fitting` keeps the anchors whose rules fit by the graph's node signatures: a new Relu after two
    Transposes that swap nothing (no `UNDO_TRANSPOSES` there), then the same Relu after two that swap its axes,
    has the rule's match found there, with the same anchors asked of (same Relu, same op counts)."""
    index = RuleIndex(both_directions([WRAP, TWICE, UNDO_TRANSPOSES]))
    for perm, shape in (("[0, 1]", "2,4"), ("[1, 0]", "4,2")):
        g = parse_graph(
            f"""graph(%u: float32[2,4]):
              %t = Transpose(%u) {{perm={perm}}} : float32[{shape}]
              %w = Transpose(%t) {{perm={perm}}} : float32[2,4]
              %a = Relu(%w) : float32[2,4]
              return %a"""
        )
        before = replace(g, nodes=g.nodes[:2], outputs=("w",))
        found = list(opening(index)(g, before))
        assert _keys(found) == _keys(fresh_matches(g, index, before))
        assert any(m.rule is UNDO_TRANSPOSES for m in found) == (perm == "[1, 0]")
