"""Cold runs on the CPU provider: measuring within a budget, the costliest units first, and a shipped cost table
taken as the prior of a device of the same identity only."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import prove_into
from hypothesis import given, settings
from hypothesis import strategies as st
from test_optimize import CONCAT_OF_SPLIT, MERGE_MATMULS, RELU_OF_SPLIT, _store, _two_branches

from taso import onnx as onnx_io
from taso.cost import model as cost
from taso.cost import profiler
from taso.cost import tables as costtables
from taso.execute import random_inputs
from taso.ir import WeightData, parse_graph
from taso.optimize import guard
from taso.optimize.guard import fed_at, verdict_key
from taso.optimize.pipeline import Settings, optimize
from taso.rules import store

SMALL_THEN_LARGE = """graph(%x: float32[1,256], %w: float32[256,4096] weight):
  %r = Relu(%x) : float32[1,256]
  %y = MatMul(%r, %w) : float32[1,4096]
  return %y"""
"""A tiny unit first in graph order, then one whose weights alone are 4 MiB."""


def _graph(text: str = SMALL_THEN_LARGE):
    g = parse_graph(text)
    rng = np.random.default_rng(0)
    return replace(g, data={w: WeightData(rng.standard_normal(g.types[w].shape).astype(np.float32)) for w in g.weights})


@pytest.fixture
def steady_units(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Unit "measurements" at the analytic estimate: the search's choice then does not hang on this machine's
    noise (measured on the loaded CPU, the merges below paid in some runs and not in others); the end-to-end
    guard still times both models in onnxruntime. The estimates are at a fixed calibration, for the same reason,
    and the cost cache is the test's own: a verdict another test cached for the same pair of models would
    stand in for the timing."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fixed = cost.Calibration(run_ms=0.01, kernel_ms=0.002, gflops=50.0, gbps=10.0, reference_ms=0.05)
    monkeypatch.setattr(cost, "calibrate", lambda device: fixed)
    monkeypatch.setattr(cost.CostModel, "_measure", lambda self, ugs: [self.calibration.estimate(ug) for ug in ugs])


def test_a_budget_cuts_the_samples_and_the_attempts(cpu: profiler.Device) -> None:
    """Within a budget a measurement takes `MIN_SAMPLES` where more would overrun it, and no second attempt
    that would: on a loaded host every attempt looks like a slow spell (ResNet-50 on the shared 2-core CPU:
    three attempts of every unit)."""
    model, feeds = profiler._reference()
    profiler._quickest[cpu.key] = 1e-9  # as if the host had once been far quicker: every attempt is slow
    try:
        free = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=30)[0]
        bounded = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=30, budget_s=0.0)[0]
    finally:
        profiler._quickest.pop(cpu.key)
    assert len(free.values) == 30 and free.attempts == profiler.ATTEMPTS
    assert len(bounded.values) == profiler.MIN_SAMPLES and bounded.attempts == 1


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(1, 6), st.booleans())
def test_a_primed_sample_follows_an_untimed_run_of_its_own_model(
    per_sample: list[int], samples: int, primed: bool
) -> None:
    """Units measured side by side are primed (`measure_marginals`): before each sample of a model, one run of it
    outside the timed span, so the sample finds the caches as its own run left them, not as the unit timed
    before it did. Each model's run count says which runs there were; the sample count is unchanged."""
    calls = [0] * len(per_sample)
    finished = [0] * len(per_sample)

    def runner(i: int):  # noqa: ANN202 (a (once, finish) pair)
        def once() -> None:
            calls[i] += 1

        def finish() -> None:
            finished[i] += 1

        return once, finish

    values = profiler._side_by_side([runner(i) for i in range(len(per_sample))], per_sample, samples, primed)
    assert [len(v) for v in values] == [samples] * len(per_sample)
    assert calls == [samples * (n + primed) for n in per_sample]
    assert finished == [samples * (1 + primed)] * len(per_sample)  # a primed run is waited for before timing


def test_the_costliest_units_are_measured_first(cpu: profiler.Device, calibration: cost.Calibration) -> None:
    """With time for one measurement (of `MEASURE_BATCH` units side by side), it goes to the units estimated
    costliest, not to the first in the graph: of eight tiny Relus and a large MatMul last, a Relu is left to
    estimate."""
    n = cost.MEASURE_BATCH
    relus = "".join(f"  %r{i} = Relu(%x{i}) : float32[1,{i + 1}]\n" for i in range(n))
    inputs = "".join(f"%x{i}: float32[1,{i + 1}], " for i in range(n))
    outputs = "".join(f", %r{i}" for i in range(n))
    g = _graph(
        f"graph({inputs}%x: float32[1,256], %w: float32[256,4096] weight):\n{relus}"
        f"  %y = MatMul(%x, %w) : float32[1,4096]\n  return %y{outputs}"
    )
    model = cost.CostModel(cpu, None, calibration=calibration)
    model.measure_until = 1e-12  # the first measurement passes it
    costs = model.graph_cost(g).units
    assert [u.label for u in cost.units(g)] == ["Relu"] * n + ["MatMul"]
    assert model.measured == n and [u.label for u in costs if u.estimated] == ["Relu"]


def test_a_unit_far_above_a_runs_overhead_is_timed_as_one_copy(
    cpu: profiler.Device, calibration: cost.Calibration, timed: list[int]
) -> None:
    g = _graph("graph(%x: float32[1,256]):\n  %r = Relu(%x) : float32[1,256]\n  return %r")
    quick_runs = cost.CostModel(cpu, None, calibration=replace(calibration, run_ms=1e-9))
    slow_runs = cost.CostModel(cpu, None, calibration=replace(calibration, run_ms=1e3))
    assert quick_runs.graph_cost(g).units[0].ms >= 0 and slow_runs.graph_cost(g).units[0].ms >= 0
    assert timed == [1, 2]  # one copy alone; else one copy beside `COPIES`


def _table(tmp_path: Path, cpu: profiler.Device, calibration: cost.Calibration) -> Path:
    """A cost table of `_graph`'s units measured on this CPU."""
    model = cost.CostModel(cpu, store.create(tmp_path / "measured.db"), calibration=calibration)
    model.graph_cost(_graph())
    path = tmp_path / "table.json"
    assert cost.export_reference(model, str(path)) == 2
    return path


def test_a_prior_is_taken_only_for_a_device_of_the_same_identity(
    tmp_path: Path, cpu: profiler.Device, calibration: cost.Calibration
) -> None:
    table = _table(tmp_path, cpu, calibration)
    assert costtables.prior_for(cpu, tables=[table]) is not None
    assert costtables.prior_for(replace(cpu, driver="other", ort_version="0.0"), tables=[table]) is not None
    assert costtables.prior_for(replace(cpu, name="another CPU"), tables=[table]) is None
    assert costtables.prior_for(replace(cpu, provider=profiler.CUDA), tables=[table]) is None
    assert costtables.prior_for(cpu, profiler.Mode(threads=1), tables=[table]) is None  # timed otherwise
    shipped = json.loads(costtables.PRIORS[0].read_text())["device"]
    assert costtables.prior_for(cpu) is None and shipped["name"].startswith("NVIDIA H100")


def test_a_prior_costs_what_it_holds_and_only_the_rest_is_measured(
    tmp_path: Path, cpu: profiler.Device, calibration: cost.Calibration
) -> None:
    prior = costtables.prior_for(cpu, tables=[_table(tmp_path, cpu, calibration)])
    db = store.create(tmp_path / "cold.db")
    model = cost.CostModel(cpu, db, prior=prior)
    assert prior is not None and model.calibration == prior.calibration  # nothing calibrated
    c = model.graph_cost(_graph())
    assert model.measured == 0 and model.from_prior == 2 and c.estimated == 0
    assert db["costs"].count == 0 and db["devices"].count == 0  # a prior is not a measurement of this device
    grown = _graph(SMALL_THEN_LARGE.replace("return %y", "%t = Tanh(%y) : float32[1,4096]\n  return %t"))
    model.graph_cost(grown)  # the MatMul's unit is now MatMul+Tanh: the table lacks it
    assert model.measured == 1 and db["costs"].count == 1


def test_an_optimize_run_says_how_many_costs_came_from_the_prior(
    tmp_path: Path, cpu: profiler.Device, calibration: cost.Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(costtables, "PRIORS", (_table(tmp_path, cpu, calibration),))
    src = onnx_io.save_model(_graph(), tmp_path / "m.onnx")
    db = prove_into(tmp_path / "s.db", [RELU_OF_SPLIT])  # proved, and matches nothing in the model
    report = optimize(src, tmp_path / "o.onnx", db, settings=Settings(device="cpu"))
    assert report.cost["prior"]["units"] == 2 and report.search["measured_units"] == 0
    assert any(line.startswith("prior     2 unit costs from the shipped table") for line in report.lines())


def test_the_guard_feeds_what_a_concretized_graph_would_be_fed(bert_path: Path) -> None:
    g, _ = onnx_io.import_model(bert_path)
    for dims in ({}, {"seq": 8}, {"batch": 2, "seq": 5}):
        fed, concrete = random_inputs(fed_at(g, dims)), random_inputs(onnx_io.concretize(g, dims))
        assert fed.keys() == concrete.keys()
        for k in fed:
            np.testing.assert_array_equal(fed[k], concrete[k])


def test_progress_off_a_terminal_says_the_time_left_and_each_stages_seconds(capsys: pytest.CaptureFixture) -> None:
    from cli import progress

    bars = progress.StageBars()
    bars.update("measuring units", 0, 4)
    bars.echoed -= progress.ECHO_EVERY_S + 1  # as if the last line were that old
    bars.update("measuring units", 1, 4)
    bars.update("measuring units", 4, 4)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("measuring units (1/4 steps, about ") and lines[0].endswith(" s left)")
    assert lines[1].startswith("measuring units (4/4 steps, ") and lines[1].endswith(" s)")


def test_a_gain_too_small_to_confirm_is_neither_timed_nor_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The merges are predicted to pay; with a bar above their gain, the original is kept without timing it."""
    src, db = _two_branches(tmp_path), _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    settings = Settings(device="cpu", alpha=2.0, dims={"batch": 64})
    monkeypatch.setattr(guard, "GUARD_MIN_GAIN", 1e6)
    stages: list[str] = []
    report = optimize(src, tmp_path / "o.onnx", db, settings=settings, progress=lambda s, *_: stages.append(s))
    assert report.rules_applied == {} and report.cost["untimed_gain"] > 1.0
    assert report.cost["after_ms"] == report.cost["before_ms"] and "measured" not in report.cost
    assert "timing end to end" not in stages and "timing end to end" not in report.seconds
    assert any(line.startswith("measured  not timed: a predicted ") for line in report.lines())


def test_the_guard_times_the_input_file_and_the_staged_output_without_saving_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steady_units: None
) -> None:
    src, db = _two_branches(tmp_path), _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    saved: list[Path] = []

    def counting(g, path, *args, **kwargs):
        saved.append(Path(path))
        return save(g, path, *args, **kwargs)

    save = onnx_io.save_model
    monkeypatch.setattr(onnx_io, "save_model", counting)
    report = optimize(src, tmp_path / "o.onnx", db, settings=Settings(device="cpu", alpha=2.0, dims={"batch": 64}))
    assert "timing end to end" in report.seconds and report.check is not None and report.check.ok
    # the result once, and the original again only where the guard kept it
    assert len(saved) == 1 + bool(report.cost["measured"].get("kept_original"))
    assert all(p.name == "o.onnx" for p in saved)


def test_a_warm_run_that_reaches_the_same_rewrite_takes_the_guards_verdict_from_the_cache(
    tmp_path: Path, steady_units: None
) -> None:
    src, db = _two_branches(tmp_path), _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    settings = Settings(device="cpu", alpha=2.0, dims={"batch": 64})
    first = optimize(src, tmp_path / "a.onnx", db, settings=settings)
    assert "timing end to end" in first.seconds and "cached" not in first.cost["measured"]
    stages: list[str] = []
    again = optimize(src, tmp_path / "b.onnx", db, settings=settings, progress=lambda s, *_: stages.append(s))
    assert "timing end to end" not in stages and "timing end to end" not in again.seconds
    assert again.cost["measured"] == {**first.cost["measured"], "cached": True}
    assert (
        again.rules_applied == first.rules_applied
        and (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    )
    assert any(line.endswith(" (timed by an earlier run); " + line.split("; ")[-1]) for line in again.lines())
    g, h = onnx_io.load_model(src), onnx_io.load_model(tmp_path / "a.onnx")
    keys = {
        verdict_key(g, h, {"batch": 64}),
        verdict_key(g, h, {"batch": 32}),
        verdict_key(h, g, {"batch": 64}),
        verdict_key(g, g, {}),
    }
    assert len(keys) == 4  # another rewrite, or fed at other sizes: timed anew
