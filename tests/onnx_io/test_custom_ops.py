"""Ops onnx does not know pass through every stage (issue 46): a contrib op onnxruntime runs, one whose output type
onnx cannot infer, an op of a domain nobody knows (with --no-check), and an op onnxruntime registers in the default
domain; each once crashed `subst optimize` with a KeyError, or was refused as invalid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import subst
from onnx import TensorProto, helper, numpy_helper

from taso import cost
from taso import onnx as onnx_io
from taso.cost import profiler
from taso.errors import BadInput

RNG = np.random.default_rng(0)
COSTS = Path(cost.__file__).parent / "reference_costs.json"
"""The shipped cost table: the CLI runs measure nothing (measuring is tested in-process, on a model of its own)."""


def _measured(path: Path) -> cost.GraphCost:
    """``path``'s cost, every unit that can be measured measured on the CPU (the user's crash was there)."""
    model = cost.CostModel(profiler.pick_device("cpu"), None, calibration=cost.DEFAULT_CALIBRATION, dims={"batch": 2})
    return model.graph_cost(onnx_io.load_model(path))


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _between_matmuls(path: Path, node: onnx.NodeProto, domain: str = "com.microsoft") -> Path:
    """``node`` (reading ``a``, writing ``b``) between two MatMuls over a [batch, 16] input."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["a"]), node, helper.make_node("MatMul", ["b", "w2"], ["y"])],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [_weight("w1", 16, 32), _weight("w2", 32, 8), numpy_helper.from_array(np.ones(32, np.float32), "scale")],
    )
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    onnx.save_model(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def _gelu(path: Path) -> Path:
    return _between_matmuls(path, helper.make_node("Gelu", ["a"], ["b"], domain="com.microsoft"))


def test_a_contrib_op_s_output_takes_onnxruntime_s_type(tmp_path: Path) -> None:
    """onnx infers nothing after com.microsoft's Gelu: its output, and so the MatMul reading it, had no type."""
    g = onnx_io.load_model(_gelu(tmp_path / "gelu.onnx"))
    assert str(g.types["b"]) == "float32[batch,32]" and str(g.types["y"]) == "float32[batch,8]"
    assert [n.is_opaque for n in g.nodes] == [False, True, False]  # the second MatMul is the catalogue's again


def test_a_contrib_op_model_is_costed_measured_optimized_and_checked(tmp_path: Path, empty_store: Path) -> None:
    """The user's case: a KeyError in the cost model (shape_follows_values) on the Gelu's output, exit 1."""
    src, out = _gelu(tmp_path / "gelu.onnx"), tmp_path / "out.onnx"
    assert not any(u.estimated for u in _measured(src).units)
    r = subst("optimize", src, "-o", out, "--store", empty_store, "--costs", COSTS, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["check"]["ok"]
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["MatMul", "Gelu", "MatMul"]


def test_an_unknown_domain_s_op_passes_through_with_no_check(tmp_path: Path, empty_store: Path) -> None:
    """Neither onnx nor onnxruntime types my.custom's Foo: its output stays untyped, and each stage copes (the
    cost model estimates a unit that reads it: no draw can time it)."""
    src = _between_matmuls(
        tmp_path / "foo.onnx", helper.make_node("Foo", ["a"], ["b"], domain="my.custom"), "my.custom"
    )
    g = onnx_io.load_model(src)
    assert "b" not in g.types and "y" in g.types  # the graph output's declared type stands
    costed = _measured(src)
    assert [u.estimated for u in costed.units] == [False, True, True]
    out = tmp_path / "out.onnx"
    r = subst("optimize", src, "-o", out, "--store", empty_store, "--costs", COSTS, "--no-check")
    assert r.returncode == 0, r.stderr
    assert [(n.domain, n.op_type) for n in onnx.load(str(out)).graph.node] == [
        ("", "MatMul"),
        ("my.custom", "Foo"),
        ("", "MatMul"),
    ]


def test_an_op_onnxruntime_registers_in_the_default_domain_is_not_refused(tmp_path: Path, empty_store: Path) -> None:
    """The transformers optimizer's SimplifiedLayerNormalization: onnx's checker has no schema for it ('No Op
    registered ... domain_version of 18'), onnxruntime runs it. An op neither knows is still refused."""
    node = helper.make_node("SimplifiedLayerNormalization", ["a", "scale"], ["b"], axis=-1, epsilon=1e-5)
    src = _between_matmuls(tmp_path / "sln.onnx", node, domain="")
    r = subst("optimize", src, "-o", tmp_path / "out.onnx", "--store", empty_store, "--costs", COSTS, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["check"]["ok"]
    node.op_type = "SimplifiedLayerNormalizationTypo"
    bad = _between_matmuls(tmp_path / "bad.onnx", node, domain="")
    with pytest.raises(BadInput, match="invalid ONNX model: No Op registered for SimplifiedLayerNormalizationTypo"):
        onnx_io.load_model(bad)


def test_dims_onnxruntime_cannot_infer_are_sized_at_the_costing_dims(tmp_path: Path) -> None:
    """onnxruntime's inference does not fold a Range over a Shape, so the contrib op after it has an unknown dim
    (BERT's after the optimizer's SkipLayerNormalization): named, and sized by onnxruntime at the costing dims, it is
    costed at its size, where unnamed, every unit after it was estimated."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Gelu", ["c"], ["g"], domain="com.microsoft"),
        helper.make_node("Add", ["g", "g"], ["y"]),
    ]
    ints = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("zero", 0), ("one", 1))]
    graph = helper.make_graph(
        nodes,
        "range",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        ints,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    onnx.save_model(model, str(tmp_path / "range.onnx"))
    g = onnx_io.load_model(tmp_path / "range.onnx")
    sizes = onnx_io.dim_sizes(g, {"seq": 7})
    assert g.types["g"].with_dims(sizes).shape == (7,) and g.types["y"].with_dims(sizes).shape == (7,)
