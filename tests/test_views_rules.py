"""Rules over Unsqueeze, Squeeze, Expand and Shape (specs/unsqueeze.py, specs/expand.py, specs/shape.py): the true
ones the views pool finds are proved, an Expand rule applies only where the model spreads the axes its proof
spread, and a Shape is its input's only where the dims are the same."""

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
from taso.verify import Axiom, Prover, check_axiom, load_specs, refute

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
    Rule(
        parse_graph(
            """graph(%x: float32[2,3]):
  %r = Relu(%x) : float32[2,3]
  %s = Shape(%r) {end=2, start=0} : int64[2]
  return %s"""
        ),
        parse_graph("graph(%x: float32[2,3]):\n  %s = Shape(%x) {end=2, start=0} : int64[2]\n  return %s"),
        "the shape of a relu is its input's",
    ),
    Rule(
        parse_graph(
            """graph(%x: float32[2,3,4]):
  %a = Shape(%x) {end=1, start=0} : int64[1]
  %b = Shape(%x) {end=3, start=1} : int64[2]
  %c = Concat(%a, %b) {axis=0} : int64[3]
  return %c"""
        ),
        parse_graph("graph(%x: float32[2,3,4]):\n  %s = Shape(%x) {end=3, start=0} : int64[3]\n  return %s"),
        "a shape's pieces joined are the whole shape",
    ),
]


def _shape_of_transpose(n: int) -> Rule:
    """Shape(Transpose(x)) taken for Shape(x), for x of shape (2, n): true only where n is 2."""
    shape = f"graph(%x: float32[2,{n}]):\n  %s = Shape(%x) {{end=2, start=0}} : int64[2]\n  return %s"
    src = f"""graph(%x: float32[2,{n}]):
  %t = Transpose(%x) {{perm=[1, 0]}} : float32[{n},2]
  %s = Shape(%t) {{end=2, start=0}} : int64[2]
  return %s"""
    return Rule(parse_graph(src), parse_graph(shape), "the shape of a transpose taken for its input's")


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


def test_the_shape_of_a_transpose_is_never_its_inputs(prover: Prover) -> None:
    """Planted: for a non-square x the pre-check refutes it and z3 alone finds no proof; at a square example the
    proof holds only with the condition that the two dims are equal."""
    false = _shape_of_transpose(3)
    assert refute(false) is not None
    assert prover.verdict(false).status == "unknown"
    v = prover.verdict(_shape_of_transpose(2))
    assert v.status == "proved" and v.detail["conditions"] == [["same", "x", 0, "x", 1]], v.detail


def test_an_empty_shape_is_not_modelled(prover: Prover) -> None:
    """Shape from 1 to 1 holds no dims: its lowering says so rather than building a term of nothing."""
    empty = "graph(%x: float32[2,3]):\n  %s = Shape(%x) {end=1, start=1} : int64[0]\n  return %s"
    v = prover.verdict(Rule(parse_graph(empty), parse_graph(empty.replace("%s", "%e")), "an empty shape"))
    assert v.status == "unknown" and "no dims" in v.detail["reason"], v.detail


def test_a_dim_is_fixed_by_relu_only_because_it_is_at_least_1(prover: Prover) -> None:
    """dim-relu holds where a dim can be (at least 1): without that condition the spec check finds the value it
    changes (-1)."""
    (axiom,) = (a for a in prover.specs.axioms if a.name == "dim-relu")
    assert check_axiom(axiom, prover.specs).ok
    unguarded = Axiom(axiom.name, axiom.lhs, axiom.rhs, axiom.shapes, domains=axiom.domains, spec=axiom.spec)
    assert not check_axiom(unguarded, prover.specs).ok
