"""Issue 47: rules over Slice and Gather by generation (specs/pools/select.toml). The generator finds, and z3
proves at every size, that a slice of a concat at its seam is the part and that the columns of a product are the
product by the weight's columns; applied to a model, that rewrite runs in onnxruntime with the original's
outputs."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
from conftest import ROOT
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.execute import Runner
from taso.generate import generate, load_config, settings_from
from taso.rules import SPECS_DIR, Rule, find_matches
from taso.search.rewrite import apply
from taso.verify import Prover, load_specs

POOL = ROOT / "specs" / "pools" / "select.toml"


def _ops(g) -> Counter:
    return Counter(n.op for n in g.nodes)


@cache
def _generated() -> tuple[Rule, ...]:
    """The pool's rules of up to two ops (a second or so; the pool's own three-op run is `make store`'s)."""
    return tuple(r for _, r in generate(replace(settings_from(load_config(POOL)), max_ops=2), workers=1).rules)


def _find(src: dict, dst: dict) -> list[Rule]:
    return [r for r in _generated() if _ops(r.src) == Counter(src) and _ops(r.dst) == Counter(dst)]


def test_generation_finds_and_proves_the_slice_rules() -> None:
    prover = Prover(load_specs(SPECS_DIR))
    seams = _find({"Concat": 1, "Slice": 1}, {})
    columns = _find({"MatMul": 1, "Slice": 1}, {"MatMul": 1, "Slice": 1})
    rows = _find({"Gather": 2}, {})
    assert seams and columns and rows
    for r in (*seams, *columns, *rows):
        v = prover.verdict(r)
        assert v.status == "proved", (str(r), v.detail)
        assert v.detail["sizes"] == "symbolic"


def test_the_column_rule_rewrites_a_model_and_onnxruntime_agrees(tmp_path: Path) -> None:
    """x @ w then its first two columns becomes x @ (w's first two columns), at the model's own sizes: a\n    product of a third of the size."""
    (rule,) = [
        r
        for r in _find({"MatMul": 1, "Slice": 1}, {"MatMul": 1, "Slice": 1})
        if r.src.inputs == ("x0",)
        and [n.op for n in r.src.nodes] == ["MatMul", "Slice"]
        and r.src.nodes[1].attr["starts"] == (0,)
    ]
    forward = Rule(rule.src, rule.dst, status="proved", detail=Prover(load_specs(SPECS_DIR)).verdict(rule).detail)
    w = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    ints = {k: numpy_helper.from_array(np.array(v, np.int64), k) for k, v in {"s": [0], "e": [2], "a": [1]}.items()}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Slice", ["m", "s", "e", "a"], ["y"])],
        "columns",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        initializer=[numpy_helper.from_array(w, "w"), *ints.values()],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    g = onnx_io.load_model(path)
    (match,) = find_matches(g, forward)
    out = apply(g, match)
    (mm,) = out.nodes  # the weight's slice is folded into a new weight of the two columns
    assert mm.op == "MatMul" and out.types[mm.inputs[1]].shape == (5, 2)
    onnx_io.save_model(out, tmp_path / "out.onnx")
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(Runner(tmp_path / "out.onnx")({"x": x})["y"], (x @ w)[:, :2], rtol=1e-5, atol=1e-5)
