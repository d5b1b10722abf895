"""The selection ops (taso/ops/select.py) against onnxruntime, and their constant inputs read from and written
back to ONNX: Slice's starts, ends, axes and steps as exporters write them, Gather's indices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import ops
from taso.execute import Runner
from taso.ir import Graph

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.select), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def _load(tmp_path: Path, node: onnx.NodeProto, inits: list, out: list[int], opset: int = 17) -> Graph:
    """One float input %x of shape (2, 6, 4) through ``node`` to %y of shape ``out``, imported."""
    graph = helper.make_graph(
        [node],
        "select",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        initializer=inits,
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return onnx_io.load_model(path)


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_slice_as_exporters_write_it_imports_clamped_and_sorted(tmp_path: Path) -> None:
    """INT64_MAX ends, negative axes and starts, no steps: the normal form, so it equals the plain slice."""
    inits = [_ints("s", [-4, 1]), _ints("e", [2**63 - 1, 2**63 - 1]), _ints("a", [-2, 0])]
    g = _load(tmp_path, helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]), inits, [1, 4, 4])
    node = g.nodes[0]
    assert node.inputs == ("x",)
    assert node.attr == {"axes": (0, 1), "starts": (1, 2), "ends": (2, 6), "steps": (1, 1)}
    out = onnx_io.save_model(g, tmp_path / "back.onnx")
    x = np.random.default_rng(0).standard_normal((2, 6, 4)).astype(np.float32)
    np.testing.assert_array_equal(Runner(out)({"x": x})["y"], x[1:, 2:])


def test_gather_counts_a_negative_index_from_the_end_and_leaves_computed_or_2d_indices_opaque(tmp_path: Path) -> None:
    g = _load(tmp_path, helper.make_node("Gather", ["x", "i"], ["y"], axis=1), [_ints("i", [-1])], [2, 1, 4])
    assert g.nodes[0].attr == {"axis": 1, "indices": (5,)}
    scalar = numpy_helper.from_array(np.array(-6, np.int64), "i")
    g = _load(tmp_path, helper.make_node("Gather", ["x", "i"], ["y"], axis=1), [scalar], [2, 4])
    assert g.nodes[0].attr == {"axis": 1, "indices": 0}
    square = numpy_helper.from_array(np.array([[0, 1]], np.int64), "i")
    g = _load(tmp_path, helper.make_node("Gather", ["x", "i"], ["y"], axis=1), [square], [2, 1, 2, 4])
    assert g.nodes[0].is_opaque  # an attribute is flat: a (1, 2) index would become a (2,) one
    computed = [helper.make_node("Shape", ["x"], ["n"]), helper.make_node("Slice", ["x", "z", "n"], ["y"])]
    graph = helper.make_graph(
        computed,
        "opaque",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 4])],
        initializer=[_ints("z", [0, 0, 0])],
    )
    path = tmp_path / "c.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert onnx_io.load_model(path).nodes[1].is_opaque
