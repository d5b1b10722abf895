"""Cost tables: a reference table reproduces costs without measuring; a shipped table is the prior of a device of
the same identity, and costs what it holds, or of another device of its provider, scaled by a few units measured
there."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import prove_into
from test_optimize import RELU_OF_SPLIT

from taso import onnx as onnx_io
from taso.cost import cache, profiler, tables
from taso.cost import model as cost_model
from taso.cost.calibration import Calibration, Scales
from taso.cost.model import CostModel
from taso.cost.tables import PRIORS, export_reference, prior_for, reference_model
from taso.optimize import Settings, optimize, pipeline
from taso.optimize.report import Report
from taso.rules import store

from .graphs import CONV_CHAIN, SMALL_THEN_LARGE, with_normal_weights, with_weights
from .test_layered_prior import SHARED, write_table

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
    labels = tables.read_table(str(tmp_path / "ref.json")).labels  # what a scale between tables is fitted by class on
    assert labels == {u.key: u.label for u in measured.units}
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


def test_without_the_prior_every_unit_is_measured_here(
    tmp_path: Path, cpu: profiler.Device, calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`subst optimize --no-prior` (how a device's own table is built): the shipped table holding every unit of
    the graph is passed over, and each unit is measured on this device and cached."""
    monkeypatch.setattr(tables, "PRIORS", (_table(tmp_path, cpu, calibration),))
    db = store.create(tmp_path / "cache.db")
    cache.keep_calibration(db, cpu.key, calibration)
    assert pipeline._cost_model(db, Settings(device="cpu"), {}).prior is not None
    model = pipeline._cost_model(db, Settings(device="cpu", prior=False), {})
    model.graph_cost(with_normal_weights())
    assert model.prior is None and model.from_prior == 0 and model.measured == 2
    assert set(cache.measured_costs(db, cpu.key)) == set(json.loads(tables.PRIORS[0].read_text())["costs"])


def _export(path: Path, device: dict[str, str], costs: dict[str, float], gflops: float) -> Path:
    calibration = {"gbps": 4000.0, "gflops": gflops, "kernel_ms": 0.005, "run_ms": 0.05}
    path.write_text(json.dumps({"device": device, "calibration": calibration, "costs": costs}))
    return path


def test_a_leases_exports_merge_into_the_table_its_gpu_takes_as_prior(tmp_path: Path) -> None:
    """bench/h200-table.sh's end: the per-model exports of one GPU (`merge_costs --same-device`) give one table,
    each unit at the median of the exports holding it; `prior_for` takes it on that GPU and the H100's on an
    H100, and carries the first shipped table (the H100's) to a GPU none is of. Exports of two GPUs are refused."""
    import merge_costs

    h100 = json.loads(PRIORS[0].read_text())["device"]
    h200 = {**h100, "name": "NVIDIA H200", "driver": "590.1"}
    a = _export(tmp_path / "a.json", h200, {"u1": 1.0, "u2": 2.0}, 900e3)
    b = _export(tmp_path / "b.json", h200, {"u2": 4.0, "u3": 3.0}, 1000e3)
    b.write_text(json.dumps(json.loads(b.read_text()) | {"labels": {"u2": "Conv+Relu", "u3": "Add"}}))
    c = _export(tmp_path / "c.json", h200, {"u2": 3.5}, 950e3)
    empty = _export(tmp_path / "empty.json", h200, {}, 1.0)  # a run that measured nothing: default calibration
    merged = tmp_path / "reference_costs_h200.json"
    r = subprocess.run(
        [sys.executable, merge_costs.__file__, "--same-device", a, b, c, empty, "-o", merged],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    table = tables.read_table(str(merged))
    assert table.costs == {"u1": 1.0, "u2": 3.5, "u3": 3.0} and table.calibration.gflops == 950e3
    assert table.labels == {"u2": "Conv+Relu", "u3": "Add"}
    shipped = [PRIORS[0], merged]
    on_h200 = prior_for(profiler.Device(**{**h200, "driver": "600.0"}), tables=shipped)
    assert on_h200 is not None and on_h200.source == str(merged) and on_h200.scaled_from is None
    on_h100 = prior_for(profiler.Device(**h100), tables=shipped)
    assert on_h100 is not None and on_h100.source == str(PRIORS[0]) and on_h100.scaled_from is None
    elsewhere = prior_for(profiler.Device(**{**h100, "name": "NVIDIA A100"}), tables=shipped)
    assert elsewhere is not None and elsewhere.scaled_from == h100["name"]
    other = _export(tmp_path / "other.json", h100, {"u4": 1.0}, 900e3)
    r = subprocess.run(
        [sys.executable, merge_costs.__file__, "--same-device", a, other, "-o", tmp_path / "mixed.json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "2 devices" in r.stderr and not (tmp_path / "mixed.json").exists()


def test_every_shipped_table_is_package_data() -> None:
    """A table in `PRIORS` that the wheel leaves out is no prior for an installed subst (the H200's is added
    after a lease, beside the H100's)."""
    data = tomllib.loads((Path(tables.__file__).parents[2] / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]["taso.cost"]
    assert [p.name for p in PRIORS] == ["reference_costs.json", "reference_costs_h200.json"]
    assert all(p.name in shipped for p in PRIORS)


def test_a_cold_run_costs_from_every_layer_and_says_how_many_units_each_gave(
    tmp_path: Path, cpu: profiler.Device, calibration: Calibration
) -> None:
    """The graph's two units only in the other table (measured 2x slower there): nothing measured, each at
    its measured cost, and `cost.prior` names both tables with the units each gave."""
    measured = tables.read_table(str(_table(tmp_path, cpu, calibration)))
    own = write_table(tmp_path / "own.json", cpu, SHARED)
    slower = {k: 2 * ms for k, ms in (SHARED | dict(measured.costs)).items()}
    other = write_table(tmp_path / "other.json", replace(cpu, name="a slower CPU"), slower)
    prior = prior_for(cpu, tables=[own, other])
    model = CostModel(cpu, store.create(tmp_path / "cold.db"), prior=prior)
    c = model.graph_cost(with_normal_weights())
    assert model.measured == 0 and model.from_prior == 2
    assert all(u.ms == pytest.approx(measured.costs[u.key]) for u in c.units)
    facts = model.prior_facts()["prior"]
    assert facts["units"] == 2 and [(t["table"], t["units"]) for t in facts["tables"]] == [
        (str(own), 0),
        (str(other), 2),
    ]
    assert facts["tables"][1]["scale"] == pytest.approx(0.5) and facts["tables"][1]["shared"] == len(SHARED)
    r = Report("in.onnx", "out.onnx", 2, 2, 0, 1)
    r.cost = {"before_ms": 1.0, "after_ms": 1.0, "device": "d", "estimated_units": 0, "prior": facts}
    r.search = {"regions": 1, "expanded": 1, "candidates": 1, "alpha": 1.05}
    assert f"          2 of them from {other} (a slower CPU), scaled x0.50 on {len(SHARED)} shared units" in r.lines()
