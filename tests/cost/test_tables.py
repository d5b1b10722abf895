"""Cost tables: a reference table reproduces costs without measuring; a shipped table is the prior of a device of
the same identity only, and costs what it holds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import prove_into
from test_optimize import RELU_OF_SPLIT

from taso import onnx as onnx_io
from taso.cost import profiler, tables
from taso.cost.calibration import Calibration
from taso.cost.model import CostModel
from taso.cost.tables import PRIORS, export_reference, prior_for, reference_model
from taso.optimize import Settings, optimize
from taso.rules import store

from .graphs import CONV_CHAIN, SMALL_THEN_LARGE, with_normal_weights, with_weights


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
    assert prior_for(replace(cpu, name="another CPU"), tables=[table]) is None
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
