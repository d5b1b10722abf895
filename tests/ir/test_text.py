"""The text form: printing round-trips, one line per node, the parser and lint reject broken graphs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from taso.ir import Graph, IRError, TensorType, format_graph, parse_graph

from .strategies import graphs


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_text_form_round_trips(g: Graph) -> None:
    text = format_graph(g)
    back = parse_graph(text)
    assert back == g and hash(back) == hash(g)
    assert format_graph(back) == text


def test_print_is_one_line_per_node() -> None:
    text = """graph(%x: float32[2,4], %"w/1": float32[4,4] weight):
  %0 = MatMul(%x, %"w/1") : float32[2,4]
  %1 = Relu(%0) : float32[2,4]
  return %1"""
    g = parse_graph(text)
    assert str(g) == text and len(g.nodes) == 2 and g.weights == ("w/1",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("graph(%x: float32[2]):\n  %y = Relu(%z) : float32[2]\n  return %y", "reads 'z' before"),
        ("graph(%x: float32[2]):\n  %x = Relu(%x) : float32[2]\n  return %x", "redefines 'x'"),
        ("graph(%x: float32[2]):\n  %y = Relu(%x) : float32[2]\n  return %q", "never defined"),
        ("graph(%x: float32[2]):\n  %y = Relu(%x) $ float32[2]\n  return %y", "cannot parse"),
    ],
)
def test_lint_and_parser_reject_broken_graphs(text: str, message: str) -> None:
    with pytest.raises(IRError, match=message):
        parse_graph(text)


def test_dynamic_and_unknown_dims_print_and_parse() -> None:
    g = parse_graph(
        'graph(%x: float32["batch",?,4], %y: int64[*]):\n  %r = Relu(%x) : float32["batch",?,4]\n  return %r, %y'
    )
    assert g.types["x"] == TensorType("float32", ("batch", None, 4)) and g.types["y"].shape is None
    assert parse_graph(str(g)) == g
