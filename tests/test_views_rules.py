"""Rules over Unsqueeze, Squeeze and Expand (specs/unsqueeze.py, specs/expand.py): the true ones the views pool
finds are proved, and an Expand rule applies only where the model spreads the axes its proof spread."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import write_graph
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.ir import parse_graph
from taso.rules import SPECS_DIR, Rule, find_matches
from taso.search import Declined, instantiate
from taso.verify import Prover, load_specs

EXPAND_ADD = Rule(
    parse_graph(
        """graph(%r: float32[1,3], %y: float32[1,3], %s: int64[2] = [2, 3]):
  %a = Expand(%r, %s) : float32[2,3]
  %b = Expand(%y, %s) : float32[2,3]
  %c = Add(%a, %b) : float32[2,3]
  return %c"""
    ),
    parse_graph(
        """graph(%r: float32[1,3], %y: float32[1,3], %s: int64[2] = [2, 3]):
  %a = Add(%r, %y) : float32[1,3]
  %c = Expand(%a, %s) : float32[2,3]
  return %c"""
    ),
    "an add of spread rows is the spread of their sum",
)
TRUE_RULES = [
    EXPAND_ADD,
    Rule(
        parse_graph(
            """graph(%x: float32[2,3]):
  %u = Unsqueeze(%x) {axes=[0]} : float32[1,2,3]
  %q = Squeeze(%u) {axes=[0]} : float32[2,3]
  return %q"""
        ),
        parse_graph("graph(%x: float32[2,3]):\n  return %x"),
        "a size-1 axis added and dropped",
    ),
    Rule(
        parse_graph(
            """graph(%x: float32[2,3], %w: float32[3,5] weight, %s: int64[2] = [2, 3]):
  %e = Expand(%x, %s) : float32[2,3]
  %m = MatMul(%e, %w) : float32[2,5]
  return %m"""
        ),
        parse_graph(
            """graph(%x: float32[2,3], %w: float32[3,5] weight, %s: int64[2] = [2, 5]):
  %m = MatMul(%x, %w) : float32[2,5]
  %e = Expand(%m, %s) : float32[2,5]
  return %e"""
        ),
        "rows spread before a product",
    ),
]


@pytest.fixture(scope="module")
def prover() -> Prover:
    return Prover(load_specs(SPECS_DIR), precheck=False)


@pytest.mark.parametrize("rule", TRUE_RULES, ids=lambda r: r.name)
def test_a_true_view_rule_is_proved_by_z3_alone(rule: Rule, prover: Prover) -> None:
    v = prover.verdict(rule)
    assert v.status == "proved", v.detail


def _spread_model(tmp_path: Path, rows: int) -> Path:
    """Expand(r) + Expand(y) with r, y of ``rows`` rows, to (2, 3): rows=1 spreads them, rows=2 does not."""
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "s")
    graph = helper.make_graph(
        [
            helper.make_node("Expand", ["r", "s"], ["a"]),
            helper.make_node("Expand", ["y", "s"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["c"]),
        ],
        "spread",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, [rows, 3]) for v in "ry"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])],
        initializer=[shape],
    )
    return write_graph(graph, tmp_path / f"spread{rows}.onnx")


def test_an_expand_rule_applies_only_where_the_model_spreads_as_its_example(tmp_path: Path, prover: Prover) -> None:
    """The proof spread the rows' axis 0 (specs/expand.py states they are 1 there): a model whose Expands
    spread nothing binds the same source and is declined."""
    v = prover.verdict(EXPAND_ADD)
    proved = replace(EXPAND_ADD, status=v.status, detail=v.detail)
    assert proved.covered is not None
    for rows, applies in ((1, True), (2, False)):
        g = onnx_io.load_model(_spread_model(tmp_path, rows))
        assert not any(n.is_opaque for n in g.nodes)
        match = next(find_matches(g, proved))
        if applies:
            instantiate(g, match)
        else:
            with pytest.raises(Declined, match="Expand broadcasts otherwise"):
                instantiate(g, match)
