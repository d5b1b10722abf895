"""The optimize pipeline (`taso.optimize.pipeline`): its passes in order, what each adds to the report, and the
settings that bound its measuring."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import subst
from test_optimize import CONCAT_OF_SPLIT, MERGE_MATMULS, RELU_OF_SPLIT, _mlp, _store, _two_branches

from taso import cost
from taso.cachedir import cost_cache
from taso.cost import profiler
from taso.optimize import PASSES, Settings, optimize
from taso.rules import Rule


def test_the_passes_run_in_order_and_the_report_times_them_in_that_order(tmp_path: Path) -> None:
    """The progress a user sees and the report's account of the seconds follow `PASSES`: import and the check's
    inputs, the rules and the rewrites that need no cost, the cost model and the search, export, check (costs
    estimated: no unit is measured)."""
    db, stages = _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT), []
    settings = Settings(device="estimate", alpha=2.0, dims={"batch": 64})
    report = optimize(
        _two_branches(tmp_path), tmp_path / "o.onnx", db, settings=settings, progress=lambda s, *_: stages.append(s)
    )
    assert report.rules_applied and report.nodes_after < report.nodes_before
    shown = list(dict.fromkeys(stages))
    assert shown == [
        "importing",
        "reading rules",
        "preparing the cost model",
        "searching regions",
        "exporting",
        "checking",
    ]
    assert list(report.seconds) == ["import", "check", "start-up", "profiling", "search", "export", "total"]
    assert [p.shows for p in PASSES if p.shows] == [
        "importing",
        "reading rules",
        "preparing the cost model",
        "exporting",
        "checking",
    ]


def test_a_given_rewrite_takes_the_place_of_the_rules_and_the_costs(tmp_path: Path) -> None:
    """``rewrite`` replaces the passes from reading the rules to predicting the gain: nothing of theirs runs or
    is reported, and the export and the check still do."""
    db, stages = _store(tmp_path, MERGE_MATMULS), []
    report = optimize(
        _mlp(tmp_path),
        tmp_path / "o.onnx",
        db,
        rewrite=lambda g: (g, {"nothing": 1}),
        progress=lambda s, *_: stages.append(s),
    )
    assert list(dict.fromkeys(stages)) == ["importing", "exporting", "checking"]
    assert report.rules_applied == {"nothing": {"name": "nothing", "count": 1}}
    assert report.cost == {} and report.search == {} and report.check is not None and report.check.ok
    assert list(report.seconds) == ["import", "check", "export", "total"]


def test_unproved_rules_are_never_applied(tmp_path: Path) -> None:
    candidate = Rule(MERGE_MATMULS.src, MERGE_MATMULS.dst, name="merge-matmuls", status="candidate")
    report = optimize(
        _mlp(tmp_path), tmp_path / "o.onnx", _store(tmp_path, candidate), settings=Settings(device="estimate")
    )
    assert report.rules_applied == {} and report.nodes_after == report.nodes_before


def test_cli_reports_rules_and_cost(tmp_path: Path) -> None:
    db = _store(tmp_path, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    r = subst(
        "optimize",
        _two_branches(tmp_path),
        "-o",
        tmp_path / "o.onnx",
        "--store",
        db,
        "--device",
        "estimate",
        "--alpha",
        "2",
        "--dim",
        "batch=64",
        "--json",
        "--report",
        tmp_path / "report.json",
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["rules_applied"] and report["cost"]["after_ms"] < report["cost"]["before_ms"]
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_the_measure_limit_bounds_a_fresh_caches_calibration(tmp_path: Path, own_cache: Path) -> None:
    """A cost cache that has never seen this device calibrates it first, a measurement like any other: with no
    seconds to measure, the defaults stand in, nothing is stored, and the report says so."""
    db_path = _store(tmp_path, RELU_OF_SPLIT)
    report = optimize(
        _two_branches(tmp_path), tmp_path / "o.onnx", db_path, settings=Settings(device="cpu", measure_limit=0.0)
    )
    assert report.cost["estimated_calibration"] and report.search["measured_units"] == 0
    assert any(x.startswith("cost") and "device calibration estimated" in x for x in report.lines())
    assert cost_cache()[0]["devices"].count == 0


def test_the_measure_limit_bounds_profiling_the_models_own_units(tmp_path: Path, own_cache: Path) -> None:
    """With no seconds to measure, the model's own units are estimated too (they were measured whatever the
    limit: DenseNet-121 over 5 min on the CPU), and every stage's time is reported. The cost cache is cold
    (`own_cache`), calibrated as below."""
    db_path = _store(tmp_path, RELU_OF_SPLIT)  # proved, and matches nothing in the model
    cpu = profiler.pick_device("cpu")
    calibrated = {"run_ms": 0.01, "kernel_ms": 0.002, "gflops": 50.0, "gbps": 10.0, "reference_ms": 0.05}
    cache, _ = cost_cache()
    cache["devices"].upsert({"device": cpu.key, **calibrated, "measured_at": "then"}, pk="device")
    stages: list[str] = []
    settings = Settings(device="cpu", measure_limit=0.0)
    out = tmp_path / "o.onnx"
    report = optimize(_two_branches(tmp_path), out, db_path, settings=settings, progress=lambda s, *_: stages.append(s))
    assert report.cost["estimated_units"] > 0 and report.search["measured_units"] == 0
    assert cost_cache()[0]["costs"].count == 0  # nothing measured, so nothing cached
    assert {"reading rules", "measuring units", "searching regions", "checking"} <= set(stages)
    assert {"import", "start-up", "profiling", "search", "export", "check", "total"} <= set(report.seconds)


def test_estimated_costs_are_analytic_whatever_the_cost_cache_holds(tmp_path: Path, own_cache: Path) -> None:
    """`--device estimate` reads nothing from the per-user cost cache: it holds what this machine measured, and an
    estimate is the same on every machine."""
    db_path, settings = _store(tmp_path, RELU_OF_SPLIT), Settings(device="estimate")
    first = optimize(_two_branches(tmp_path), tmp_path / "a.onnx", db_path, settings=settings)
    key = cost.CostModel(profiler.pick_device("cpu"), None, measure=False).key
    slow = {"run_ms": 50.0, "kernel_ms": 20.0, "gflops": 0.001, "gbps": 0.001, "reference_ms": 0.05}
    cost_cache()[0]["devices"].upsert({"device": key, **slow, "measured_at": "then"}, pk="device")
    again = optimize(_two_branches(tmp_path), tmp_path / "b.onnx", db_path, settings=settings)
    assert again.cost == first.cost
