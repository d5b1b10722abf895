"""Cold and warm optimize runs on the CPU provider: the end-to-end guard times the files it has, feeds what a
concretized graph would be fed, skips a gain too small to confirm, and a warm run takes its verdict from the cache; progress off a terminal.
(The cost stage's own cold-run behaviour is tested in tests/cost/.)"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_optimize import CONCAT_OF_SPLIT, MERGE_MATMULS, RELU_OF_SPLIT, _store, _two_branches

from taso import onnx as onnx_io
from taso.cost import model as cost_model
from taso.cost.calibration import Calibration
from taso.execute import random_inputs
from taso.optimize import guard
from taso.optimize.guard import fed_at, verdict_key
from taso.optimize.pipeline import Settings, optimize
from taso.rules import store


@pytest.fixture
def steady_units(monkeypatch: pytest.MonkeyPatch, own_cache: Path) -> None:
    """Unit "measurements" at the analytic estimate: the search's choice then does not hang on this machine's
    noise (measured on the loaded CPU, the merges below paid in some runs and not in others); the end-to-end
    guard still times both models in onnxruntime. The estimates are at a fixed calibration, for the same reason,
    and the cost cache is the test's own (`own_cache`): a verdict another test cached for the same pair of
    models would stand in for the timing."""
    fixed = Calibration(run_ms=0.01, kernel_ms=0.002, gflops=50.0, gbps=10.0, reference_ms=0.05)
    monkeypatch.setattr(cost_model, "calibrate", lambda device, mode: fixed)
    monkeypatch.setattr(
        cost_model.CostModel, "_measure", lambda self, ugs: [self.calibration.estimate(ug) for ug in ugs]
    )


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


def test_a_gain_too_small_to_confirm_is_neither_timed_nor_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steady_units: None
) -> None:
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
    # the rewrite kept out is named, rule by rule, and its predicted ratio is the one ratio the report shows
    assert report.rejected is not None and report.rejected["rules"] and report.rejected["why"].startswith("a predicted")
    rejected = next(line for line in report.lines() if line.startswith("rejected  "))
    assert all(f"x {rule_id}" in rejected for rule_id in report.rejected["rules"])
    ratios = re.findall(r"\d+\.\d{3}x", "\n".join(report.lines()))
    assert ratios == [f"{report.cost['before_ms'] / report.rejected['after_ms']:.3f}x"], report.lines()


def _count_saves(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths every model save goes to from now on (the saves still happen)."""
    saved: list[Path] = []
    save = onnx_io.save_model

    def counting(g, path, *args, **kwargs):
        saved.append(Path(path))
        return save(g, path, *args, **kwargs)

    monkeypatch.setattr(onnx_io, "save_model", counting)
    return saved


def test_the_guard_times_the_input_file_and_the_staged_output_without_saving_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steady_units: None
) -> None:
    src, db = _two_branches(tmp_path), _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    saved = _count_saves(monkeypatch)
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
    g = onnx_io.load_model(src)
    h = replace(g, nodes=g.nodes[1:])  # another rewrite (the guard may have kept the original on a busy machine)
    keys = {
        verdict_key(g, h, {"batch": 64}),
        verdict_key(g, h, {"batch": 32}),
        verdict_key(h, g, {"batch": 64}),
        verdict_key(g, g, {}),
    }
    assert len(keys) == 4  # another rewrite, or fed at other sizes: timed anew


def test_a_warm_run_whose_verdict_kept_the_original_exports_the_original_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steady_units: None
) -> None:
    """A cached verdict that kept the original stages the original once: the rewrite is never saved."""
    src, db = _two_branches(tmp_path), _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    settings = Settings(device="cpu", alpha=2.0, dims={"batch": 64})
    monkeypatch.setattr(guard.cost, "clearly_faster", lambda before, after: False)
    first = optimize(src, tmp_path / "a.onnx", db, settings=settings)
    assert first.cost["measured"]["kept_original"] and first.rules_applied == {}
    assert first.rejected is not None and first.rejected["rules"] and "timed end to end" in first.rejected["why"]
    saved = _count_saves(monkeypatch)
    again = optimize(src, tmp_path / "b.onnx", db, settings=settings)
    assert again.cost["measured"] == {**first.cost["measured"], "cached": True}
    assert len(saved) == 1 and again.rules_applied == {} and again.check is not None and again.check.ok
    assert again.nodes_after == again.nodes_before
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def _hardsigmoid_then_matmul(path: Path) -> Path:
    """x -> HardSigmoid -> MatMul: no shipped rule mentions HardSigmoid (tanh-GELU's spellings mention Tanh), and
    its unit reads nothing a rewrite makes."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("HardSigmoid", ["x"], ["t"]), helper.make_node("MatMul", ["t", "w"], ["y"])]
    io = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [16, 64]) for v in ("x", "y")]
    graph = helper.make_graph(nodes, "hardsigmoid-matmul", io[:1], io[1:], initializer=[w])
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_units_no_rewrite_touches_are_estimated_not_measured_unless_every_unit_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steady_units: None
) -> None:
    """A cold run measures only the units the search's choice hangs on: the HardSigmoid, which no rule of the
    shipped store touches, costs the original and every candidate alike, so it is estimated and only the MatMul
    measured; `--no-prior`, building a device's table, measures it too."""
    src = _hardsigmoid_then_matmul(tmp_path / "m.onnx")
    report = optimize(src, tmp_path / "o.onnx", store.DEFAULT_PATH, settings=Settings(device="cpu"))
    assert report.cost["profiled_units"] == 1 and report.cost["untouched_units"] == 1
    assert any("(1 kinds no rewrite touches, not measured)" in line for line in report.lines())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-cache"))
    report = optimize(src, tmp_path / "all.onnx", store.DEFAULT_PATH, settings=Settings(device="cpu", prior=False))
    assert report.cost["profiled_units"] == 2 and report.cost["untouched_units"] == 0
