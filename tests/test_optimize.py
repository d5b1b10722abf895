"""optimize with proved rules: matching, instantiation at real shapes, search, and the final check."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, prove_into, subst, write_graph
from onnx import TensorProto, helper, numpy_helper

from taso import cost
from taso import onnx as onnx_io
from taso.cost import profiler
from taso.execute import compare
from taso.execute.precompute import precompute
from taso.ir import Graph, WeightData, extract, parse_graph
from taso.optimize import Settings, optimize
from taso.rules import Rule, find_matches, lifted, parse_rules, store
from taso.search import Declined, apply, apply_everywhere, both_directions, optimize_graph, splice, windows
from taso.search import backtrack as taso_search
from taso.verify import run_graph

MERGE_MATMULS = Rule(
    parse_graph(
        """graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight):
          %a = MatMul(%x, %w1) : float32[2,4]
          %b = MatMul(%x, %w2) : float32[2,4]
          return %a, %b"""
    ),
    parse_graph(
        """graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight, %s: int64[2] = [4, 4]):
          %w = Concat(%w1, %w2) {axis=1} : float32[4,8]
          %m = MatMul(%x, %w) : float32[2,8]
          %a, %b = Split(%m, %s) {axis=1} : float32[2,4], float32[2,4]
          return %a, %b"""
    ),
    name="merge-matmuls",
    status="proved",
)

RELU_OF_SPLIT = Rule(
    parse_graph(
        """graph(%x: float32[2,8], %s: int64[2] = [4, 4]):
          %a, %b = Split(%x, %s) {axis=1} : float32[2,4], float32[2,4]
          %ra = Relu(%a) : float32[2,4]
          %rb = Relu(%b) : float32[2,4]
          return %ra, %rb"""
    ),
    parse_graph(
        """graph(%x: float32[2,8], %s: int64[2] = [4, 4]):
          %r = Relu(%x) : float32[2,8]
          %ra, %rb = Split(%r, %s) {axis=1} : float32[2,4], float32[2,4]
          return %ra, %rb"""
    ),
    name="relu-before-split",
    status="proved",
)


CONCAT_OF_SPLIT = Rule(
    parse_graph(
        """graph(%x: float32[2,8], %s: int64[2] = [4, 4]):
          %a, %b = Split(%x, %s) {axis=1} : float32[2,4], float32[2,4]
          %y = Concat(%a, %b) {axis=1} : float32[2,8]
          return %y"""
    ),
    parse_graph("graph(%x: float32[2,8]):\n  return %x"),
    name="concat-of-split",
    status="proved",
)

MATMUL_DISTRIBUTES = Rule(
    parse_graph(
        """graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight):
          %a = MatMul(%x, %w1) : float32[2,4]
          %b = MatMul(%x, %w2) : float32[2,4]
          %y = Add(%a, %b) : float32[2,4]
          return %y"""
    ),
    parse_graph(
        """graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight):
          %w = Add(%w1, %w2) : float32[4,4]
          %y = MatMul(%x, %w) : float32[2,4]
          return %y"""
    ),
    name="matmul-distributes",
    status="proved",
)


def _two_branches(tmp: Path, dtype: str = "float32") -> Path:
    """x -> two sibling MatMul+Relu -> Concat: three rewrites turn it into one MatMul+Relu, the first of which
    makes the graph costlier (the search must pass through it)."""
    rng = np.random.default_rng(1)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [numpy_helper.from_array((rng.standard_normal((32, 40)) / 6).astype(dtype), f"w{i}") for i in range(2)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"], name=f"mm{i}") for i in range(2)]
    nodes += [helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}") for i in range(2)]
    nodes.append(helper.make_node("Concat", ["r0", "r1"], ["y"], name="cat", axis=1))
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info("x", elem, ["batch", 32])],
        [helper.make_tensor_value_info("y", elem, ["batch", 80])],
        initializer=inits,
    )
    return write_graph(graph, tmp / "branches.onnx")


def _mlp(tmp: Path, hidden: tuple[int, int] = (48, 80)) -> Path:
    """x -> three sibling MatMuls (one is a graph output) -> Relu -> Concat: the shape of a QKV projection."""
    rng = np.random.default_rng(0)
    n1, n2 = hidden
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, n)).astype(np.float32) / 6, f"w{i}")
        for i, n in enumerate((n1, n2, n1))
    ]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"], name=f"mm{i}") for i in range(3)]
    nodes += [helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}") for i in range(3)]
    nodes.append(helper.make_node("Concat", ["r0", "r1", "r2"], ["y"], name="cat", axis=1))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2 * n1 + n2]),
            helper.make_tensor_value_info("m1", TensorProto.FLOAT, ["batch", n2]),
        ],
        initializer=inits,
    )
    return write_graph(graph, tmp / "mlp.onnx")


def _store(tmp: Path, *rules: Rule) -> Path:
    """A store of ``rules``, the ones marked proved proved again by the verifier, as optimize trusts only a proof
    made from the current specs (`taso.rules.provenance`)."""
    path = tmp / "rules.db"
    return prove_into(path, rules)


def test_rule_matches_at_other_sizes_and_commuted_inputs(tmp_path: Path) -> None:
    g = onnx_io.load_model(_mlp(tmp_path))
    matches = list(find_matches(g, MERGE_MATMULS))
    pairs = {(m.values["w1"], m.values["w2"]) for m in matches}
    assert {("w0", "w1"), ("w1", "w0"), ("w0", "w2"), ("w1", "w2")} <= pairs
    new = apply(g, next(m for m in matches if (m.values["w1"], m.values["w2"]) == ("w0", "w1")))
    ops = [n.op for n in new.nodes]
    assert ops.count("MatMul") == 2 and ops.count("Split") == 1 and "Concat" in ops  # weights folded: one Concat left
    merged = [n for n in new.nodes if n.op == "Split"][0]
    assert new.data[merged.inputs[1]].array.tolist() == [48, 80]  # sizes recomputed for the real shapes
    assert set(merged.outputs) == {"m0", "m1"}  # the target takes over the replaced values' names


def test_target_that_does_not_type_check_is_declined(tmp_path: Path) -> None:
    bad = Rule(
        MERGE_MATMULS.src,
        parse_graph(str(MERGE_MATMULS.dst).replace("{axis=1} : float32[4,8]", "{axis=0} : float32[8,4]")),
        name="wrong-axis",
        status="proved",
    )
    g = onnx_io.load_model(_mlp(tmp_path))
    m = next(find_matches(g, bad))
    with pytest.raises(Declined, match="does not fit the model's shapes|would change an output's shape"):
        apply(g, m)


def test_search_passes_through_a_costlier_graph_to_the_best(tmp_path: Path) -> None:
    src, out = _two_branches(tmp_path), tmp_path / "out.onnx"
    (tmp_path / "alone").mkdir()
    alone = _store(tmp_path / "alone", MERGE_MATMULS)
    greedy = optimize(src, out, alone, settings=Settings(device="estimate", alpha=1.0, dims={"batch": 64}))
    assert greedy.rules_applied == {}  # the merge alone makes things worse, and opens no rewrite that repays it
    assert greedy.search["nearest"]["rule"] == "merge-matmuls" and greedy.search["nearest"]["added_ms"] > 0
    assert any(line.startswith("nearest   merge-matmuls: +") for line in greedy.lines())
    db = _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    report = optimize(src, out, db, settings=Settings(device="estimate", alpha=2.0, dims={"batch": 64}))
    assert report.check is not None and report.check.ok
    assert {v["name"] for v in report.rules_applied.values()} == {
        "merge-matmuls",
        "relu-before-split",
        "concat-of-split",
    }
    assert report.cost["after_ms"] < report.cost["before_ms"]
    assert report.search["nearest"] is None and not any(line.startswith("nearest") for line in report.lines())
    saved = onnx.load(str(out))
    assert [n.op_type for n in saved.graph.node] == ["MatMul", "Relu"]
    assert saved.graph.node[-1].output[0] == "y"  # the graph output keeps its name
    assert [d.dim_param for d in saved.graph.input[0].type.tensor_type.shape.dim][:1] == ["batch"]


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_float32_rules_rewrite_models_of_other_float_types(tmp_path: Path, dtype: str) -> None:
    """The rules are float32 graphs proved over the reals: they rewrite a float16 (or float64) model alike, the
    folded weights keep the model's type, and onnxruntime finds the result equal at that type's tolerance."""
    src, out = _two_branches(tmp_path, dtype), tmp_path / "out.onnx"
    db = _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    report = optimize(src, out, db, settings=Settings(device="estimate", alpha=2.0, dims={"batch": 64}))
    assert {v["name"] for v in report.rules_applied.values()} == {
        "merge-matmuls",
        "relu-before-split",
        "concat-of-split",
    }
    assert report.check is not None and report.check.ok
    saved = onnx.load(str(out))
    assert [n.op_type for n in saved.graph.node] == ["MatMul", "Relu"]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    assert [i.data_type for i in saved.graph.initializer] == [elem]
    assert saved.graph.output[0].type.tensor_type.elem_type == elem


SCALES = Rule(
    parse_graph(
        """graph(%x: float32[2,4], %a: float32[] weight, %b: float32[] weight):
          %s = Mul(%x, %a) : float32[2,4]
          %t = Mul(%s, %b) : float32[2,4]
          return %t"""
    ),
    parse_graph(
        """graph(%x: float32[2,4], %a: float32[] weight, %b: float32[] weight):
          %k = Mul(%a, %b) : float32[]
          %t = Mul(%x, %k) : float32[2,4]
          return %t"""
    ),
    name="fold-scales",
    status="proved",
)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_fold_that_overflows_the_models_float_type_is_declined(dtype: str) -> None:
    """300 x 300 is past float16's 65,504: folded, the scale would be inf where x * 300 * 300 is finite for
    small x. In float32 the same fold is fine."""
    g = parse_graph(
        f"""graph(%x: {dtype}[2,4], %a: {dtype}[] weight, %b: {dtype}[] weight):
          %s = Mul(%x, %a) : {dtype}[2,4]
          %t = Mul(%s, %b) : {dtype}[2,4]
          return %t"""
    )
    g = replace(g, data={w: WeightData(np.array(300.0, dtype)) for w in g.weights})
    m = next(find_matches(g, SCALES))
    if dtype == "float16":
        with pytest.raises(Declined, match="overflows float16"):
            apply(g, m)
    else:
        folded = apply(g, m)
        assert [n.op for n in folded.nodes] == ["Mul"]
        assert all(float(d.array) in (300.0, 90000.0) for d in folded.data.values())


@pytest.mark.parametrize("left", ["float16", "float32", "float64", "int64"])
@pytest.mark.parametrize("right", ["float16", "float32", "float64"])
def test_one_match_binds_one_float_type(left: str, right: str) -> None:
    """A float32 rule matches any one float type, never two at once, and never integers."""
    g = parse_graph(
        f"""graph(%x: {left}[2,4], %u: {left}[4,4] weight, %v: {right}[4,4] weight):
          %a = MatMul(%x, %u) : {left}[2,4]
          %b = MatMul(%x, %v) : {left}[2,4]
          return %a, %b"""
    )
    assert bool(list(find_matches(g, MERGE_MATMULS))) == (left == right)


MERGE_MATMUL_ADD = Rule(
    parse_graph(
        """graph(%x: float32[2,4], %h: float32[2,4], %a: float32[4,4] weight, %b: float32[4,4] weight):
          %p = MatMul(%x, %a) : float32[2,4]
          %q = MatMul(%h, %b) : float32[2,4]
          %y = Add(%p, %q) : float32[2,4]
          return %y"""
    ),
    parse_graph(
        """graph(%x: float32[2,4], %h: float32[2,4], %a: float32[4,4] weight, %b: float32[4,4] weight):
          %xh = Concat(%x, %h) {axis=1} : float32[2,8]
          %w = Concat(%a, %b) {axis=0} : float32[8,4]
          %y = MatMul(%xh, %w) : float32[2,4]
          return %y"""
    ),
    name="merge-matmul-add",
    status="proved",
)


@pytest.mark.parametrize("gates", [2, 3])
def test_a_rewrite_reuses_a_value_the_graph_already_computes(gates: int) -> None:
    """NasRNN's gates, x @ Wx_i + h @ Wh_i: each merge makes Concat(x, h); the second and later reuse the
    first's, so their MatMuls read one value and the sibling merge applies to them."""
    inputs = ", ".join(f"%a{i}: float32[4,4] weight, %b{i}: float32[4,4] weight" for i in range(gates))
    body = "\n".join(
        f"  %p{i} = MatMul(%x, %a{i}) : float32[2,4]\n  %q{i} = MatMul(%h, %b{i}) : float32[2,4]\n"
        f"  %y{i} = Add(%p{i}, %q{i}) : float32[2,4]"
        for i in range(gates)
    )
    outputs = ", ".join(f"%y{i}" for i in range(gates))
    g = parse_graph(f"graph(%x: float32[2,4], %h: float32[2,4], {inputs}):\n{body}\n  return {outputs}")
    rng = np.random.default_rng(0)
    g = replace(g, data={w: WeightData(rng.standard_normal((4, 4)).astype(np.float32)) for w in g.weights})
    h = g
    for _ in range(gates):
        h = apply(h, next(find_matches(h, MERGE_MATMUL_ADD)))
    assert next(find_matches(h, MERGE_MATMUL_ADD), None) is None
    concats = [n for n in h.nodes if n.op == "Concat"]
    assert len(concats) == 1 and concats[0].inputs == ("x", "h")
    assert len(list(find_matches(h, MERGE_MATMULS))) == gates * (gates - 1)  # every ordered pair of sibling MatMuls
    feeds = {v: rng.standard_normal((2, 4)) for v in g.inputs}
    for want, got in zip(run_graph(g, feeds), run_graph(h, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def _sibling_pairs(pairs: int) -> Graph:
    """``pairs`` unconnected copies of x -> two sibling MatMuls, each copy with weights of its own."""
    inputs = ", ".join(
        f"%x{i}: float32[2,4], %v{i}: float32[4,4] weight, %u{i}: float32[4,4] weight" for i in range(pairs)
    )
    body = "\n".join(
        f"  %a{i} = MatMul(%x{i}, %v{i}) : float32[2,4]\n  %b{i} = MatMul(%x{i}, %u{i}) : float32[2,4]"
        for i in range(pairs)
    )
    outputs = ", ".join(f"%a{i}, %b{i}" for i in range(pairs))
    g = parse_graph(f"graph({inputs}):\n{body}\n  return {outputs}")
    rng = np.random.default_rng(0)
    return replace(g, data={w: WeightData(rng.standard_normal((4, 4)).astype(np.float32)) for w in g.weights})


def _kernels(h: Graph) -> float:
    """A MatMul costs 1, a Split 0.1 (merged weights are folded): a merge saves 0.9."""
    return sum({"MatMul": 1.0, "Split": 0.1}.get(n.op, 0.0) for n in h.nodes)


@pytest.mark.parametrize("pairs", [2, 4])
def test_a_search_that_spends_its_budget_improving_goes_on_from_its_best(pairs: int) -> None:
    """With a budget of one graph per pass, each pass merges one pair of sibling MatMuls; the search goes on
    from each pass's best until a pass finds nothing cheaper, so every pair is merged."""
    found = taso_search.search(_sibling_pairs(pairs), [MERGE_MATMULS], _kernels, 1.0, 1, 1e9, work=10)
    assert found.applied == {MERGE_MATMULS.id: pairs}
    assert sum(n.op == "MatMul" for n in found.graph.nodes) == pairs
    assert found.expanded == pairs + 1  # one pass per merge, and the last that found nothing cheaper
    assert found.cost_after == pytest.approx(found.cost_before - 0.9 * pairs)
    assert [step.name for step in found.steps] == ["merge-matmuls"] * pairs


@pytest.mark.parametrize(
    ("rule", "shrinks"),
    [(MERGE_MATMULS, False), (RELU_OF_SPLIT, True), (CONCAT_OF_SPLIT, True), (MATMUL_DISTRIBUTES, True)],
)
def test_a_rule_shrinks_when_its_target_runs_fewer_ops_on_activations(rule: Rule, shrinks: bool) -> None:
    """Weight-only ops fold away: the MatMul merge runs a MatMul and a Split for two MatMuls (as many), the
    distributed MatMul one for two and an Add."""
    assert rule.shrinks is shrinks


def _kernels_split_dear(h: Graph) -> float:
    """A Split dearer than the MatMul a merge saves: merging two branches' MatMuls pays only once their two
    Relus are one."""
    return sum({"MatMul": 1.0, "Split": 1.1, "Relu": 0.3, "Concat": 0.5}.get(n.op, 0.0) for n in h.nodes)


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_rewrite_that_does_not_pay_is_tried_with_each_rewrite_it_opens(tmp_path: Path, lookahead: bool) -> None:
    """One graph expanded per pass: the merge alone costs more (3.2 against 3.1, within alpha), so a plain
    search queues it and stops; with lookahead the merge is also tried with each rewrite it opens, and with
    the Relu moved before its Split the two pay together (2.9). The steps replay to the result."""
    g = onnx_io.load_model(_two_branches(tmp_path))
    rules = [MERGE_MATMULS, RELU_OF_SPLIT]
    found = taso_search.search(g, rules, _kernels_split_dear, 1.05, 1, 60.0, lookahead=lookahead)
    if not lookahead:
        assert found.graph is g and found.applied == {} and found.expanded == 1
        return
    assert [step.name for step in found.steps] == ["merge-matmuls", "relu-before-split"]
    assert [n.op for n in found.graph.nodes] == ["MatMul", "Relu", "Split", "Concat"]
    assert found.cost_after == pytest.approx(2.9)
    replayed = taso_search.replay(g, found.steps)
    assert replayed is not None and replayed.structure == found.graph.structure


def test_the_time_limit_leaves_out_what_the_clock_is_told_to() -> None:
    """A cost that takes 0.3 s per graph (a unit measured on a GPU) spends a 1 s limit on three candidates, and
    the result says the limit cut it short; a clock that leaves that time out, as `optimize` does with the cost
    model's measuring, searches as if the costs were cached."""
    slept = 0.0

    def measured(h: Graph) -> float:
        nonlocal slept
        time.sleep(0.3)
        slept += 0.3
        return _kernels(h)

    plain = taso_search.search(_sibling_pairs(4), [MERGE_MATMULS], measured, 1.0, 1, 1.0, work=10)
    assert sum(plain.applied.values()) < 4 and plain.timed_out
    slept = 0.0
    found = taso_search.search(
        _sibling_pairs(4),
        [MERGE_MATMULS],
        measured,
        alpha=1.0,
        budget=1,
        time_limit=1.0,
        clock=lambda: time.perf_counter() - slept,
        work=10,
    )
    assert found.applied == {MERGE_MATMULS.id: 4} and found.seconds < 1.0 and not found.timed_out


def test_regions_of_one_form_are_searched_once_and_replayed_with_their_own_weights() -> None:
    g = _sibling_pairs(4)
    found = optimize_graph(g, [MERGE_MATMULS], _kernels, alpha=1.0, budget=10)
    assert found.regions == 4 and found.replayed == 3
    assert found.applied == {MERGE_MATMULS.id: 4}
    assert found.cost_after == pytest.approx(found.cost_before - 0.9 * 4)
    rng = np.random.default_rng(1)
    feeds = {x: rng.standard_normal((2, 4)) for x in g.inputs}
    for want, got in zip(run_graph(g, feeds), run_graph(found.graph, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_region_rewrite_that_does_not_pay_in_the_whole_graph_is_not_kept() -> None:
    """A region is costed apart from what borders it; here a Split costs 0.1 alone and 2 in the whole graph
    (as a fusion the region cannot see would), so the merge that pays in its region is dropped, and its twin
    region is not rewritten either."""
    g = _sibling_pairs(2)

    def bordered(h: Graph) -> float:
        whole = len(h.outputs) == len(g.outputs)
        return _kernels(h) + (1.9 * sum(n.op == "Split" for n in h.nodes) if whole else 0.0)

    found = optimize_graph(g, [MERGE_MATMULS], bordered, alpha=1.0, budget=10)
    assert found.regions == 2 and found.applied == {} and found.graph is g
    assert found.declined["no cheaper in the whole graph"] == 1
    assert bordered(found.graph) == bordered(g)
    kept = optimize_graph(g, [MERGE_MATMULS], _kernels, alpha=1.0, budget=10)
    assert kept.applied == {MERGE_MATMULS.id: 2}


def test_lifted_rule_rewrites_a_transformer_and_stays_equivalent(tmp_path: Path, bert_path: Path) -> None:
    """A rule proved on matrices, lifted to [batch, seq, hidden]: BERT's Q/K/V projections merge, and the
    rewritten model matches the original in onnxruntime (dynamic batch and seq kept)."""
    rule = lifted(MERGE_MATMULS, 1)
    assert rule is not None and rule.dst.nodes[2].attr["axis"] == 2 and rule.dst.nodes[0].attr["axis"] == 1

    def merge_all(g):
        applied = 0
        while (m := next(find_matches(g, rule), None)) is not None:
            g = apply(g, m)
            applied += 1
        return g, {MERGE_MATMULS.id: applied}

    out = tmp_path / "bert.onnx"
    report = optimize(bert_path, out, rewrite=merge_all)
    assert report.check is not None and report.check.ok
    assert (
        report.rules_applied[MERGE_MATMULS.id]["count"] >= 4
    )  # q/k/v (and the equal-shaped output projection) per layer
    saved = onnx.load(str(out))
    assert sum(n.op_type == "MatMul" for n in saved.graph.node) < 16
    assert saved.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"


def test_lifting_refuses_what_it_cannot_justify() -> None:
    conv_rule = Rule(
        parse_graph(
            "graph(%x: float32[1,2,5,5], %w: float32[2,2,1,1] weight):\n"
            "  %y = Conv(%x, %w) {kernel_shape=[1,1]} : float32[1,2,5,5]\n  return %y"
        ),
        parse_graph(
            "graph(%x: float32[1,2,5,5], %w: float32[2,2,1,1] weight):\n"
            "  %y = Conv(%x, %w) {kernel_shape=[1,1]} : float32[1,2,5,5]\n  return %y"
        ),
    )
    assert lifted(conv_rule, 1) is None  # Conv is not batch-polymorphic in the leading dims
    assert lifted(RELU_OF_SPLIT, 2) is not None


def test_a_rewritten_region_is_spliced_in_where_it_was() -> None:
    """The nodes after a region keep their order, so a later region of the same form extracts alike (NasRNN's
    second step had its x-only MatMuls moved ahead of the rest when the first step's rewrite was appended)."""
    g = parse_graph(
        """graph(%x: float32[2,4], %y: float32[2,4], %u: float32[4,4] weight, %v: float32[4,4] weight):
          %a = MatMul(%x, %u) : float32[2,4]
          %b = MatMul(%x, %v) : float32[2,4]
          %c = Relu(%y) : float32[2,4]
          %d = Add(%a, %c) : float32[2,4]
          %e = Add(%b, %c) : float32[2,4]
          return %d, %e"""
    )
    rng = np.random.default_rng(0)
    g = replace(g, data={w: WeightData(rng.standard_normal((4, 4)).astype(np.float32)) for w in g.weights})
    region = extract(g, list(g.nodes[:2]))
    merged = apply(region, next(find_matches(region, MERGE_MATMULS)))
    spliced = splice(g, region, merged)
    assert [n.op for n in spliced.nodes] == ["MatMul", "Split", "Relu", "Add", "Add"]
    feeds = {v: rng.standard_normal((2, 4)) for v in g.inputs}
    for want, got in zip(run_graph(g, feeds), run_graph(spliced, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_regions_rewritten_separately_splice_back_consistently(tmp_path: Path, bert_path: Path) -> None:
    """Both layers' Q/K/V regions are rewritten on their own; names the rewrites make must not collide."""
    g = onnx_io.load_model(bert_path)
    rules = both_directions([MERGE_MATMULS])

    def matmuls(h) -> float:
        return float(sum(n.op == "MatMul" for n in h.nodes))

    found = optimize_graph(g, rules, matmuls, alpha=1.0, budget=20)
    assert found.regions > 2 and found.applied[MERGE_MATMULS.id] == 4  # two merges per layer
    out = onnx_io.save_model(found.graph, tmp_path / "merged.onnx")
    assert compare(bert_path, out, g).ok


def _chain(tmp: Path, blocks: int, grow: int = 0) -> Path:
    """``blocks`` blocks in a row, each two sibling MatMuls of its input added together: one value crosses
    between blocks, two inside one. Each block is ``grow`` wider than the one before (0: all of one form)."""
    rng = np.random.default_rng(2)
    nodes, inits, x = [], [], "x"
    width = [16 + grow * b for b in range(blocks + 1)]
    for b in range(blocks):
        for s in "ab":
            w = rng.standard_normal((width[b], width[b + 1])).astype(np.float32) / 4
            inits.append(numpy_helper.from_array(w, f"w{b}{s}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{b}{s}"], [f"m{b}{s}"], name=f"mm{b}{s}"))
        x = f"y{b}"
        nodes.append(helper.make_node("Add", [f"m{b}a", f"m{b}b"], [x], name=f"add{b}"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, width[-1]])],
        initializer=inits,
    )
    return write_graph(graph, tmp / "chain.onnx")


def test_a_large_region_is_cut_between_blocks_and_searched_window_by_window(tmp_path: Path) -> None:
    src = _chain(tmp_path, 8)
    g = onnx_io.load_model(src)
    cut = windows(g, list(g.nodes), 7)
    assert [n for w in cut for n in w] == list(g.nodes) and all(len(w) <= 7 for w in cut)
    assert all(w[-1].op == "Add" for w in cut)  # cut where one value crosses: between blocks, never inside one

    def matmuls(h) -> float:
        return float(sum(n.op == "MatMul" for n in h.nodes))

    rules = both_directions([MATMUL_DISTRIBUTES])
    whole = optimize_graph(g, rules, matmuls, alpha=1.0, max_nodes=len(g.nodes))
    windowed = optimize_graph(g, rules, matmuls, alpha=1.0, max_nodes=7)
    assert whole.regions == 1 and windowed.regions == len(cut) > 1
    assert windowed.applied == whole.applied == {MATMUL_DISTRIBUTES.id: 8}  # no block lost to a cut
    out = onnx_io.save_model(windowed.graph, tmp_path / "merged.onnx")
    assert compare(src, out, g).ok


def test_the_work_is_shared_so_every_window_is_searched(tmp_path: Path) -> None:
    """Windows of other forms, each given its part of the work: every block is rewritten, whatever the time."""
    g = onnx_io.load_model(_chain(tmp_path, 8, grow=1))

    def matmuls(h) -> float:
        return float(sum(n.op == "MatMul" for n in h.nodes))

    found = optimize_graph(g, both_directions([MATMUL_DISTRIBUTES]), matmuls, alpha=1.0, time_limit=1e9, max_nodes=7)
    assert found.regions > 1 and not found.timed_out
    assert found.applied == {MATMUL_DISTRIBUTES.id: 8}


def _shares(monkeypatch, g: Graph) -> tuple[taso_search.SearchResult, list[int]]:
    """Sibling MatMuls merged in every region of ``g`` with a budget of 10, and the work each search was given."""
    given: list[int] = []

    def recording(*args, **kwargs):
        given.append(kwargs["work"])
        return searching(*args, **kwargs)

    searching = taso_search.search
    monkeypatch.setattr(taso_search, "search", recording)
    return optimize_graph(g, [MERGE_MATMULS], _kernels, alpha=1.0, budget=10, time_limit=1e9), given


def test_regions_that_will_be_replayed_take_no_share_of_the_work(monkeypatch) -> None:
    """Four regions of one form: the one searched gets the whole work (PASSES budgets), not a quarter of it."""
    found, given = _shares(monkeypatch, _sibling_pairs(4))
    assert found.regions == 4 and found.replayed == 3
    assert given == [taso_search.PASSES * 10]


def test_the_work_is_shared_in_proportion_to_each_regions_nodes(monkeypatch) -> None:
    """A region of two sibling MatMuls and one of six: the small one, searched first, gets a quarter of the
    work (2 of 8 nodes), not half, and the large one what is left."""
    g = parse_graph(
        """graph(%x: float32[2,4], %v: float32[4,4] weight, %u: float32[4,4] weight, %y: float32[2,4], """
        + ", ".join(f"%w{i}: float32[4,4] weight" for i in range(6))
        + "):\n  %a = MatMul(%x, %v) : float32[2,4]\n  %b = MatMul(%x, %u) : float32[2,4]\n"
        + "".join(f"  %c{i} = MatMul(%y, %w{i}) : float32[2,4]\n" for i in range(6))
        + "  return %a, %b, "
        + ", ".join(f"%c{i}" for i in range(6))
    )
    rng = np.random.default_rng(0)
    g = replace(g, data={w: WeightData(rng.standard_normal((4, 4)).astype(np.float32)) for w in g.weights})
    found, given = _shares(monkeypatch, g)
    work = 2 * taso_search.PASSES * 10  # two forms
    assert found.regions == 2 and len(given) == 2
    assert given[0] == work // 4
    assert given[1] >= work - work // 4  # what the small one left


def test_the_float64_check_compares_a_source_output_with_the_input_that_replaces_it() -> None:
    """Concat(Split(x)) => x at static shapes: the check must compare y with x (the target's output is its
    input), so a false rule of that form is declined and a true one applies."""
    g = parse_graph(
        """graph(%x: float32[2,8], %s: int64[2] = [4, 4]):
          %a, %b = Split(%x, %s) {axis=1} : float32[2,4], float32[2,4]
          %y = Concat(%a, %b) {axis=1} : float32[2,8]
          %r = Relu(%y) : float32[2,8]
          return %r"""
    )
    new = apply(g, next(find_matches(g, CONCAT_OF_SPLIT)))
    assert [(n.op, n.inputs) for n in new.nodes] == [("Relu", ("x",))]
    swapped = Rule(
        parse_graph(str(CONCAT_OF_SPLIT.src).replace("Concat(%a, %b)", "Concat(%b, %a)")),
        CONCAT_OF_SPLIT.dst,
        name="concat-of-split-swapped",
        status="proved",
    )
    g = parse_graph(str(g).replace("Concat(%a, %b)", "Concat(%b, %a)"))
    with pytest.raises(Declined, match="float64 check"):
        apply(g, next(find_matches(g, swapped)))


def test_unit_keys_remembered_across_graphs_are_each_graphs_own() -> None:
    """A search costs thousands of graphs with one cost model, which remembers each unit's key by the unit's
    footprint: graphs with equal nodes at other shapes or split sizes get their own keys, and a trailing view's
    target shape, not timed (`cost.timed_nodes`), changes none."""
    text = """graph(%x: float32[2,8], %w: float32[8,8] weight, %s: int64[2] = [4, 4], %t: int64[2] = [2, 8]):
      %m = MatMul(%x, %w) : float32[2,8]
      %r = Relu(%m) : float32[2,8]
      %a, %b = Split(%r, %s) {axis=1} : float32[2,4], float32[2,4]
      %c = Concat(%b, %a) {axis=1} : float32[2,8]
      %y = Reshape(%c, %t) : float32[2,8]
      return %y"""
    variants = [
        text,
        text.replace("[2,", "[16,").replace("[2, 8]", "[16, 8]"),
        text.replace("[4, 4]", "[2, 6]").replace("float32[2,4], float32[2,4]", "float32[2,2], float32[2,6]"),
        text.replace("[2, 8]", "[2, -1]"),  # another target shape of a trailing view, which is not timed
    ]
    model = cost.CostModel(profiler.pick_device("cpu"), measure=False, calibration=cost.DEFAULT_CALIBRATION)
    seen: list[set[str]] = []
    for v in variants:
        g = parse_graph(v)
        g = replace(g, data={**g.data, "w": WeightData(np.ones(g.types["w"].shape, np.float32))})
        fresh = [cost.unit_key(cost.unit_graph(g, u)) for u in cost.units(g)]
        assert [u.key for u in model.graph_cost(g).units] == list(dict.fromkeys(fresh))
        seen.append(set(fresh))
    assert seen[0] != seen[1] and seen[0] != seen[2] and seen[0] == seen[3]


def _inception_reducers(tmp: Path) -> Path:
    """x -> three biased 1x1 convs of 16, 24 and 8 channels, each followed by Relu; two feed a 3x3 conv each,
    none feeds a Concat with its sibling: the shape of an Inception module's reducers."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    for i, c in enumerate((16, 24, 8)):
        inits += [
            numpy_helper.from_array((rng.standard_normal((c, 12, 1, 1)) / 4).astype(np.float32), f"w{i}"),
            numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("Conv", ["x", f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
    for i, c in ((1, 24), (2, 8)):
        inits.append(numpy_helper.from_array((rng.standard_normal((4, c, 3, 3)) / 8).astype(np.float32), f"k{i}"))
        nodes.append(helper.make_node("Conv", [f"r{i}", f"k{i}"], [f"y{i}"], kernel_shape=[3, 3], pads=[1] * 4))
    nodes.append(helper.make_node("Concat", ["r0", "y1", "y2"], ["y"], axis=1))
    return _reducers_model(tmp / "reducers.onnx", nodes, inits, 24)


def _reducers_model(path: Path, nodes: list, inits: list, channels: int) -> Path:
    """Reducers read x (1, 12, 7, 7) and write y (1, ``channels``, 7, 7)."""
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 7, 7])],
        initializer=inits,
    )
    return write_graph(graph, path)


def test_the_shipped_store_merges_biased_sibling_convs_that_feed_no_concat(tmp_path: Path) -> None:
    """Inception's reducers: Conv(x,w1,b1), Conv(x,w2,b2) => Split(Conv(x, Concat(w1,w2), Concat(b1,b2))), four
    ops on one side (specs/pools/sibling-merges.toml), at real channel counts, and the result computes the same."""
    src = _inception_reducers(tmp_path)
    g = onnx_io.load_model(src)
    rules = both_directions(store.load_rules(store.open_store(store.DEFAULT_PATH), status="proved"))
    merges = [r for r in rules if r.name == "Concat,Concat,Conv,Split => Conv,Conv~reverse"]
    found = [(r, m) for r in merges for m in find_matches(g, r)]
    convs = {tuple(sorted(m.values[v] for v in m.values if m.values[v].startswith("w"))) for _, m in found}
    assert {("w0", "w1"), ("w0", "w2"), ("w1", "w2")} <= convs  # every pair of 1x1 siblings, 16/24/8 channels
    _, m = next((r, m) for r, m in found if {"w0", "w1"} <= set(m.values.values()))
    new = apply(g, m)
    ops = [n.op for n in new.nodes]
    assert ops.count("Conv") == 4 and ops.count("Split") == 1  # two 1x1 convs became one
    split = next(n for n in new.nodes if n.op == "Split")
    assert sorted(new.data[split.inputs[1]].array.tolist()) == [16, 24]  # sizes of the real siblings
    out = onnx_io.save_model(new, tmp_path / "merged.onnx")
    assert compare(src, out, g, rtol=1e-4, atol=1e-5).ok


def _rewrite_in_order(g: Graph, order: list[str]) -> tuple[Graph, list[str]]:
    """``g`` rewritten by the shipped store's proved rules of these names (both directions, lifted), the first
    in ``order`` that matches each time, until none does; and the names applied, in turn."""
    by_name: dict[str, list[Rule]] = {}
    for r in both_directions(store.load_rules(store.open_store(store.DEFAULT_PATH), status="proved")):
        by_name.setdefault(r.name, []).append(r)
    applied = []
    while True:
        step = next(((n, m) for n in order for r in by_name[n] for m in find_matches(g, r)), None)
        if step is None:
            return g, applied
        g = apply(g, step[1])
        applied.append(step[0])


def test_three_merged_reducers_end_as_one_conv_one_relu_one_split(tmp_path: Path) -> None:
    """Pairwise merges of three siblings nest two Splits with a Relu after each part, where onnxruntime fuses
    none of them into the conv; the shipped split moves (specs/pools/split-moves.toml) bring the graph to one
    Conv, one Relu and one three-way Split, and it computes the same."""
    src = _inception_reducers(tmp_path)
    g = onnx_io.load_model(src)
    order = ["Concat,Concat,Conv,Split => Conv,Conv~reverse", "Split,Relu,Relu => Relu,Split", "Split,Split => Split"]
    g, applied = _rewrite_in_order(g, order)
    assert applied.count(order[0]) == 2 and order[1] in applied and order[2] in applied
    ops = [n.op for n in g.nodes]
    assert ops.count("Conv") == 3 and ops.count("Relu") == 1 and ops.count("Split") == 1
    relu = next(n for n in g.nodes if n.op == "Relu")
    split = next(n for n in g.nodes if n.op == "Split")
    assert g.producers[relu.inputs[0]].op == "Conv" and split.inputs[0] == relu.outputs[0]
    assert sorted(g.data[split.inputs[1]].array.tolist()) == [8, 16, 24]
    out = onnx_io.save_model(g, tmp_path / "merged.onnx")
    assert compare(src, out, onnx_io.load_model(src), rtol=1e-4, atol=1e-5).ok


def test_merged_projections_end_as_one_matmul_one_bias_add_one_split(tmp_path: Path, bert_path: Path) -> None:
    """BERT's Q, K and V projections merged pairwise leave two nested Splits and a bias Add after each part;
    the shipped bias and split moves (specs/rules/bias-split.rules, specs/pools/split-moves.toml, lifted to
    [batch, seq, hidden]) leave one MatMul, one Add of the concatenated biases and one three-way Split per
    layer, the MatMul+Add that onnxruntime runs as one Gemm, and the model computes the same."""
    g = onnx_io.load_model(bert_path)
    layers = sum(n.op == "Softmax" for n in g.nodes)
    order = [
        "Concat,MatMul,Split => MatMul,MatMul~reverse",
        "a bias Add on each part of a Split as one Add before the Split",
        "Split,Split => Split",
    ]
    g, applied = _rewrite_in_order(g, order)
    assert [applied.count(n) for n in order] == [2 * layers, 2 * layers, layers]
    splits = [n for n in g.nodes if n.op == "Split"]
    assert len(splits) == layers
    for split in splits:
        add = g.producers[split.inputs[0]]
        assert add.op == "Add" and g.producers[add.inputs[0]].op == "MatMul"
        assert len(set(g.data[split.inputs[1]].array.tolist())) == 1 and len(split.outputs) == 3
    out = onnx_io.save_model(g, tmp_path / "merged.onnx")
    assert compare(bert_path, out, onnx_io.load_model(bert_path), rtol=1e-4, atol=1e-5).ok


@pytest.mark.parametrize(("window", "also_read"), [((2, 0), False), ((3, 1), False), ((3, 1), True)])
def test_a_relu_moves_after_a_max_pool_it_alone_feeds(tmp_path: Path, window: tuple[int, int], also_read: bool) -> None:
    """VGG's 2x2 and the ResNets' padded 3x3 stride-2 pools bind the rule's free window, and the Relu then
    runs on a quarter of the elements; a Relu that is also a graph output stays where it is."""
    k, pad = window
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[k, k], strides=[2, 2], pads=[pad] * 4),
    ]
    side = (12 + 2 * pad - k) // 2 + 1
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, side, side])]
    if also_read:
        outs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 8, 12, 12]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])
    src = write_graph(helper.make_graph(nodes, "pool", [x], outs), tmp_path / "pool.onnx")
    g = onnx_io.load_model(src)
    rules = both_directions(store.load_rules(store.open_store(store.DEFAULT_PATH), status="proved"))
    rule = next(r for r in rules if r.name == "Relu then MaxPool as MaxPool then Relu")
    (match,) = find_matches(g, rule)
    if also_read:
        with pytest.raises(Declined, match="is a model output"):
            apply(g, match)
        return
    new = apply(g, match)
    assert [n.op for n in new.nodes] == ["MaxPool", "Relu"]
    assert new.types[new.nodes[1].outputs[0]].shape == (1, 8, side, side)
    assert compare(src, onnx_io.save_model(new, tmp_path / "moved.onnx"), g).ok


def _batchnormed_reducers(tmp: Path) -> Path:
    """Inception-v3's reducers: sibling 1x1 convs without a bias, each followed by BatchNormalization and Relu."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []
    for i, c in enumerate((16, 24)):
        inits.append(numpy_helper.from_array((rng.standard_normal((c, 12, 1, 1)) / 4).astype(np.float32), f"w{i}"))
        params = [rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(c), rng.uniform(0.2, 2, c)]
        inits += [numpy_helper.from_array(p.astype(np.float32), f"{k}{i}") for k, p in zip("stmv", params)]
        nodes += [
            helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], kernel_shape=[1, 1]),
            helper.make_node(
                "BatchNormalization", [f"c{i}", f"s{i}", f"t{i}", f"m{i}", f"v{i}"], [f"n{i}"], epsilon=1e-3
            ),
            helper.make_node("Relu", [f"n{i}"], [f"r{i}"]),
        ]
    nodes.append(helper.make_node("Concat", ["r0", "r1"], ["y"], axis=1))
    return _reducers_model(tmp / "bn_reducers.onnx", nodes, inits, 40)


def test_batchnorms_fold_into_their_convs_before_the_search_and_open_the_sibling_merge(tmp_path: Path) -> None:
    """The shipped store's `always` rules (specs/rules/batchnorm.rules) fold every BatchNorm into its Conv,
    the result computes the same, and the biased siblings it leaves match the merge no BatchNorm let through."""
    src = _batchnormed_reducers(tmp_path)
    g = onnx_io.load_model(src)
    proved = list(store.load_rules(store.open_store(store.DEFAULT_PATH), status="proved"))
    always = [r for r in proved if r.always]
    merge = [r for r in both_directions(proved) if r.name == "Concat,Concat,Conv,Split => Conv,Conv~reverse"]
    folded, applied = apply_everywhere(g, always)
    assert _by_name(applied, always) == {"fold BatchNormalization into Conv": 2}
    assert [n.op for n in folded.nodes].count("BatchNormalization") == 0
    assert all(len(n.inputs) == 3 for n in folded.nodes if n.op == "Conv")
    biased = [m for r in merge for m in find_matches(folded, r) if all(len(n.inputs) == 3 for n in m.nodes.values())]
    assert biased  # the folded convs, each with its new bias, merge
    out = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    assert compare(src, out, g, rtol=1e-4, atol=1e-5).ok


def test_a_rule_with_free_attributes_binds_them_alike_wherever_its_example_is_alike() -> None:
    """Two sibling convs whose example pads are equal match only model siblings with equal pads, and the
    target takes the model's pads."""
    conv = "dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]"
    head = "graph(%x: float32[1,2,5,5], %a: float32[3,2,3,3] weight, %b: float32[3,2,3,3] weight):"
    src = f"""{head}
  %p = Conv(%x, %a) {{{conv}}} : float32[1,3,5,5]
  %q = Conv(%x, %b) {{{conv}}} : float32[1,3,5,5]
  %r = Add(%p, %q) : float32[1,3,5,5]
  return %r"""
    dst = f"""{head}
  %s = Add(%a, %b) : float32[3,2,3,3]
  %r = Conv(%x, %s) {{{conv}}} : float32[1,3,5,5]
  return %r"""
    rule = Rule(parse_graph(src), parse_graph(dst), "conv-add", ("free: pads",), "proved")
    # paddings that keep 5x5 outputs, so both models are well-typed
    for pads, other, matches in (((0, 1, 2, 1), (0, 1, 2, 1), True), ((1, 1, 1, 1), (2, 0, 0, 2), False)):
        model = parse_graph(
            src.replace("pads=[1, 1, 1, 1]", f"pads={list(pads)}", 1).replace(
                "pads=[1, 1, 1, 1]", f"pads={list(other)}", 1
            )
        )
        found = list(find_matches(model, rule))
        assert bool(found) == matches
        if matches:
            new = apply(model, found[0])
            assert next(n for n in new.nodes if n.op == "Conv").attr["pads"] == pads


def _shipped_always_rules() -> list[Rule]:
    return [r for r in store.load_rules(store.open_store(store.DEFAULT_PATH), status="proved") if r.always]


def _by_name(applied: Mapping[str, int], rules: Sequence[Rule]) -> dict[str, int]:
    """Counts by rule id (as the search keeps them) -> by the rules' names."""
    return {next(r.name for r in rules if r.id == k): n for k, n in applied.items()}


@pytest.mark.parametrize("after", ["Concat", "Conv"])
def test_a_per_channel_mul_and_add_after_a_batchnorm_fold_into_it_before_the_search(tmp_path: Path, after: str) -> None:
    """Caffe2's BatchNormalization, then Mul and Add by Unsqueezed per-channel weights, then Relu and Conv: after a
    Concat (DenseNet's pre-activation) the shipped always rules leave one BatchNormalization (onnxruntime would
    run three kernels); after a Conv (Inception-v2) the Mul and Add go into the BN first and the BN into the Conv,
    leaving Conv, Relu (folded the other way round the Mul and Add would sit between them). The model computes
    the same."""
    rng = np.random.default_rng(5)
    c = 12
    vectors = {k: rng.standard_normal(c) for k in ("s", "t", "m", "k", "a")} | {"v": rng.uniform(0.2, 2, c)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in vectors.items()]
    inits += [numpy_helper.from_array(np.array([1, 2], np.int64), "axes")]
    inits += [numpy_helper.from_array((rng.standard_normal((8, c, 1, 1)) / 4).astype(np.float32), "w")]
    inits += [numpy_helper.from_array((rng.standard_normal((c, 6, 1, 1)) / 4).astype(np.float32), "k0")]
    first = (
        helper.make_node("Concat", ["x0", "x1"], ["cat"], axis=1)
        if after == "Concat"
        else helper.make_node("Conv", ["x0", "k0"], ["cat"], kernel_shape=[1, 1])
    )
    nodes = [
        first,
        helper.make_node("BatchNormalization", ["cat", "s", "t", "m", "v"], ["bn"], epsilon=1e-5),
        helper.make_node("Unsqueeze", ["k", "axes"], ["k3"]),
        helper.make_node("Mul", ["bn", "k3"], ["scaled"]),
        helper.make_node("Unsqueeze", ["a", "axes"], ["a3"]),
        helper.make_node("Add", ["a3", "scaled"], ["shifted"]),
        helper.make_node("Relu", ["shifted"], ["r"]),
        helper.make_node("Conv", ["r", "w"], ["y"], kernel_shape=[1, 1]),
    ]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 6, 5, 5]) for i in range(2)]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 5, 5])]
    src = write_graph(helper.make_graph(nodes, "preact", inputs, out, initializer=inits), tmp_path / "preact.onnx")
    g = onnx_io.load_model(src)
    ran, _ = precompute(g)  # as optimize does first: the Unsqueezes of weights become weights
    always = _shipped_always_rules()
    folded, applied = apply_everywhere(ran, always)
    applied = _by_name(applied, always)
    into_bn = {
        "fold a per-channel Mul into the BatchNormalization before it": 1,
        "fold a per-channel Add into the BatchNormalization before it": 1,
    }
    if after == "Concat":
        assert applied == into_bn
        assert [n.op for n in folded.nodes] == ["Concat", "BatchNormalization", "Relu", "Conv"]
    else:
        assert applied == {**into_bn, "fold BatchNormalization into Conv": 1}
        assert [n.op for n in folded.nodes] == ["Conv", "Relu", "Conv"]
    written = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    assert compare(src, written, g, rtol=1e-4, atol=1e-5).ok


def test_a_grouped_conv_made_plain_takes_the_models_group_and_writes_the_literal_group_1(tmp_path: Path) -> None:
    """The rule's example group is 2 and its target's Conv writes group=1: on a group-4 conv the kernel is made
    block-diagonal over 4 groups, the conv is plain, and onnxruntime computes the same."""
    rules = parse_rules((ROOT / "specs" / "rules" / "groups.rules").read_text())
    rng = np.random.default_rng(6)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=4)
    graph = helper.make_graph(
        [conv],
        "grouped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        initializer=[w],
    )
    src = write_graph(graph, tmp_path / "grouped.onnx")
    g = onnx_io.load_model(src)
    (match,) = [m for r in rules for m in find_matches(g, r)]
    plain = apply(g, match)
    (new,) = [n for n in plain.nodes if n.op == "Conv"]
    assert new.attr["group"] == 1 and new.attr["strides"] == (2, 2) and new.attr["pads"] == (1, 1, 1, 1)
    assert plain.types[new.inputs[1]].shape == (8, 12, 3, 3)
    written = onnx_io.save_model(plain, tmp_path / "plain.onnx")
    assert compare(src, written, g, rtol=1e-4, atol=1e-5).ok


def test_sigmoid_is_generated_proved_matched_and_costed_from_its_entry_and_its_spec(tmp_path: Path) -> None:
    """An op added by its catalogue entry and one spec file (specs/sigmoid.py) goes through every stage: the
    generator enumerates it, the verifier proves every true rule over it (none left unknown for want of a
    spec), and optimize matches those rules in a model and costs the result (analytic costs: the same verdict
    on any machine)."""
    db = tmp_path / "sigmoid.db"
    made = subst("generate", "--ops", "sigmoid,transpose,concat1", "--max-ops", "2", "--store", db, "--json")
    assert made.returncode == 0, made.stderr
    verified = json.loads(subst("verify", "--store", db, "--json").stdout)
    assert verified["unknown"] == verified["refuted"] == 0 and verified["proved"] > 0, verified
    sigmoid_rules = [r for r in store.load_rules(store.open_store(db), status="proved") if "Sigmoid" in r.ops]
    assert sigmoid_rules and all(r.detail["axioms"] or r.detail.get("note") for r in sigmoid_rules)
    shape = [256, 128]
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
            helper.make_node("Sigmoid", ["a"], ["b"]),
            helper.make_node("Transpose", ["b"], ["y"], perm=[1, 0]),
        ],
        "sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    src, out = write_graph(graph, tmp_path / "sigmoid.onnx"), tmp_path / "sigmoid.opt.onnx"
    done = subst("optimize", src, "-o", out, "--store", db, "--device", "estimate", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert any("Sigmoid" in v["name"] for v in report["rules_applied"].values()) and report["check"]["ok"]
    assert report["cost"]["after_ms"] < report["cost"]["before_ms"]
    assert [n.op for n in onnx_io.load_model(out).nodes] == ["Sigmoid"]
