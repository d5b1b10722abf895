"""Kernels an estimate charges: a unit's nodes as onnxruntime's fusions leave them (`taso.cost.estimate.kernels`),
so that a rewrite which removes a node onnxruntime fuses for free is no gain, and the search keeps the GELU that
onnxruntime runs as one kernel (issue 32: TorchScript's GELU, its ``* 0.5`` moved into the next MatMul)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.cost import profiler, units
from taso.cost.calibration import DEFAULT_CALIBRATION
from taso.cost.estimate import kernels
from taso.cost.measure import read_on
from taso.cost.unit import unit_graph
from taso.execute.precompute import precompute
from taso.ir import parse_graph
from taso.optimize import Settings, optimize
from taso.rules import store

from .graphs import GELU, with_weights

CONV_RELU = """graph(%x: float32[1,16,14,14], %w: float32[32,16,3,3] weight, %b: float32[32] weight):
  %c = Conv(%x, %w, %b) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,32,14,14]
  %r = Relu(%c) : float32[1,32,14,14]
  return %r"""

SEQ, WIDTH, HIDDEN = 16, 64, 256
FUSED_GELU = {"Gelu", "BiasGelu", "FastGelu"}
"""onnxruntime's GELU kernels: what its GeluFusion and BiasGeluFusion make of the erf chain."""


def _mlp(dtype: int = TensorProto.FLOAT, half_in_weight: bool = False) -> onnx.ModelProto:
    """A transformer's MLP as torch.onnx's TorchScript exporter writes it (opset 17): MatMul, bias Add (the bias
    first), GELU as ``x * (1 + erf(x / sqrt 2)) * 0.5`` over Constant nodes, MatMul, bias Add. With
    ``half_in_weight`` the ``* 0.5`` is moved into the second MatMul's weight, as rule 4a3cff6793 moves it."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np_dtype), name)

    def constant(name: str, value: float) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np_dtype)))

    second = ["g", "w2h"] if half_in_weight else ["g2", "w2"]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m"]),
        helper.make_node("Add", ["b1", "m"], ["h"]),
        constant("sqrt2", 1.4142135381698608),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        constant("one", 1.0),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["h", "a"], ["g"]),
        constant("half", 0.5),
        helper.make_node(
            "Mul", ["w2", "half"] if half_in_weight else ["g", "half"], ["w2h" if half_in_weight else "g2"]
        ),
        helper.make_node("MatMul", second, ["o"]),
        helper.make_node("Add", ["b2", "o"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", dtype, [1, SEQ, WIDTH])],
        [helper.make_tensor_value_info("y", dtype, [1, SEQ, WIDTH])],
        [weight("w1", WIDTH, HIDDEN), weight("b1", HIDDEN), weight("w2", HIDDEN, WIDTH), weight("b2", WIDTH)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _gelu_unit(model: onnx.ModelProto):  # noqa: ANN202 (taso.ir.Graph)
    """The unit that holds the GELU, its Constants precomputed as `optimize` does."""
    g = precompute(onnx_io.from_proto(model))[0]
    return next(unit_graph(g, u) for u in units(g) if "Erf" in u.label)


def test_a_gelu_onnxruntime_fuses_is_charged_its_fused_kernels() -> None:
    """The whole chain runs as a MatMul (or Gemm) and one GELU kernel; without its ``* 0.5`` onnxruntime fuses
    nothing and runs Div, Erf, Add and Mul apart: the estimate charges the longer unit less."""
    whole, moved = _gelu_unit(_mlp()), _gelu_unit(_mlp(half_in_weight=True))
    assert [n.op for n in whole.nodes][-2:] == ["Mul", "Mul"] and [n.op for n in moved.nodes][-1] == "Mul"
    assert kernels(whole) == 2 < len(whole.nodes)
    assert kernels(moved) == 5  # Gemm (MatMul and bias), Div, Erf, Add, Mul
    assert DEFAULT_CALIBRATION.estimate(whole) < DEFAULT_CALIBRATION.estimate(moved)


def test_a_fusion_onnxruntime_makes_only_when_read_on_counts() -> None:
    """The tanh GELU fuses into FastGelu only where its last Mul writes no graph output, as in a model."""
    gelu = parse_graph(GELU)
    assert not {"FastGelu"} & set(profiler.optimized_ops(onnx_io.model_bytes(gelu), cuda=False, layout=False))
    assert kernels(gelu) == 1


def test_layout_reorders_at_a_units_edges_are_not_its_kernels() -> None:
    """At ENABLE_ALL the CPU provider runs a Conv in NCHWc between two reorders, which a model pays at its own
    edges only; the census stops short of the layout transforms."""
    conv = with_weights(CONV_RELU)
    census = profiler.optimized_ops(onnx_io.model_bytes(read_on(conv)), cuda=False)
    assert {"ReorderInput", "ReorderOutput"} <= set(census)
    assert kernels(conv) == 1  # FusedConv


def test_float16_which_the_cpu_runs_through_casts_is_charged_per_node() -> None:
    """The CPU provider runs float16 MatMuls through Casts it inserts and fuses no float16 GELU: its census says
    nothing of a GPU's kernels, so each node is one, as before."""
    half = _gelu_unit(_mlp(TensorProto.FLOAT16))
    census = profiler.optimized_ops(onnx_io.model_bytes(half), cuda=False, layout=False)
    assert census.get("Cast", 0) > 0 and not FUSED_GELU & set(census)
    assert kernels(half) == len(half.nodes)


def test_the_search_keeps_the_gelu_onnxruntime_fuses(tmp_path: Path) -> None:
    """Optimized with the shipped rules and estimated costs (every unit of the TorchScript corpus models is
    estimated under the shipped H100 table), the output still runs its GELU as one onnxruntime kernel: the
    rule that moves the ``* 0.5`` into the next MatMul's weight is true, but here no gain."""
    src, out = tmp_path / "mlp.onnx", tmp_path / "mlp.opt.onnx"
    onnx.save_model(_mlp(), str(src))
    assert FUSED_GELU & set(profiler.optimized_ops(str(src), cuda=False))  # the original's, as onnxruntime runs it
    report = optimize(src, out, store.DEFAULT_PATH, settings=Settings(device="estimate"))
    assert report.check is not None and report.check.ok
    assert FUSED_GELU & set(profiler.optimized_ops(str(out), cuda=False))
