"""The element-wise ops (taso/ops/elementwise.py) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import ops
from taso.execute.precompute import precompute

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.elementwise), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def test_integer_division_stays_opaque_and_is_folded_as_onnx_truncates_it() -> None:
    """Div is modelled over the reals only: an int64 Div (shape arithmetic: a size halved) stays opaque, so
    precomputing it gives onnxruntime's truncated quotient, never numpy's true one (7 / 2 is 3, not 3.5)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [
        helper.make_node("Constant", [], ["seven"], value=numpy_helper.from_array(np.array([7], np.int64))),
        helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array([2], np.int64))),
        helper.make_node("Div", ["seven", "two"], ["half"]),
        helper.make_node("Constant", [], ["start"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Slice", ["x", "start", "half", "axes"], ["s"]),
        helper.make_node("Pad", ["s", "pads"], ["y"]),
    ]
    pads = numpy_helper.from_array(np.array([0, 0, 0, 1], np.int64), "pads")
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [pads]), opset_imports=[helper.make_opsetid("", 17)]
    )
    g = onnx_io.from_proto(model)
    div = next(n for n in g.nodes if n.op == "Div")
    assert div.is_opaque
    folded = precompute(g)[0]
    assert folded.data[div.outputs[0]].array.tolist() == [3]
    floats = onnx_io.from_proto(
        helper.make_model(
            helper.make_graph(
                [helper.make_node("Div", ["x", "x"], ["q"])],
                "f",
                [x],
                [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 8])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
    )
    assert not floats.nodes[0].is_opaque
