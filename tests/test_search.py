"""The search as a user meets it: it never crashes on a region's rewrite, and its result depends on the model,
the store, the cost table and the flags alone, never on how fast the machine runs."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT

from taso.ir import Graph, extract, parse_graph, topological_order
from taso.optimize import Settings, optimize
from taso.rules import Rule
from taso.search import CYCLE, closes_cycle, optimize_graph, outside_links, splice

CYCLE_COSTS = ROOT / "tests" / "data" / "bert_tiny_cycle_costs.json"
"""The 30 unit costs the CPU run of `make run` had cached when it crashed with "region splice created a
cycle" (issue 31), as a reference table: with them, merging the two layers' scaling Muls pays."""

CHAIN = parse_graph(
    """graph(%x: float32[2,4], %s: float32[] = 0.25):
      %a = Mul(%x, %s) : float32[2,4]
      %e = Exp(%a) : float32[2,4]
      %b = Mul(%e, %s) : float32[2,4]
      return %b"""
)
"""Two Muls of one region (a rule mentions Mul) with an Exp, which none mentions, between them."""


def test_a_region_rewrite_that_reads_its_own_result_through_the_rest_is_declined_not_spliced() -> None:
    muls = [n for n in CHAIN.nodes if n.op == "Mul"]
    region = extract(CHAIN, muls)
    merged = parse_graph(
        """graph(%x: float32[2,4], %e: float32[2,4], %s: float32[] = 0.25, %k: int64[2] = [2, 2]):
          %c = Concat(%x, %e) {axis=0} : float32[4,4]
          %m = Mul(%c, %s) : float32[4,4]
          %a, %b = Split(%m, %k) {axis=0} : float32[2,4], float32[2,4]
          return %a, %b"""
    )
    outside = outside_links(CHAIN, region)
    assert [(n.inputs, n.outputs) for n in outside] == [(("a",), ("e",))]
    assert not closes_cycle(region, outside)
    assert closes_cycle(merged, outside)
    assert splice(CHAIN, region, merged) is None


def test_the_store_that_crashed_make_run_optimizes_bert_tiny_declining_the_cycles(tmp_path: Path) -> None:
    settings = Settings(budget=20, time_limit=1e9, costs=str(CYCLE_COSTS), dims={"batch": 1, "seq": 32})
    report = optimize(ROOT / "models" / "bert_tiny.onnx", tmp_path / "out.onnx", settings=settings)
    assert report.check is not None and report.check.ok
    assert report.search["declined"][CYCLE] > 0
    assert report.cost["after_ms"] < report.cost["before_ms"]


MERGE_SCALED = Rule(
    parse_graph(
        """graph(%x: float32[2,4], %y: float32[2,4], %s: float32[] weight):
          %a = Mul(%x, %s) : float32[2,4]
          %b = Mul(%y, %s) : float32[2,4]
          return %a, %b"""
    ),
    parse_graph(
        """graph(%x: float32[2,4], %y: float32[2,4], %s: float32[] weight, %k: int64[2] = [2, 2]):
          %c = Concat(%x, %y) {axis=0} : float32[4,4]
          %m = Mul(%c, %s) : float32[4,4]
          %a, %b = Split(%m, %k) {axis=0} : float32[2,4], float32[2,4]
          return %a, %b"""
    ),
    name="merge-scaled",
    status="proved",
)


def test_the_search_declines_the_cyclic_merge_and_keeps_a_sound_one() -> None:
    """One region (its Muls joined through shared values) where merging ``a`` and ``b`` reads ``b``'s input,
    computed outside from ``a``; the cost prefers that merge, as the crash store's measured costs did."""
    g = parse_graph(
        """graph(%x: float32[2,4], %y: float32[2,4], %s: float32[] = 0.25):
          %a = Mul(%x, %s) : float32[2,4]
          %e = Exp(%a) : float32[2,4]
          %b = Mul(%e, %s) : float32[2,4]
          %c = Mul(%y, %s) : float32[2,4]
          %d = Mul(%b, %c) : float32[2,4]
          %out = Mul(%a, %d) : float32[2,4]
          return %out"""
    )

    def cost(h: Graph) -> float:
        prefers_cycle = any(n.op == "Concat" and {"x", "e"} <= set(n.inputs) for n in h.nodes)
        return sum(n.op == "Mul" for n in h.nodes) - 0.5 * prefers_cycle

    found = optimize_graph(g, [MERGE_SCALED], cost, alpha=1.0, budget=10, time_limit=1e9)
    assert found.declined[CYCLE] > 0
    assert cost(found.graph) == 4  # c merged with a or b; a and b could not be
    assert topological_order(list(found.graph.nodes), set()) is not None
