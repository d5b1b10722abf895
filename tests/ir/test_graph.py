"""Graphs: hashing is structural, forms correspond by place, order, dead code and kinds."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taso.ir import (
    Graph,
    Kind,
    Node,
    TensorType,
    WeightData,
    correspondence,
    eliminate_dead,
    lint,
    parse_graph,
    topological_order,
)
from taso.ir import graph as graph_module

from .strategies import graphs


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_dead_code_elimination_keeps_outputs_and_is_idempotent(g: Graph) -> None:
    live = eliminate_dead(g)
    assert live.outputs == g.outputs
    assert eliminate_dead(live) is live
    assert all(any(o in live.consumers or o in live.outputs for o in n.outputs) for n in live.nodes)


def test_dead_code_elimination_keeps_the_types_of_a_kept_nodes_unread_outputs() -> None:
    """A rule that matches the Split binds every output's type (the fuzz's seed 23 failed on the dropped one)."""
    g = parse_graph("""graph(%x: float32[2,4], %s: int64[2] = [2, 2]):
  %a, %b = Split(%x, %s) {axis=1} : float32[2,2], float32[2,2]
  %d = Relu(%x) : float32[2,4]
  %y = Relu(%a) : float32[2,2]
  return %y""")
    live = eliminate_dead(g)
    assert [n.op for n in live.nodes] == ["Split", "Relu"]
    assert live.types["b"] == TensorType("float32", (2, 2)) and "d" not in live.types


@settings(max_examples=200, deadline=None)
@given(graphs(), st.randoms(use_true_random=False))
def test_topological_order_places_the_earliest_ready_node_each_time(g: Graph, rnd) -> None:
    shuffled = list(g.nodes)
    rnd.shuffle(shuffled)
    defined = set(g.inputs) | set(g.weights)
    order = topological_order(shuffled, defined)
    assert order is not None and sorted(map(id, order)) == sorted(map(id, shuffled))
    lint(replace(g, nodes=tuple(order)))
    done, placed = set(defined), set()
    for node in order:  # no node before it in the given order was ready: the smallest valid order
        for earlier in shuffled[: shuffled.index(node)]:
            assert id(earlier) in placed or not all(v in done for v in earlier.reads)
        placed.add(id(node))
        done.update(node.outputs)
    assert topological_order(list(g.nodes), defined) == list(g.nodes)


def test_topological_order_finds_cycles() -> None:
    a = Node("Relu", ("b",), ("a",))
    b = Node("Add", ("x", "a"), ("b",))
    assert topological_order([a, b], {"x"}) is None
    relu = Node("Relu", ("x",), ("a",))
    assert topological_order([b, relu], {"x"}) == [relu, b]


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_renamed_graphs_with_other_weights_share_a_form_and_correspond_by_place(g: Graph) -> None:
    """Another layer of the same computation: every value renamed, float weights redrawn (small integer
    tensors such as split sizes kept, since they say what is computed)."""
    rename = {v: f"other_{v}" for v in g.values()}
    rng = np.random.default_rng(0)
    data = {
        rename[w]: d if d.spelled is not None else WeightData(rng.standard_normal(d.array.shape).astype(d.array.dtype))
        for w, d in g.data.items()
    }
    twin = Graph(
        tuple(
            replace(n, inputs=tuple(rename[i] for i in n.inputs), outputs=tuple(rename[o] for o in n.outputs))
            for n in g.nodes
        ),
        tuple(rename[i] for i in g.inputs),
        tuple(rename[o] for o in g.outputs),
        {rename[v]: t for v, t in g.types.items()},
        tuple(rename[w] for w in g.weights),
        data,
    )
    assert twin.form == g.form
    place = correspondence(g, twin)
    assert place is not None
    assert all(place[v] == rename[v] for v in (*g.inputs, *g.weights))
    # a node output maps to one in its place: the same op (two equal nodes on equal inputs share a place)
    assert all(twin.producers[place[o]].op == n.op for n in g.nodes for o in n.outputs if o)
    if g.nodes:
        first = g.nodes[0]
        other = replace(first, op="Tanh" if first.op != "Tanh" else "Relu")
        changed = replace(g, nodes=(other, *g.nodes[1:]))
        assert changed.form != g.form and correspondence(changed, g) is None


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_changing_anything_changes_the_key(g: Graph) -> None:
    if g.nodes:
        n = g.nodes[0]
        other = replace(g, nodes=(replace(n, name=n.name + "x"), *g.nodes[1:]))
        assert other != g and other.key != g.key
    assert replace(g, outputs=g.outputs) == g  # a copy is equal


def test_kinds_follow_dependencies() -> None:
    g = parse_graph(
        """graph(%x: float32[2,2], %w: float32[2,2] weight):
          %c = Ones() {dtype="float32", shape=[2,2]} : float32[2,2]
          %wc = Add(%w, %c) : float32[2,2]
          %y = MatMul(%x, %wc) : float32[2,2]
          return %y"""
    )
    assert g.kinds["x"] is Kind.ACTIVATION and g.kinds["w"] is Kind.WEIGHT
    assert g.kinds["c"] is Kind.CONSTANT and g.kinds["wc"] is Kind.CONSTANT and g.kinds["y"] is Kind.ACTIVATION


@settings(max_examples=50, deadline=None)
@given(graphs())
def test_a_graph_cannot_be_changed_after_it_is_made(g: Graph) -> None:
    """Graphs are shared between candidates of a search and keyed by hash: neither the maps a graph was built
    from nor the graph's own fields, maps and weight arrays may change it afterwards."""
    types, data = dict(g.types), dict(g.data)
    made = Graph(g.nodes, g.inputs, g.outputs, types, g.weights, data)
    key = made.key
    types.clear()
    data.clear()
    assert made.types == g.types and made.data == g.data and made.key == key
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.outputs = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        made.types[g.inputs[0]] = TensorType("int64", None)  # type: ignore[index]
    for d in made.data.values():
        with pytest.raises(ValueError, match="read-only"):
            d.array.flat[0] = 1
    assert made == g and hash(made) == hash(g)


CHAIN = """graph(%x: float32[2,4]):
  %y = Relu(%x) : float32[2,4]
  %z = Neg(%y) : float32[2,4]
  %w = Abs(%z) : float32[2,4]
  return %w"""


def test_a_node_shared_by_two_graphs_is_digested_by_what_it_reads_in_each() -> None:
    """A rewrite's graph keeps its parent's node objects: the Neg below reads a Sigmoid's result in one graph and
    a Relu's in the other, and the two graphs compute different things (`Graph.structure` is memoised by node)."""
    a = parse_graph(CHAIN)
    b = replace(a, nodes=(Node("Sigmoid", ("x",), ("y",)), *a.nodes[1:]))
    assert a.nodes[1] is b.nodes[1]
    assert a.structure != b.structure
    assert a.structure == parse_graph(CHAIN).structure  # the same computation built apart


def test_the_node_digests_kept_are_bounded_and_a_dropped_one_is_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    full = parse_graph(CHAIN).structure
    monkeypatch.setattr(graph_module, "NODE_KEYS_KEPT", 2)
    graph_module._NODE_KEYS.clear()
    assert parse_graph(CHAIN).structure == full
    assert len(graph_module._NODE_KEYS) <= 2
