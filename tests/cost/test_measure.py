"""Measuring units on the CPU provider: copies side by side, one copy for a large unit, fusions read on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from taso import onnx as onnx_io
from taso.cost import measure, profiler
from taso.cost.calibration import Calibration
from taso.cost.measure import fused_when_read, measure_marginal, read_on, replicate, sinks
from taso.cost.model import CostModel
from taso.cost.unit import unit_graph, units
from taso.execute import Runner, random_inputs
from taso.ir import Graph, parse_graph

from .graphs import CONV_CHAIN, GELU, with_normal_weights, with_weights


def test_replicated_unit_computes_the_same_in_every_copy(tmp_path: Path) -> None:
    g = with_weights(CONV_CHAIN)
    ug = unit_graph(g, units(g)[0])
    many = replicate(ug, 3)
    assert len(many.inputs) == 3 and len(set(many.inputs)) == 3 and many.weights == ug.weights
    feeds = random_inputs(ug, seed=1)
    single = Runner(onnx_io.save_model(ug, tmp_path / "one.onnx"))(feeds)
    copies = Runner(onnx_io.save_model(many, tmp_path / "many.onnx"))(
        {f"{k}#{c}": v for k, v in feeds.items() for c in range(3)}
    )
    for c in range(3):
        np.testing.assert_allclose(copies[f"{ug.outputs[0]}#{c}"], single[ug.outputs[0]], rtol=1e-5)


def test_a_unit_far_above_a_runs_overhead_is_timed_as_one_copy(
    cpu: profiler.Device, calibration: Calibration, timed: list[int]
) -> None:
    g = with_normal_weights("graph(%x: float32[1,256]):\n  %r = Relu(%x) : float32[1,256]\n  return %r")
    quick_runs = CostModel(cpu, None, calibration=replace(calibration, run_ms=1e-9))
    slow_runs = CostModel(cpu, None, calibration=replace(calibration, run_ms=1e3))
    assert quick_runs.graph_cost(g).units[0].ms >= 0 and slow_runs.graph_cost(g).units[0].ms >= 0
    assert timed == [1, 2]  # one copy alone; else one copy beside `COPIES`


def test_a_unit_onnxruntime_fuses_only_when_read_on_is_timed_read_on(
    tmp_path: Path, cpu, calibration, timed: list[int]
) -> None:
    """onnxruntime fuses a GELU chain into one FastGelu kernel only when its last node does not write a graph
    output: the unit is timed with its output read on, and the reading Reshape's own cost taken off."""
    gelu = parse_graph(GELU)
    assert fused_when_read(gelu)
    assert profiler.optimized_ops(onnx_io.model_bytes(read_on(gelu)), cuda=False).get("FastGelu") == 1
    assert not fused_when_read(parse_graph(GELU.replace("Tanh(", "Sigmoid(")))  # no fusion to unblock
    feeds = random_inputs(gelu, seed=1)
    plain, read = (
        Runner(onnx_io.save_model(h, tmp_path / f"{i}.onnx"))(feeds) for i, h in enumerate((gelu, read_on(gelu)))
    )
    np.testing.assert_allclose(read["y#flat"], plain["y"].reshape(-1), rtol=1e-5)
    sink = sinks(gelu)
    assert [n.op for n in sink.nodes] == ["Reshape"] and sink.inputs == gelu.outputs
    measure_marginal(gelu, cpu, calibration.run_ms)
    measure_marginal(parse_graph(GELU.replace("Tanh(", "Sigmoid(")), cpu, calibration.run_ms)
    assert timed == [4, 2]  # read on, five copies of it, the sinks alone and five copies; else one and five


def test_a_units_copies_run_on_its_own_draw_each_in_its_own_buffer(
    cpu: profiler.Device, calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inputs of a unit's copies are its single copy's draw, not drawn again for each (a draw of five copies
    of a mobilenet_v2 unit's activations was most of 9 ms), each copy's in an array of its own."""
    drawn: list[Graph] = []
    fed: list[dict[str, np.ndarray]] = []
    draw, timing = measure.check.random_inputs, measure.time_models
    monkeypatch.setattr(measure.check, "random_inputs", lambda g, **k: drawn.append(g) or draw(g, **k))
    monkeypatch.setattr(
        measure, "time_models", lambda runs, *a, **k: fed.extend(f for _, f in runs) or timing(runs, *a, **k)
    )
    gelu = parse_graph(GELU)
    measure_marginal(gelu, cpu, calibration.run_ms)
    assert len(drawn) == 2 and len(fed) == 4  # read on and the sinks drawn; their five copies not
    for one, many in ((fed[0], fed[1]), (fed[2], fed[3])):
        copies = [many[f"{v}#{c}"] for v in one for c in range(measure.COPIES)]
        assert len(many) == len(copies) == measure.COPIES * len(one)
        assert all(np.array_equal(a, one[v]) for a, v in zip(copies, [v for v in one for _ in range(measure.COPIES)]))
        assert len({id(a) for a in copies} | {id(a) for a in one.values()}) == len(copies) + len(one)


def test_a_units_fusion_is_asked_of_onnxruntime_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit settled is measured three times; whether it fuses only when read on is asked once (two sessions),
    and a unit that differs where a fusion's pattern looks (Sigmoid for Tanh) is asked anew."""
    asked: list[int] = []
    ops_of = measure.optimized_ops
    monkeypatch.setattr(measure, "optimized_ops", lambda *a, **k: asked.append(1) or ops_of(*a, **k))
    gelu = GELU.replace("[4,64]", "[4,96]")  # no other test asks of this one
    assert fused_when_read(parse_graph(gelu)) and len(asked) == 2
    assert fused_when_read(parse_graph(gelu)) and len(asked) == 2
    assert not fused_when_read(parse_graph(gelu.replace("Tanh(", "Sigmoid("))) and len(asked) == 4


def test_a_unit_that_runs_as_one_kernel_alone_is_asked_of_in_one_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a unit on can only fuse it into fewer kernels: one that onnxruntime runs as one kernel alone (a
    Conv and its Relu: FusedConv) needs no second session, and is not fused when read; a GELU chain still is."""
    asked: list[int] = []
    ops_of = measure.optimized_ops
    monkeypatch.setattr(measure, "optimized_ops", lambda *a, **k: asked.append(1) or ops_of(*a, **k))
    conv = with_weights("""graph(%x: float32[1,4,8,8], %w: float32[24,4,3,3] weight):
  %c = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,24,8,8]
  %r = Relu(%c) : float32[1,24,8,8]
  return %r""")  # no other test asks of this one
    assert not fused_when_read(conv) and len(asked) == 1
    assert fused_when_read(parse_graph(GELU.replace("[4,64]", "[4,80]"))) and len(asked) == 3


def test_a_unit_whose_shapes_follow_the_values_it_reads_is_told_apart() -> None:
    """An Expand to a shape the unit reads follows those values, inside a unit as well as at its output (the
    Reshape after it to a constant shape hides it there); to a constant shape, or reading only floats, or
    adding integers elementwise, nothing follows values."""
    from onnx import TensorProto, helper, numpy_helper

    def unit(nodes: list, inputs: list, output: list, inits: tuple = ()) -> Graph:
        value = helper.make_tensor_value_info
        graph = helper.make_graph(
            nodes,
            "unit",
            [value(n, t, s) for n, t, s in inputs],
            [value(*output)],
            [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in inits],
            value_info=[value("e", TensorProto.FLOAT, [3, 4])],  # as the whole model's inference knew it
        )
        return onnx_io.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))

    f, i = TensorProto.FLOAT, TensorProto.INT64
    expand = helper.make_node("Expand", ["x", "s"], ["e"])
    flat = helper.make_node("Reshape", ["e", "twelve"], ["y"])
    read = [("x", f, [1, 4]), ("s", i, [2])]
    assert measure.shape_follows_values(unit([expand], read, ("e", f, [3, 4])))
    assert measure.shape_follows_values(unit([expand, flat], read, ("y", f, [12]), (("twelve", [12]),)))
    constant = unit([expand], [("x", f, [1, 4])], ("e", f, [3, 4]), (("s", [3, 4]),))
    assert not measure.shape_follows_values(constant)
    add = unit([helper.make_node("Add", ["a", "a"], ["b"])], [("a", i, [2, 3])], ("b", i, [2, 3]))
    assert not measure.shape_follows_values(add)
    assert not measure.shape_follows_values(
        parse_graph("graph(%x: float32[2]):\n  %y = Relu(%x) : float32[2]\n  return %y")
    )
