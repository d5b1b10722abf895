"""Units and their keys: weight-only and shape-only nodes cost nothing, equal units share a key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from taso import onnx as onnx_io
from taso.cost.unit import twin_key, unit_graph, unit_key, units
from taso.execute import fold_static_shapes
from taso.ir import Graph, TensorType, parse_graph

from .graphs import with_weights


def test_weight_only_nodes_cost_nothing() -> None:
    g = with_weights(
        """graph(%x: float32[2,4], %w: float32[4,4] weight):
          %wt = Transpose(%w) {perm=[1,0]} : float32[4,4]
          %y = MatMul(%x, %wt) : float32[2,4]
          return %y"""
    )
    assert [u.label for u in units(g)] == ["MatMul"]
    assert [n.op for n in unit_graph(g, units(g)[0]).nodes] == ["Transpose", "MatMul"]


def test_equal_units_share_a_key_and_different_shapes_do_not(bert_path: Path) -> None:
    def keys(seq: int) -> dict[str, list[str]]:
        g = onnx_io.concretize(onnx_io.load_model(bert_path), {"batch": 1, "seq": seq})
        out: dict[str, list[str]] = {}
        for u in units(g):
            out.setdefault(u.label, []).append(unit_key(unit_graph(g, u)))
        return out

    k8, k16 = keys(8), keys(16)
    label = "MatMul+Add+Add+LayerNormalization"  # a projection, its bias, the residual and the norm after it
    assert len(set(k8[label])) < len(k8[label])  # attention and FFN outputs, one shape each
    assert set(k8[label]).isdisjoint(k16[label])  # another seq: another unit


@given(dims=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_static_shapes_fold_and_what_is_computed_from_them_costs_nothing(dims: list[int], data: st.DataObject) -> None:
    start = data.draw(st.integers(-len(dims), len(dims) - 1))
    shape = ",".join(map(str, dims))
    g = with_weights(
        f"""graph(%x: float32[{shape}], %one: int64[1] weight):
          %s = Shape(%x) {{start={start}}} : int64[{len(dims[start:])}]
          %t = Add(%s, %one) : int64[{len(dims[start:])}]
          %r = Relu(%x) : float32[{shape}]
          return %r, %t"""
    )
    folded = fold_static_shapes(g)
    assert "Shape" not in [n.op for n in folded.nodes]
    np.testing.assert_array_equal(folded.data["s"].array, dims[start:])
    assert [u.label for u in units(folded)] == ["Relu"]  # the Add on shapes is a constant now
    dynamic = replace(g, types={**g.types, "x": TensorType("float32", ("n", *dims[1:]))})
    assert fold_static_shapes(dynamic) is dynamic


def _one_unit(op: str, swapped: bool) -> Graph:
    """``op`` of a [4,8] and a broadcast [1,8] input, in that order or swapped."""
    a, b = ("%y", "%x") if swapped else ("%x", "%y")
    g = parse_graph(f"graph(%x: float32[4,8], %y: float32[1,8]):\n  %z = {op}({a}, {b}) : float32[4,8]\n  return %z")
    return unit_graph(g, units(g)[0])


def test_a_commutative_ops_inputs_swapped_make_another_key_but_one_twin() -> None:
    """`twin_key`: Add(x, y) and Add(y, x) cost the same, so they are twins though `unit_key` (what the shipped
    tables hold) tells them apart; Sub's swapped inputs compute something else, and are no twins, nor is an Add
    of one input to itself a twin of an Add of two inputs of its type."""
    add, add_swapped = _one_unit("Add", False), _one_unit("Add", True)
    assert unit_key(add) != unit_key(add_swapped)
    assert twin_key(add) == twin_key(add_swapped)
    assert twin_key(_one_unit("Sub", False)) != twin_key(_one_unit("Sub", True))
    assert twin_key(add) != twin_key(_one_unit("Mul", False))
    twice = parse_graph("graph(%x: float32[4,8], %y: float32[4,8]):\n  %z = Add(%x, %x) : float32[4,8]\n  return %z")
    pair = parse_graph("graph(%x: float32[4,8], %y: float32[4,8]):\n  %z = Add(%x, %y) : float32[4,8]\n  return %z")
    assert twin_key(unit_graph(twice, units(twice)[0])) != twin_key(unit_graph(pair, units(pair)[0]))
