"""The reductions (taso/ops/reductions.py) against onnxruntime, and their axes read from and written back to
either ONNX form (an attribute before ReduceSum-13 and ReduceMean-18, a constant input from then on)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import write_graph
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import ops
from taso.execute import Runner
from taso.ir import TensorType
from taso.ops import field as ff

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.reductions), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def _model(
    nodes: list, out: list[int], rank: int = 3, opset: int = 18, inits: tuple = (), path: Path | None = None
) -> Path:
    """One float input %x of shape (2, 3, 4)[:rank] through ``nodes`` to %y of shape ``out``, at ``opset``."""
    shape = [2, 3, 4][:rank]
    graph = helper.make_graph(
        nodes,
        "reduce",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        initializer=list(inits),
    )
    assert path is not None
    return write_graph(graph, path, opset)


def _axes(values: list[int], name: str = "axes") -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_axes_read_from_the_input_and_the_attribute_alike(tmp_path: Path) -> None:
    """ReduceMean-18's axes input (an initializer, a Constant) and ReduceMean-17's attribute give one IR node,
    its axes sorted and non-negative; export writes the input back where the opset wants it."""
    as_init = _model(
        [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
        [3],
        inits=[_axes([-1, 0])],
        path=tmp_path / "a.onnx",
    )
    as_const = _model(
        [
            helper.make_node("Constant", [], ["axes"], value=_axes([2, 0], "v")),
            helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0),
        ],
        [3],
        path=tmp_path / "c.onnx",
    )
    as_attr = _model(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[0, 2], keepdims=0)], [3], opset=17, path=tmp_path / "b.onnx"
    )
    nodes = [next(n for n in onnx_io.load_model(p).nodes if n.op == "ReduceMean") for p in (as_init, as_const, as_attr)]
    for n in nodes:
        assert not n.is_opaque and n.inputs == ("x",) and n.attr == {"axes": (0, 2), "keepdims": 0}
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    for p in (as_init, as_attr):
        out = onnx_io.save_model(onnx_io.load_model(p), tmp_path / f"out-{p.name}")
        written = onnx.load(str(out))
        reduce = next(n for n in written.graph.node if n.op_type == "ReduceMean")
        assert len(reduce.input) == (2 if p is as_init else 1)
        np.testing.assert_allclose(Runner(out)({"x": x})["y"], x.mean(axis=(0, 2)), rtol=1e-5)


def test_reduce_sum_without_axes_sums_everything(tmp_path: Path) -> None:
    path = _model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], [], opset=13, path=tmp_path / "m.onnx")
    (node,) = onnx_io.load_model(path).nodes
    assert not node.is_opaque and node.attr == {"axes": (0, 1, 2), "keepdims": 0}


@pytest.mark.parametrize(
    ("nodes", "reason"),
    [
        ([helper.make_node("ReduceSum", ["x", "x_axes"], ["y"])], "not a constant"),
        ([helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)], "noop_with_empty_axes"),
        ([helper.make_node("ReduceSum", ["x", "axes"], ["y"])], "axis twice"),
    ],
    ids=["computed axes", "identity", "axis twice"],
)
def test_reductions_import_cannot_describe_stay_opaque(nodes: list, reason: str, tmp_path: Path) -> None:
    """Axes computed in the graph, an empty reduction that is an identity, and an axis named twice (as 1 and
    -2) are left to onnxruntime: the IR's attribute cannot say them."""
    computed = helper.make_node("Constant", [], ["x_axes"], value=_axes([1]))
    nodes = [computed, helper.make_node("Identity", ["x_axes"], ["x_axes2"]), *nodes]
    nodes[-1].input[1:] = ["x_axes2"] if "x_axes" in nodes[-1].input else nodes[-1].input[1:]
    path = _model(nodes, [2, 1], rank=2, inits=[_axes([1, -1])], path=tmp_path / "m.onnx")
    reasons = [o.reason for o in onnx_io.opaque_reasons(path) if o.op == "ReduceSum"]
    assert len(reasons) == 1 and reason in reasons[0], reasons


def test_softmax_axis_is_made_non_negative(tmp_path: Path) -> None:
    """Exporters write -1; generated rules the axis's number: import makes them one."""
    path = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [2, 3, 4], path=tmp_path / "m.onnx")
    (node,) = onnx_io.load_model(path).nodes
    assert node.attr == {"axis": 2}


def test_shape_rule_refuses_axes_import_would_not_write() -> None:
    """A generated node must hold its axes as import does: sorted, distinct, in range."""
    x = TensorType("float32", (2, 3))
    for axes in ((1, 0), (0, 0), (2,), ()):
        with pytest.raises(ops.OpError, match="distinct sorted axes"):
            ops.infer("ReduceSum", [x], {"axes": axes, "keepdims": 1})
    with pytest.raises(ops.OpError, match="keepdims"):
        ops.infer("ReduceMean", [x], {"axes": (0,), "keepdims": 2})


def test_a_mean_over_the_field_is_the_sum_times_the_inverse_count() -> None:
    x = np.random.default_rng(1).integers(0, ops.P, (2, 3, 4))
    attrs = {"axes": (1, 2), "keepdims": 1}
    z = ff.Ring(0)
    total = ops.get("ReduceSum").field([x], attrs, 1, z)[0]  # type: ignore[misc]
    mean = ops.get("ReduceMean").field([x], attrs, 1, z)[0]  # type: ignore[misc]
    assert np.array_equal(mean * 12 % ops.P, total) and np.array_equal(total, x.sum(axis=(1, 2), keepdims=True) % ops.P)
    gap = ops.get("GlobalAveragePool").field([x.reshape(1, 2, 3, 4)], {}, 1, z)[0]  # type: ignore[misc]
    assert np.array_equal(
        gap.reshape(1, 2), ops.get("ReduceMean").field([x.reshape(1, 2, 12)], {"axes": (2,), "keepdims": 0}, 1, z)[0]
    )  # type: ignore[misc]
