"""Cost tables: a reference table reproduces costs without measuring; a shipped table is the prior of a device of
the same identity, and costs what it holds, or of another device of its provider, scaled by a few units measured
there."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import prove_into
from test_optimize import RELU_OF_SPLIT

from taso import onnx as onnx_io
from taso.cost import model as cost_model
from taso.cost import profiler, tables
from taso.cost.calibration import Calibration, Scales
from taso.cost.model import CostModel
from taso.cost.tables import PRIORS, export_reference, prior_for, reference_model
from taso.optimize import Settings, optimize
from taso.optimize.report import Report
from taso.rules import store

from .graphs import CONV_CHAIN, SMALL_THEN_LARGE, with_normal_weights, with_weights

MATMULS = """graph(%x: float32[1,256], %a: float32[256,1024] weight, %b: float32[1024,768] weight, %c: float32[768,512] weight,
      %d: float32[512,256] weight):
  %p = MatMul(%x, %a) : float32[1,1024]
  %q = MatMul(%p, %b) : float32[1,768]
  %r = MatMul(%q, %c) : float32[1,512]
  %y = MatMul(%r, %d) : float32[1,256]
  return %y"""
"""Four units of one class, each of its own shape."""
MATMULS_GROWN = MATMULS.replace("return %y", "%z = MatMul(%y, %e) : float32[1,128]\n  return %z").replace(
    "%d: float32[512,256] weight", "%d: float32[512,256] weight, %e: float32[256,128] weight"
)
"""`MATMULS` and a fifth unit."""


def test_reference_table_reproduces_costs_without_measuring(tmp_path: Path, cpu, calibration) -> None:
    g = with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    model = CostModel(cpu, db, calibration=calibration)
    measured = model.graph_cost(g)
    assert export_reference(model, str(tmp_path / "ref.json")) == len(measured.units)
    reference = reference_model(str(tmp_path / "ref.json"))
    again = reference.graph_cost(g)
    assert reference.measured == 0 and again.estimated == 0
    assert again.total_ms == pytest.approx(model.at_quick_host(measured).total_ms) and reference.device == cpu
    assert reference.host_scale() == 1.0  # the table is at the quick host speed already


def _table(tmp_path: Path, cpu: profiler.Device, calibration: Calibration) -> Path:
    """A cost table of `_graph`'s units measured on this CPU."""
    model = CostModel(cpu, store.create(tmp_path / "measured.db"), calibration=calibration)
    model.graph_cost(with_normal_weights())
    path = tmp_path / "table.json"
    assert export_reference(model, str(path)) == 2
    return path


def test_a_prior_is_taken_only_for_a_device_of_the_same_identity(
    tmp_path: Path, cpu: profiler.Device, calibration: Calibration
) -> None:
    table = _table(tmp_path, cpu, calibration)
    assert prior_for(cpu, tables=[table]) is not None
    assert prior_for(replace(cpu, driver="other", ort_version="0.0"), tables=[table]) is not None
    other = prior_for(replace(cpu, name="another CPU"), tables=[table])  # carried over, scaled
    assert other is not None and other.scaled_from == cpu.name and prior_for(cpu, tables=[table]).scaled_from is None
    assert prior_for(replace(cpu, provider=profiler.CUDA), tables=[table]) is None
    assert prior_for(cpu, profiler.Mode(threads=1), tables=[table]) is None  # timed otherwise
    shipped = json.loads(PRIORS[0].read_text())["device"]
    assert prior_for(cpu) is None and shipped["name"].startswith("NVIDIA H100")


def test_a_prior_costs_what_it_holds_and_only_the_rest_is_measured(
    tmp_path: Path, cpu: profiler.Device, calibration: Calibration
) -> None:
    prior = prior_for(cpu, tables=[_table(tmp_path, cpu, calibration)])
    db = store.create(tmp_path / "cold.db")
    model = CostModel(cpu, db, prior=prior)
    assert prior is not None and model.calibration == prior.calibration  # nothing calibrated
    c = model.graph_cost(with_normal_weights())
    assert model.measured == 0 and model.from_prior == 2 and c.estimated == 0
    assert db["costs"].count == 0 and db["devices"].count == 0  # a prior is not a measurement of this device
    grown = with_normal_weights(SMALL_THEN_LARGE.replace("return %y", "%t = Tanh(%y) : float32[1,4096]\n  return %t"))
    model.graph_cost(grown)  # the MatMul's unit is now MatMul+Tanh: the table lacks it
    assert model.measured == 1 and db["costs"].count == 1


def test_an_optimize_run_says_how_many_costs_came_from_the_prior(
    tmp_path: Path, cpu: profiler.Device, calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "PRIORS", (_table(tmp_path, cpu, calibration),))
    src = onnx_io.save_model(with_normal_weights(), tmp_path / "m.onnx")
    db = prove_into(tmp_path / "s.db", [RELU_OF_SPLIT])  # proved, and matches nothing in the model
    report = optimize(src, tmp_path / "o.onnx", db, settings=Settings(device="cpu"))
    assert report.cost["prior"]["units"] == 2 and report.search["measured_units"] == 0
    assert any(line.startswith("prior     2 unit costs from the shipped table") for line in report.lines())


@pytest.mark.slow
def test_a_table_of_another_device_is_scaled_by_a_few_units_measured_here_and_only_the_rest_measured(
    tmp_path: Path, cpu: profiler.Device, calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured = CostModel(cpu, store.create(tmp_path / "measured.db"), calibration=calibration)
    measured.graph_cost(with_normal_weights(MATMULS))
    path = tmp_path / "table.json"
    assert export_reference(measured, str(path)) == 4
    table = json.loads(path.read_text())  # as if measured on a device ten times slower
    table["device"]["name"], table["costs"] = "a slower CPU", {k: 10 * ms for k, ms in table["costs"].items()}
    path.write_text(json.dumps(table))
    prior = prior_for(cpu, tables=[path])
    assert prior is not None and prior.scaled_from == "a slower CPU"
    monkeypatch.setattr(cost_model, "REFERENCE_UNITS", 2)
    db = store.create(tmp_path / "cold.db")
    model = CostModel(cpu, db, prior=prior, calibration=calibration)
    c = model.graph_cost(with_normal_weights(MATMULS_GROWN))
    assert model.measured == 3 and model.from_prior == 2 and db["costs"].count == 3  # 2 references, 1 new
    assert model.scales is not None and model.scales.references == 2 and model.scales.overall < 0.5
    stored = {r["unit"] for r in db["costs"].rows}
    scaled = [u for u in c.units if u.key in prior.costs and u.key not in stored]
    assert len(scaled) == 2
    for u in scaled:  # the table's cost times the scale of its class, never the table's own
        assert u.ms == pytest.approx(prior.costs[u.key] * model.scales.of(u.label))
    facts = model.prior_facts()["prior"]
    assert facts["scaled_from"] == "a slower CPU" and facts["units"] == 2 and facts["references"] == 2


def test_the_report_labels_a_scaled_prior_as_such() -> None:
    r = Report("in.onnx", "out.onnx", 2, 2, 0, 1)
    prior = {"table": "t.json", "units": 9, "scaled_from": "NVIDIA H100", "references": 8, "scale": 0.8, "by_class": {}}
    r.cost = {"before_ms": 1.0, "after_ms": 1.0, "device": "d", "estimated_units": 0, "prior": prior}
    r.search = {"regions": 1, "expanded": 1, "candidates": 1, "alpha": 1.05}
    assert (
        "prior     9 unit costs scaled from NVIDIA H100 by calibration (8 of its units measured here, x0.80 overall), "
        "from the shipped table t.json" in r.lines()
    )


def test_a_reference_unit_measured_at_nothing_says_nothing_of_the_ratio() -> None:
    scales = Scales.read([("Conv+Relu", 0.0, 1.0), ("Conv", 0.5, 1.0), ("Add", 0.2, 0.1)])
    assert scales is not None and scales.of("Conv") == 0.5 and scales.of("Add") == 2.0 and scales.references == 2
    assert scales.of("MatMul") == pytest.approx(1.25)  # no reference of its class: the median of all
    assert Scales.read([("Conv", 0.0, 1.0)]) is None  # not a class scaled to nothing
