"""Mutants in a model graph: the sites, the search's candidates, `subst optimize --pet` and its report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, subst, write_graph
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import pet
from taso.optimize import Report
from taso.search import search

from .samples import SAMPLES, assert_equal_on_random_inputs, conv_graph, graph


def test_merges_take_only_siblings_that_agree() -> None:
    """Convs reading one input but with different strides are not one site; those that agree still are."""
    layers = [
        ("Conv", {"w": (2, 3, 3, 3)}, {"pads": (1, 1, 1, 1)}),
        ("Conv", {"w": (2, 3, 1, 1)}, {}),
        ("Conv", {"w": (2, 3, 3, 3)}, {"strides": (2, 2)}),
    ]
    g = graph((1, 3, 8, 8), layers)
    assert [[n.name for n in site] for site in pet.sites(g, pet.MUTATORS["merge-convs"])] == [["conv0", "conv1"]]


def test_search_takes_mutants_as_candidates_and_keeps_the_cheapest() -> None:
    """With a cost that prefers more nodes, the search picks a mutant; the result stays exact."""
    g = conv_graph((4, 3, 8, 8), (4, 3, 3, 3), True, pads=(1, 1, 1, 1))
    result = search(g, [], lambda h: -float(len(h.nodes)), budget=5, mutate=pet.mutations)
    assert result.candidates >= 2
    assert [k for k in result.applied if k.startswith(pet.PREFIX)]
    assert_equal_on_random_inputs(g, result.graph, seed=1)


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_search_merges_siblings_when_fewer_kernels_cost_less(op: str) -> None:
    """With a cost of one per compute kernel, the search's pick among the mutants is the merge."""
    g = SAMPLES["merge-convs" if op == "Conv" else "merge-matmuls"]
    result = search(g, [], lambda h: float(sum(n.op == op for n in h.nodes)), budget=5, mutate=pet.mutations)
    assert [k for k in result.applied if k.startswith(f"{pet.PREFIX}merge-")]
    assert_equal_on_random_inputs(g, result.graph, seed=2)


def _pet_model(path: Path) -> Path:
    """A batch-16 model with a conv, Inception's 1x3 and 3x1 siblings, and a BERT-like projection."""
    rng = np.random.default_rng(0)
    weights = {
        "w": (8, 8, 3, 3),
        "wa": (8, 8, 1, 3),
        "wb": (8, 8, 3, 1),
        "wq": (14, 14),
        "wk": (14, 14),
    }
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n) for n, s in weights.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "wa"], ["a"], pads=[0, 1, 0, 1]),
        helper.make_node("Conv", ["r", "wb"], ["b"], pads=[1, 0, 1, 0]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["t"]),
        helper.make_node("MatMul", ["t", "wq"], ["q"]),
        helper.make_node("MatMul", ["t", "wk"], ["k"]),
        helper.make_node("Add", ["q", "k"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.array([16, 8 * 14, 14], np.int64), "shape")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8, 14, 14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 8 * 14, 14])
    return write_graph(helper.make_graph(nodes, "g", [x], [y], [*inits, shape]), path)


WORK_BOUND = ("--budget", "20", "--time-limit", "100000")
"""A search bounded by work alone: the time limit, a safety net, out of reach."""


def test_optimize_pet_flag_adds_candidates_and_keeps_the_model_exact(tmp_path: Path) -> None:
    """`subst optimize --pet` on a batch-16 model where every kind but the dilated and strided ones applies: more
    candidates than without (the new kinds among them), and the onnxruntime check passes. The search is bounded
    by its budget, the time limit set out of reach: under load, a 10 s limit once expanded nothing."""
    rules = tmp_path / "rules.db"
    shutil.copy(ROOT / "substitutions.db", rules)  # a copy: the costs this run estimates are cached in it
    src = _pet_model(tmp_path / "pet.onnx")
    model = onnx_io.load_model(src)
    kinds = {name.split(" ")[1] for name, _ in pet.mutations(model)}
    assert kinds == set(pet.MUTATORS) - {"dilation-to-batch", "stride-to-channels"}
    reports = {}
    for flag in ("--no-pet", "--pet"):
        out = tmp_path / f"out{flag}.onnx"
        r = subst("optimize", src, "-o", out, "--device", "estimate", "--store", rules, flag, *WORK_BOUND, "--json")
        assert r.returncode == 0, r.stderr
        reports[flag] = json.loads(r.stdout)
        assert reports[flag]["check"]["ok"] and not reports[flag]["search"]["time_limit_reached"]
    assert reports["--pet"]["search"]["candidates"] > reports["--no-pet"]["search"]["candidates"]


def test_the_report_names_each_mutated_node_and_its_correction() -> None:
    """`subst optimize --pet` says which parts were mutated and how much of each output the correction
    recomputes: the search's history names, as the report prints them."""
    g = conv_graph((3, 4, 8, 8), (5, 4, 3, 3), True, pads=(1, 1, 1, 1))
    fix = pet.plan("batch-to-height", g.nodes, g.types)
    assert fix is not None and 0 < fix.fraction <= pet.MAX_FRACTION
    (name,) = [n for n, _ in pet.mutations(g) if n.startswith(f"{pet.PREFIX}batch-to-height ")]
    label = g.nodes[0].name
    assert name == f"{pet.PREFIX}batch-to-height {label} (corrects {fix.fraction:.1%})"
    report = Report(
        "in.onnx",
        "out.onnx",
        1,
        9,
        0,
        0,
        {
            name: {"name": name, "count": 1},
            "1c0d127e73": {"name": "Concat(Relu(x0), Relu(x1)) => Relu(Concat(x0, x1))", "count": 2},
        },
    )
    (line,) = [s for s in report.lines() if s.startswith("pet")]
    assert line.endswith(f"1 mutated: batch-to-height {label} (corrects {fix.fraction:.1%})")
    assert not any(pet.PREFIX in s for s in report.lines() if s.startswith("rules"))
