"""Matching's shortcuts never hide a match: the census of signatures that skips rules with a source node no
model node could stand for, and the incremental matching of a rewritten graph from its parent's matches."""

from __future__ import annotations

import functools
import tempfile
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from conftest import ROOT, write_graph, zoo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from taso import onnx as onnx_io
from taso.execute.precompute import precompute
from taso.ir import Graph
from taso.rules import store
from taso.rules.match import (
    Match,
    RuleIndex,
    _extend,
    _key,
    _plan,
    all_matches,
    find_matches,
    matches_after,
    nodes_by_op,
)
from taso.search import Declined, apply, both_directions
from taso.search.rulecache import search_index

MODELS = ("squeezenet", "shufflenet")
"""Small CNNs whose ops most rules mention: thousands of rule variants reach an anchor, few match."""


@functools.cache
def _rules() -> RuleIndex:
    proved = store.load_rules(store.open_store(ROOT / "substitutions.db"), status="proved")
    return RuleIndex(both_directions(r for r in proved if not r.always))


@functools.cache
def _model(name: str) -> Graph:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save_model(zoo.ZOO[name](), str(path))
        return precompute(onnx_io.load_model(path))[0]


def _every_match(g: Graph, rules: RuleIndex) -> set[tuple]:
    """Every match found the slow way: each rule anchored at its first source node on every model node of that
    op, nothing skipped."""
    index, found = nodes_by_op(g), set()
    for rule in rules.rules:
        for candidate in index.get(rule.src.nodes[0].op, ()):
            for nodes, values, attrs in _extend(g, rule, _plan(rule.src, 0), 0, {0: candidate}, {}, {}):
                found.add(_key(Match(rule, nodes, values, attrs)))
    return found


@pytest.mark.parametrize("name", MODELS)
def test_the_census_skips_no_rule_that_matches(name: str) -> None:
    g, rules = _model(name), _rules()
    fast = all_matches(g, rules)
    assert fast, "the model should have matches for the check to mean anything"
    assert {_key(m) for m in fast} == _every_match(g, rules)
    assert len({_key(m) for m in fast}) == len(fast)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MODELS), st.lists(st.integers(0, 10_000), min_size=1, max_size=3))
def test_a_rewritten_graph_has_the_matches_a_full_scan_finds(name: str, picks: list[int]) -> None:
    """Rewrite a model by randomly picked matches, each graph's matches found from its parent's: they are the
    full scan's at every step, and the last graph's are also the shortcut-free scan's."""
    g, rules = _model(name), _rules()
    found = all_matches(g, rules)
    for pick in picks:
        for m in found[pick % len(found) :] + found[: pick % len(found)]:
            try:
                child = apply(g, m)
            except Declined:
                continue
            g, found = child, matches_after(child, rules, g, found)
            break
        assert {_key(m) for m in found} == {_key(m) for m in all_matches(g, rules)}
    assert {_key(m) for m in found} == _every_match(g, rules)


def test_a_rule_read_backwards_that_needs_a_constant_of_its_own_is_never_matched(tmp_path: Path) -> None:
    """GELU spelled out, read backwards, would write the 0.5, 1 and 1/sqrt(2) its source matched: the rewrite
    cannot make them, so it matched every Gelu and was declined there (gMLP-S16: 25,600 times in one search,
    a quarter of its time). Neither `both_directions` nor the search's index holds it; forwards it stays."""
    proved = store.load_rules(store.open_store(ROOT / "substitutions.db"), status="proved")
    gelu = next(r for r in proved if r.name == "gelu spelled out")
    backwards = replace(gelu, src=gelu.dst, dst=gelu.src)
    nodes = [helper.make_node("Gelu", ["x"], ["y"])]
    x, y = (helper.make_tensor_value_info(v, TensorProto.FLOAT, [2, 8]) for v in "xy")
    g = onnx_io.load_model(write_graph(helper.make_graph(nodes, "g", [x], [y]), tmp_path / "gelu.onnx", opset=20))
    match = next(iter(find_matches(g, backwards)))
    with pytest.raises(Declined, match="needs a constant whose size the model does not fix"):
        apply(g, match)
    assert [v.id for v in both_directions([gelu], lift_to=())] == [gelu.id]
    assert [v.id for v in search_index([gelu]).rules if v.id.startswith(gelu.id)] == [gelu.id] * 3  # and 2 lifts
