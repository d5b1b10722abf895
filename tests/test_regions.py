"""Where the search cuts a graph: regions are joined by the values their nodes share, but never by a value that
two nodes read one after the other (two layers reading one rotary table or mask)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_search import MERGE_SCALED

from taso.ir import Graph, Kind, Node, TensorType, lint, parse_graph
from taso.search import CYCLE, optimize_graph
from taso.search.regions import regions

LAYERS = parse_graph(
    """graph(%x: float32[2,4], %cs: float32[2,4], %s: float32[] = 0.25):
      %a1 = Mul(%x, %cs) : float32[2,4]
      %w1 = Mul(%a1, %s) : float32[2,4]
      %z1 = Mul(%x, %s) : float32[2,4]
      %p1 = Mul(%w1, %z1) : float32[2,4]
      %h1 = Exp(%p1) : float32[2,4]
      %a2 = Mul(%h1, %cs) : float32[2,4]
      %w2 = Mul(%a2, %s) : float32[2,4]
      %z2 = Mul(%h1, %s) : float32[2,4]
      %p2 = Mul(%w2, %z2) : float32[2,4]
      %h2 = Exp(%p2) : float32[2,4]
      %a3 = Mul(%h2, %cs) : float32[2,4]
      %w3 = Mul(%a3, %s) : float32[2,4]
      %z3 = Mul(%h2, %s) : float32[2,4]
      %p3 = Mul(%w3, %z3) : float32[2,4]
      %h3 = Exp(%p3) : float32[2,4]
      return %h3"""
)
"""Three layers that each read the activation ``cs`` (as Llama's layers read the rotary cos and sin), with an
op no rule mentions (Exp) between layers. Within a layer, ``w`` and ``z`` may merge (`MERGE_SCALED`); across
layers every merge would make a layer read its own result."""


def _muls(h: Graph) -> float:
    return sum(n.op == "Mul" for n in h.nodes) + 0.1 * len(h.nodes)


def test_layers_that_read_one_activation_in_turn_are_regions_of_their_own() -> None:
    found = regions(LAYERS, {"Mul"})
    assert [[n.outputs[0] for n in r] for r in found] == [[f"{v}{k}" for v in "awzp"] for k in (1, 2, 3)]


def test_readers_of_one_activation_that_neither_depends_on_are_one_region() -> None:
    g = parse_graph(
        """graph(%x: float32[2,4], %y: float32[2,4], %cs: float32[2,4]):
          %a = Mul(%x, %cs) : float32[2,4]
          %e = Exp(%a) : float32[2,4]
          %b = Mul(%y, %cs) : float32[2,4]
          return %e, %b"""
    )
    assert [[n.outputs[0] for n in r] for r in regions(g, {"Mul"})] == [["a", "b"]]


def test_a_layer_is_searched_once_and_replayed_on_the_others_with_no_cross_layer_merge_tried() -> None:
    """Joined by ``cs``, the three layers were one region whose search tried (and `surely_cycles` turned down)
    every merge of one layer's Muls with another's; apart, one layer is searched and its steps replayed."""
    found = optimize_graph(LAYERS, [MERGE_SCALED], _muls, alpha=1.0, budget=10, time_limit=1e9)
    assert found.regions == 3 and found.replayed == 2
    assert found.declined[CYCLE] == 0
    assert found.applied[MERGE_SCALED.id] == 3  # each layer's w and z merged


@st.composite
def _chains(draw: st.DrawFn) -> Graph:
    """Random graphs of Muls (which a rule mentions) and Exps (cut points) over two inputs and their products."""
    t = TensorType("float32", (2, 2))
    values, nodes = ["x", "cs"], []
    for k in range(draw(st.integers(2, 12))):
        op = draw(st.sampled_from(["Mul", "Mul", "Exp"]))
        args = tuple(draw(st.sampled_from(values)) for _ in range(2 if op == "Mul" else 1))
        nodes.append(Node(op, args, (f"v{k}",)))
        values.append(f"v{k}")
    return lint(Graph(tuple(nodes), ("x", "cs"), (values[-1],), {v: t for v in values}))


def _depends(g: Graph, later: Node, earlier: Node) -> bool:
    stack, seen = [later], set()
    while stack:
        n = stack.pop()
        for v in n.reads:
            p = g.producers.get(v)
            if p is earlier:
                return True
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                stack.append(p)
    return False


@settings(max_examples=200, deadline=None)
@given(_chains())
def test_regions_join_exactly_what_a_match_could_span(g: Graph) -> None:
    """A value joins its producer and each reader; two readers are apart only where one depends on the other."""
    region_of = {id(n): k for k, r in enumerate(regions(g, {"Mul"})) for n in r}
    muls = [n for n in g.nodes if n.op == "Mul"]
    assert set(region_of) == {id(n) for n in muls}
    for i, n in enumerate(muls):
        for m in muls[i + 1 :]:
            if region_of[id(n)] == region_of[id(m)]:
                continue
            assert not set(n.outputs) & set(m.reads)
            shared = {v for v in set(n.reads) & set(m.reads) if g.kinds[v] is Kind.ACTIVATION}
            assert not shared or _depends(g, m, n)
