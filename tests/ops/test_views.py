"""Unsqueeze, Squeeze, Expand and Shape (taso/ops/views.py) against onnxruntime, and the ONNX forms import reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from taso import onnx as onnx_io
from taso import ops
from taso.execute import Runner
from taso.ir import TensorType

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.views), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def _model(node: onnx.NodeProto, x: tuple, y: tuple, opset: int, inits: tuple = ()) -> onnx.ModelProto:
    elem = onnx.TensorProto.INT64 if node.op_type == "Shape" else onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", elem, list(y))],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node_op(model: onnx.ModelProto) -> str:
    return model.graph.node[-1].op_type


def _imported(model: onnx.ModelProto, tmp_path: Path):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    g = onnx_io.load_model(path)
    return g, next(n for n in g.nodes if n.op == node_op(model))


def test_axes_read_the_same_from_an_attribute_or_a_constant_input(tmp_path: Path) -> None:
    """Opset 11 writes Unsqueeze's axes as an attribute (import upgrades it), 13 as an input: one IR node,
    axes normalised; export at 13 writes them back as an input onnxruntime runs."""
    old = _model(helper.make_node("Unsqueeze", ["x"], ["y"], axes=[-1, 0]), (3, 4), (1, 3, 4, 1), 11)
    axes = onnx.numpy_helper.from_array(np.array([-1, 0], np.int64), "axes")
    new = _model(helper.make_node("Unsqueeze", ["x", "axes"], ["y"]), (3, 4), (1, 3, 4, 1), 13, (axes,))
    nodes = [_imported(m, tmp_path)[1] for m in (old, new)]
    assert all(not n.is_opaque and n.inputs == ("x",) and n.attr["axes"] == (0, 3) for n in nodes)
    g = _imported(new, tmp_path)[0]
    out = onnx_io.save_model(g, tmp_path / "back.onnx")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(Runner(out)({"x": x})["y"], x.reshape(1, 3, 4, 1))


def test_squeeze_without_axes_drops_every_static_one(tmp_path: Path) -> None:
    g, n = _imported(_model(helper.make_node("Squeeze", ["x"], ["y"]), (1, 3, 1), (3,), 13), tmp_path)
    assert not n.is_opaque and n.attr["axes"] == (0, 2) and g.types["y"].shape == (3,)


def test_squeeze_without_axes_over_a_dynamic_dim_stays_opaque(tmp_path: Path) -> None:
    """Which axes it drops is decided at run time: the node stays as written."""
    _, n = _imported(_model(helper.make_node("Squeeze", ["x"], ["y"]), ("batch", 3, 1), ("b", 3), 13), tmp_path)
    assert n.is_opaque


def test_expand_to_a_computed_shape_stays_opaque(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Shape", ["s"], ["shape"]), helper.make_node("Expand", ["x", "shape"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 1]),
            helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, ["n", 3, 4]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 3, 4])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    g = onnx_io.load_model(path)
    shape, expand = g.nodes
    assert not shape.is_opaque and expand.is_opaque


def test_shape_bounds_clamp_as_onnx_reads_them(tmp_path: Path) -> None:
    node = helper.make_node("Shape", ["x"], ["y"], start=-2, end=10)
    g, n = _imported(_model(node, (2, 3, 4), (2,), 15), tmp_path)
    assert (n.attr["start"], n.attr["end"]) == (1, 3)
    assert ops.get("Shape").run([np.zeros((2, 3, 4))], n.attr)[0].tolist() == [3, 4]


def test_squeeze_refuses_an_axis_not_of_size_one() -> None:
    with pytest.raises(ops.OpError, match="not 1"):
        ops.infer("Squeeze", [TensorType("float32", (2, 3))], {"axes": (0,)})


def test_expand_refuses_a_shape_that_is_not_a_broadcast() -> None:
    with pytest.raises(ops.OpError, match="broadcast"):
        ops.infer("Expand", [TensorType("float32", (2, 3)), TensorType("int64", (2,))], {}, [None, np.array([4, 3])])


def test_a_whole_shape_is_written_without_bounds_which_opset_13_lacks(tmp_path: Path) -> None:
    g, n = _imported(_model(helper.make_node("Shape", ["x"], ["y"]), (2, 3, 4), (3,), 13), tmp_path)
    assert (n.attr["start"], n.attr["end"]) == (0, 3)
    again = onnx_io.load_model(onnx_io.save_model(g, tmp_path / "back.onnx"))  # onnx's checker at opset 13
    assert next(m for m in again.nodes if m.op == "Shape").attr == n.attr
