"""The IR: printing round-trips, hashing is structural, lint catches broken graphs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taso import ops
from taso.ir import (
    Graph,
    IRError,
    Kind,
    Node,
    TensorType,
    WeightData,
    correspondence,
    eliminate_dead,
    format_graph,
    lint,
    make_attrs,
    parse_graph,
    topological_order,
)

_FORMS = [
    ("Relu", 1, {}),
    ("Tanh", 1, {}),
    ("Add", 2, {}),
    ("Mul", 2, {}),
    ("MatMul", 2, {}),
    ("Transpose", 1, {"perm": (1, 0)}),
    ("Concat", 2, {"axis": 1}),
    ("Concat", 2, {"axis": 0}),
    ("Gemm", 2, {"alpha": 0.5, "beta": 1.0, "transA": 0, "transB": 1}),
]


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    """Random well-typed catalogue graphs over 2-D inputs, including odd value names and a Split."""
    n_in = draw(st.integers(1, 3))
    dims = draw(st.lists(st.sampled_from([2, 3, 4]), min_size=2, max_size=2))
    names = [draw(st.sampled_from(["x", "w", "in/0", "a b", "t.1", "é"])) + str(i) for i in range(n_in)]
    types = {n: TensorType("float32", (dims[0], dims[0]) if i else tuple(dims)) for i, n in enumerate(names)}
    weight = draw(st.booleans()) and n_in > 1
    weights = (names[-1],) if weight else ()
    inputs = tuple(n for n in names if n not in weights)
    values, nodes = list(names), []
    for k in range(draw(st.integers(1, 6))):
        op, arity, attrs = draw(st.sampled_from(_FORMS))
        args = [draw(st.sampled_from(values)) for _ in range(arity)]
        try:
            (out_t,) = ops.infer(op, [types[a] for a in args], attrs)
        except ops.OpError:
            continue
        out = f"v{k}"
        types[out] = out_t
        nodes.append(Node(op, tuple(args), (out,), make_attrs(attrs)))
        values.append(out)
    data = {}
    if draw(st.booleans()):  # a split with inline sizes, as generated rules carry them
        src = values[-1]
        size = types[src].shape[1]
        if isinstance(size, int) and size >= 2:
            sizes = np.array([1, size - 1], np.int64)
            types["sizes"] = TensorType("int64", (2,))
            data["sizes"] = WeightData(sizes)
            weights = (*weights, "sizes")
            outs = ("s0", "s1")
            for o, t in zip(outs, ops.infer("Split", [types[src], types["sizes"]], {"axis": 1}, [None, sizes], 2)):
                types[o] = t
            nodes.append(Node("Split", (src, "sizes"), outs, make_attrs({"axis": 1})))
            values += outs
    outputs = tuple(dict.fromkeys(draw(st.lists(st.sampled_from(values[n_in:] or values), min_size=1, max_size=2))))
    return lint(Graph(tuple(nodes), inputs, outputs, types, weights, data))


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_text_form_round_trips(g: Graph) -> None:
    text = format_graph(g)
    back = parse_graph(text)
    assert back == g and hash(back) == hash(g)
    assert format_graph(back) == text


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_dead_code_elimination_keeps_outputs_and_is_idempotent(g: Graph) -> None:
    live = eliminate_dead(g)
    assert live.outputs == g.outputs
    assert eliminate_dead(live) is live
    assert all(any(o in live.consumers or o in live.outputs for o in n.outputs) for n in live.nodes)


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


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=4), st.lists(st.integers(-3, 3), min_size=1, max_size=4))
def test_computed_weights_have_equal_digests_exactly_when_made_alike(a: list[int], b: list[int]) -> None:
    """A folded weight's digest is its recipe's: the same op on equal data digests alike (the search's repeat
    check sees one graph), other inputs or another op do not."""
    x, y = WeightData(np.array(a, np.float32)), WeightData(np.array(b, np.float32))

    def concat(p: WeightData, q: WeightData, op: str = "Concat") -> WeightData:
        return WeightData.computed(np.concatenate([p.array, q.array]), (op, (("axis", 0),), 0, p, q))

    same = concat(WeightData(np.array(a, np.float32)), WeightData(np.array(b, np.float32)))
    assert concat(x, y) == same and not same.array.flags.writeable
    assert (concat(y, x) == same) == (a == b)
    assert concat(x, y, op="Other") != same


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=4), st.lists(st.integers(-3, 3), min_size=1, max_size=4))
def test_deferred_weights_are_made_once_when_read_and_digest_as_computed_ones(a: list[int], b: list[int]) -> None:
    """A fold the search may throw away is made only when read, once; its digest is the one the same data
    made at once would have, so a graph hashes alike either way. A make that breaks its promise is caught."""
    x, y = WeightData(np.array(a, np.float32)), WeightData(np.array(b, np.float32))
    recipe = ("Concat", (("axis", 0),), 0, x, y)
    made = []

    def make() -> np.ndarray:
        made.append(1)
        return np.concatenate([x.array, y.array])

    lazy = WeightData.deferred("float32", (len(a) + len(b),), make, recipe)
    assert not made and lazy.spelled is None and lazy.shape == (len(a) + len(b),)
    assert lazy == WeightData.computed(np.concatenate([x.array, y.array]), recipe)
    assert lazy.array.tolist() == [*a, *b] and not lazy.array.flags.writeable
    assert lazy.array is lazy.array and made == [1]
    broken = WeightData.deferred("float32", (len(a) + len(b) + 1,), make, recipe)
    with pytest.raises(ValueError, match="promised"):
        _ = broken.array
