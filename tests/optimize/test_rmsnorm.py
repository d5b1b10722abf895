"""RMSNorm as the dynamo exporter writes it (T5, Llama: ``x * Reciprocal(Sqrt(mean(x^2) + eps)) * w``, opset 20,
ReduceMean's axes an input) is rewritten by the shipped rule 'x times the reciprocal of y as x divided by y'
(specs/rules/reciprocal.rules) into the form onnxruntime's SimplifiedLayerNormFusion matches, so onnxruntime runs
the whole norm as one kernel (issue 32: on the H100, T5 dynamo 1.06x -> 1.29x with this form alone)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.cost import profiler, units
from taso.cost.estimate import kernels
from taso.cost.unit import unit_graph
from taso.execute.precompute import precompute
from taso.optimize import Settings, optimize
from taso.rules import store

WIDTH = 64


FORMS = {
    "reciprocal": [  # the dynamo exporter's
        helper.make_node("Reciprocal", ["root"], ["rsqrt"]),
        helper.make_node("Mul", ["x", "rsqrt"], ["normed"]),
    ],
    "inverse": [  # the TorchScript exporter's
        helper.make_node("Div", ["one", "root"], ["rsqrt"]),
        helper.make_node("Mul", ["x", "rsqrt"], ["normed"]),
    ],
    "div": [helper.make_node("Div", ["x", "root"], ["normed"])],  # what the rule writes
}
"""How each writes ``x`` over the root of its mean square."""


def _rmsnorm(dims: list[int | str], dtype: int = TensorProto.FLOAT, form: str = "reciprocal") -> onnx.ModelProto:
    """One RMSNorm and the projection after it, node for node as torch 2.11's dynamo exporter writes T5's (or in
    another of the `FORMS`)."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(0)

    def const(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(value, name)

    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["mean"], keepdims=1, noop_with_empty_axes=0),
        helper.make_node("Add", ["mean", "eps"], ["var"]),
        helper.make_node("Sqrt", ["var"], ["root"]),
        *FORMS[form],
        helper.make_node("Mul", ["scale", "normed"], ["scaled"]),
        helper.make_node("MatMul", ["scaled", "w"], ["y"]),
    ]
    weights = [
        const("one", np.array(1.0, np_dtype)),
        const("two", np.array(2.0, np_dtype)),
        const("axes", np.array([-1], np.int64)),
        const("eps", np.array(1e-6, np_dtype)),
        const("scale", (1 + 0.1 * rng.standard_normal(WIDTH)).astype(np_dtype)),
        const("w", (rng.standard_normal((WIDTH, WIDTH)) / 8).astype(np_dtype)),
    ]
    graph = helper.make_graph(
        nodes,
        "rmsnorm",
        [helper.make_tensor_value_info("x", dtype, [*dims, WIDTH])],
        [helper.make_tensor_value_info("y", dtype, [*dims, WIDTH])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("dims", [[1, 16], ["batch", "seq"]], ids=["static", "dynamic"])
def test_the_dynamo_rmsnorm_is_rewritten_into_the_form_onnxruntime_fuses(dims: list, tmp_path: Path) -> None:
    src, out = tmp_path / "rms.onnx", tmp_path / "rms.opt.onnx"
    onnx.save_model(_rmsnorm(dims), str(src))
    assert "SimplifiedLayerNormalization" not in profiler.optimized_ops(str(src), cuda=False)
    report = optimize(src, out, store.DEFAULT_PATH, settings=Settings(device="estimate"))
    assert report.check is not None and report.check.ok, report.check
    assert "x times the reciprocal of y as x divided by y" in {a["name"] for a in report.rules_applied.values()}
    written = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert "Reciprocal" not in written and "Div" in written
    assert "SimplifiedLayerNormalization" in profiler.optimized_ops(str(out), cuda=False)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_norm_is_one_unit_costed_as_onnxruntime_runs_it(form: str) -> None:
    """In every form the norm and its scale are one unit (`taso.cost.fusion.rms_norms`), whose estimate is the
    kernels onnxruntime runs for it: one where its SimplifiedLayerNormFusion matches, seven for the dynamo form.
    Cut op by op, the rule's rewrite was priced at the one kernel of the Reciprocal it removes."""
    g = precompute(onnx_io.from_proto(_rmsnorm([1, 16], form=form)))[0]
    cut = units(g)
    assert [u.label for u in cut][1:] == ["MatMul"]
    norm = unit_graph(g, cut[0])
    assert len(norm.nodes) == 5 + len(FORMS[form])
    assert kernels(norm) == (7 if form == "reciprocal" else 1)


def test_a_norm_whose_mean_square_is_read_elsewhere_is_cut_op_by_op() -> None:
    """onnxruntime fuses a norm only where nothing else reads its intermediate values; where its mean square is
    also a graph output, the norm is not one unit, and its nodes are costed as they run, one by one."""
    model = _rmsnorm([1, 16], form="div")
    model.graph.output.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, [1, 16, 1]))
    assert "SimplifiedLayerNormalization" not in profiler.optimized_ops(model.SerializeToString(), cuda=False)
    g = precompute(onnx_io.from_proto(model))[0]
    assert all(len(u.nodes) < 5 for u in units(g))
