"""The cost model's measuring: side by side in batches, costliest first within a limit, settled where used often."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from taso import onnx as onnx_io
from taso.cost import profiler
from taso.cost.calibration import Calibration
from taso.cost.measure import MEASURE_BATCH
from taso.cost.model import SETTLE_COUNT, CostModel
from taso.cost.unit import twin_key, unit_graph, unit_key, units
from taso.execute import fold_static_shapes
from taso.ir import Graph, parse_graph
from taso.rules import store

from .graphs import CONV_CHAIN, with_normal_weights, with_weights


def test_units_are_measured_side_by_side_each_cost_landing_on_its_own(
    tmp_path: Path, cpu, calibration, timed: list[int]
) -> None:
    """A graph's new units are timed in one measurement (`MEASURE_BATCH` at a time), not one each: a 256x256
    MatMul and a Relu of eight floats come back each at its own cost; a unit that cannot run alone (a Reshape
    whose drawn indices are out of range) fails the batch, which is then measured unit by unit, that one
    estimated with onnxruntime's error as its note and the others measured; a unit whose shape follows values
    it reads (a Reshape to a shape the graph computes) is estimated without a run."""
    g = with_weights(
        """graph(%x: float32[256,256], %w: float32[256,256] weight, %s: float32[1,8]):
          %m = MatMul(%x, %w) : float32[256,256]
          %r = Relu(%s) : float32[1,8]
          return %m, %r"""
    )
    db = store.create(tmp_path / "s.db")
    model = CostModel(cpu, db, calibration=calibration)
    by_label = {u.label: u for u in model.graph_cost(g).units}
    assert len(timed) == 1 and model.measured == 2  # both in one time_models call
    assert by_label["MatMul"].ms > by_label["Relu"].ms and not by_label["Relu"].estimated
    timed.clear()
    by_label = {u.label: u for u in model.graph_cost(_cannot_run_alone()).units}
    assert len(timed) == 3  # the batch of Tanh and ScatterND, then each alone; never the Reshape
    assert by_label["ScatterND"].estimated and by_label["Reshape"].estimated and not by_label["Tanh"].estimated
    notes = {r["label"]: r["note"] for r in db["costs"].rows}
    assert notes["ScatterND"] and not notes["Tanh"]
    assert "Reshape" not in notes  # estimated without a run: its shape follows values no draw knows


def _cannot_run_alone() -> Graph:
    """A Tanh that runs alone; a ScatterND whose drawn indices (0 or 1) fall outside its data's one row, which
    onnxruntime refuses; and a Reshape to a shape the graph reads, whose output shape no drawn values give
    (`measure.shape_follows_values`)."""
    value = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Tanh", ["s"], ["r"]),
        helper.make_node("ScatterND", ["d", "i", "u"], ["q"]),
        helper.make_node("Reshape", ["v", "shape"], ["p"]),
    ]
    inputs = [
        value("s", TensorProto.FLOAT, [1, 8]),
        value("d", TensorProto.FLOAT, [1, 4]),
        value("i", TensorProto.INT64, [4, 1]),
        value("u", TensorProto.FLOAT, [4, 4]),
        value("v", TensorProto.FLOAT, [2, 3]),
        value("shape", TensorProto.INT64, [2]),
    ]
    outputs = [
        value("r", TensorProto.FLOAT, [1, 8]),
        value("q", TensorProto.FLOAT, [1, 4]),
        value("p", TensorProto.FLOAT, [3, 2]),
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return onnx_io.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_the_costliest_units_are_measured_first(cpu: profiler.Device, calibration: Calibration) -> None:
    """With time for one measurement (of `MEASURE_BATCH` units side by side), it goes to the units estimated
    costliest, not to the first in the graph: of eight tiny Relus and a large MatMul last, a Relu is left to
    estimate."""
    n = MEASURE_BATCH
    relus = "".join(f"  %r{i} = Relu(%x{i}) : float32[1,{i + 1}]\n" for i in range(n))
    inputs = "".join(f"%x{i}: float32[1,{i + 1}], " for i in range(n))
    outputs = "".join(f", %r{i}" for i in range(n))
    g = with_normal_weights(
        f"graph({inputs}%x: float32[1,256], %w: float32[256,4096] weight):\n{relus}"
        f"  %y = MatMul(%x, %w) : float32[1,4096]\n  return %y{outputs}"
    )
    model = CostModel(cpu, None, calibration=calibration)
    model.measure_until = 1e-12  # the first measurement passes it
    costs = model.graph_cost(g).units
    assert [u.label for u in units(g)] == ["Relu"] * n + ["MatMul"]
    assert model.measured == n and [u.label for u in costs if u.estimated] == ["Relu"]


def test_past_the_measure_limit_units_are_estimated_and_a_later_run_measures_them(
    tmp_path: Path, cpu, calibration
) -> None:
    g = with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    limited = CostModel(cpu, db, calibration=calibration)
    limited.measure_until = 0.0
    a = limited.graph_cost(g)
    assert limited.measured == 0 and limited.measuring_s == 0 and a.estimated == len(a.units)
    later = CostModel(cpu, store.open_store(tmp_path / "s.db"), calibration=calibration)
    b = later.graph_cost(g)
    assert later.measured == len(b.units) and b.estimated == 0 and later.measuring_s > 0


def test_a_unit_used_often_is_costed_at_the_median_of_three_measurements(tmp_path: Path, cpu, calibration) -> None:
    relus = "\n".join(f"  %r{i + 1} = Relu(%r{i}) : float32[64,64]" for i in range(SETTLE_COUNT))
    g = parse_graph(
        f"graph(%r0: float32[64,64]):\n{relus}\n  %t = Tanh(%r{SETTLE_COUNT}) : float32[64,64]\n  return %t"
    )
    db = store.create(tmp_path / "s.db")
    model = CostModel(cpu, db, calibration=calibration)
    by_label = {u.label: u for u in model.graph_cost(g).units}
    relu, tanh = by_label["Relu"], by_label["Tanh"]
    assert relu.count == SETTLE_COUNT and tanh.count == 1
    taken = model.samples[relu.key][1]
    assert len(taken) == 3 and relu.ms == statistics.median(taken)
    assert len(model.samples[tanh.key][1]) == 1
    stored = {r["label"]: r["ms"] for r in db["costs"].rows}
    assert stored["Relu"] == relu.ms  # what a second run reads back
    model.graph_cost(g)
    assert len(model.samples[relu.key][1]) == 3  # settled once, not again for every graph


def test_a_cost_the_model_has_handed_out_is_not_settled_later(tmp_path: Path, cpu, calibration) -> None:
    """A unit measured where a graph uses it once keeps that cost when a later graph uses it often: a search
    compared with it, and a warm run reading it from the store must make the same comparisons."""
    one = parse_graph("graph(%r0: float32[64,64]):\n  %r1 = Relu(%r0) : float32[64,64]\n  return %r1")
    relus = "\n".join(f"  %r{i + 1} = Relu(%r{i}) : float32[64,64]" for i in range(SETTLE_COUNT))
    many = parse_graph(f"graph(%r0: float32[64,64]):\n{relus}\n  return %r{SETTLE_COUNT}")
    model = CostModel(cpu, store.create(tmp_path / "s.db"), calibration=calibration)
    first = model.graph_cost(one).units[0]
    again = model.graph_cost(many).units[0]
    assert again.key == first.key and again.count == SETTLE_COUNT
    assert again.ms == first.ms and len(model.samples[first.key][1]) == 1


def test_units_prefetched_together_are_costed_as_if_measured_for_each_graph(
    tmp_path: Path, cpu, calibration, timed: list[int]
) -> None:
    """A search's candidates are prefetched: their new units measured in one batch, after which costing each
    measures nothing more, and a unit one of them uses often is still settled when a cost first counts it."""
    relus = "\n".join(f"  %r{i + 1} = Relu(%r{i}) : float32[64,64]" for i in range(SETTLE_COUNT))
    many = parse_graph(f"graph(%r0: float32[64,64]):\n{relus}\n  return %r{SETTLE_COUNT}")
    tanh = parse_graph("graph(%x: float32[64,64]):\n  %y = Tanh(%x) : float32[64,64]\n  return %y")
    model = CostModel(cpu, store.create(tmp_path / "s.db"), calibration=calibration)
    model.prefetch([many, tanh])
    assert model.measured == 2 and len(timed) == 1  # one measurement for both graphs' units
    (relu,) = model.graph_cost(many).units
    assert relu.count == SETTLE_COUNT and len(model.samples[relu.key][1]) == 3  # settled now, as unprefetched
    assert relu.ms == statistics.median(model.samples[relu.key][1])
    model.graph_cost(tanh)
    assert model.measured == 2


def test_a_kind_of_unit_a_rewrite_touches_anywhere_is_measured_everywhere(cpu: profiler.Device) -> None:
    """`CostModel.untouched`: two Tanhs of one shape are one kind of unit, and one cost; where the search may
    rewrite one of them, the other is measured too, not estimated."""
    g = parse_graph(
        """graph(%a: float32[16,64], %b: float32[16,64]):
          %y = Tanh(%a) : float32[16,64]
          %z = Tanh(%b) : float32[16,64]
          return %y, %z"""
    )
    model = CostModel(cpu, None, measure=False)
    assert len(model.untouched(g, set())) == 1 and model.untouched(g, {"z"}) == frozenset()


def _fresh_keys(g: Graph) -> list[tuple[str, int]]:
    """Each distinct unit key of ``g`` and its count, in graph order, worked out from nothing but ``g``."""
    g = fold_static_shapes(g)
    return list(Counter(unit_key(unit_graph(g, u)) for u in units(g)).items())


def _drawn(text: str) -> Graph:
    """The graph ``text`` with the weights it gives no values drawn (`with_weights`)."""
    g = with_weights(text)
    return replace(g, data={**g.data, **parse_graph(text).data})


PAIRS = {
    "the types it reads": (
        "graph(%x: float32[2,3], %w: float32[3,4] weight):\n  %y = MatMul(%x, %w) : float32[2,4]\n  return %y",
        "graph(%x: float32[2,5], %w: float32[5,4] weight):\n  %y = MatMul(%x, %w) : float32[2,4]\n  return %y",
    ),
    "whether a value it reads is a weight": (
        "graph(%x: float32[4,4], %w: float32[4,4] weight):\n  %y = MatMul(%w, %x) : float32[4,4]\n  return %y",
        "graph(%x: float32[4,4], %w: float32[4,4]):\n  %y = MatMul(%w, %x) : float32[4,4]\n  return %y",
    ),
    "the values a weight spells": (
        "graph(%x: float32[2,4], %s: int64[2] = [4, 2]):\n  %y = Reshape(%x, %s) : float32[4,2]\n  return %y",
        "graph(%x: float32[2,4], %s: int64[2] = [-1, 2]):\n  %y = Reshape(%x, %s) : float32[4,2]\n  return %y",
    ),
    "the types it writes": (
        "graph(%x: float32[2,4], %s: int64[2]):\n  %y = Reshape(%x, %s) : float32[4,2]\n  return %y",
        "graph(%x: float32[2,4], %s: int64[2]):\n  %y = Reshape(%x, %s) : float32[8,1]\n  return %y",
    ),
    "whether what it reads is computed from weights alone": (
        "graph(%x: float32[4], %w: float32[4] weight):\n  %c = Neg(%w) : float32[4]\n  %y = Add(%x, %c) : float32[4]\n"
        "  return %y",
        "graph(%x: float32[4], %w: float32[4]):\n  %c = Neg(%w) : float32[4]\n  %y = Add(%x, %c) : float32[4]\n"
        "  return %y",
    ),
    "where the constants it reads are made": (
        "graph(%x: float32[4], %v: float32[4] weight, %w: float32[4] weight):\n  %c = Neg(%v) : float32[4]\n"
        "  %d = Neg(%w) : float32[4]\n  %y = Sum(%x, %c, %d) : float32[4]\n  return %y",
        "graph(%x: float32[4], %v: float32[4] weight, %w: float32[4] weight):\n  %d = Neg(%w) : float32[4]\n"
        "  %c = Neg(%v) : float32[4]\n  %y = Sum(%x, %c, %d) : float32[4]\n  return %y",
    ),
}


@pytest.mark.parametrize("change", list(PAIRS))
def test_a_unit_met_again_in_a_changed_graph_is_keyed_afresh(cpu: profiler.Device, change: str) -> None:
    """A search keys a unit once and finds it again by its nodes (`Contexts`): the same nodes in a graph that
    differs in ``change`` give the unit of that graph, with its own key and cost, not the one remembered."""
    first, second = (_drawn(text) for text in PAIRS[change])
    assert _fresh_keys(first) != _fresh_keys(second)
    model = CostModel(cpu, None, measure=False)
    for g in (first, second, first):
        cost = model.graph_cost(g)
        assert [(u.key, u.count) for u in cost.units] == _fresh_keys(g)
        assert cost.total_ms == CostModel(cpu, None, measure=False).graph_cost(g).total_ms


def _add(swapped: bool) -> Graph:
    """Add of a [64,64] and a broadcast [1,64] input, in that order or swapped: twins (`twin_key`)."""
    a, b = ("%y", "%x") if swapped else ("%x", "%y")
    return parse_graph(
        f"graph(%x: float32[64,64], %y: float32[1,64]):\n  %z = Add({a}, {b}) : float32[64,64]\n  return %z"
    )


def test_a_unit_whose_twin_is_measured_takes_its_cost_unmeasured(tmp_path: Path, cpu, calibration, timed) -> None:
    """A rewrite's Add(y, x) where the model had Add(x, y): another key, the same cost, taken from the twin
    measured before (and stored under its own key, for a warm run); no second measurement."""
    db = store.create(tmp_path / "s.db")
    model = CostModel(cpu, db, calibration=calibration)
    (first,) = model.graph_cost(_add(False)).units
    (second,) = model.graph_cost(_add(True)).units
    assert second.key != first.key and second.ms == first.ms and not second.estimated
    assert model.measured == 1 and len(timed) == 1
    assert {r["unit"]: r["ms"] for r in db["costs"].rows}[second.key] == first.ms


def test_a_twin_left_to_estimate_is_no_source_for_one_a_rewrite_touches(cpu, calibration) -> None:
    """A unit no rewrite touches is estimated (`CostModel.unmeasured`); its twin that a rewrite makes is measured,
    not handed the estimate."""
    model = CostModel(cpu, None, calibration=calibration)
    original, rewritten = _add(False), _add(True)
    model.unmeasured = frozenset({unit_key(unit_graph(original, units(original)[0]))})
    assert twin_key(unit_graph(original, units(original)[0])) == twin_key(unit_graph(rewritten, units(rewritten)[0]))
    assert model.graph_cost(original).units[0].estimated
    assert not model.graph_cost(rewritten).units[0].estimated and model.measured == 1
