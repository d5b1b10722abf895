"""The CI regression over the model zoo: run it, and show it fails when something regresses."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from conftest import ROOT, bounded

sys.path.insert(0, str(ROOT / "models"))

import regress  # noqa: E402

CI_MODELS = 7
"""CI's bounded form: the zoo's fastest models by their baseline run (models/baseline.json), so many whatever the
store makes each take (SUBST_FULL=1 or `make zoo` runs every model; the whole zoo takes about three minutes on
the 2-core machine)."""


@pytest.fixture(scope="module")
def baseline() -> dict:
    return json.loads(regress.BASELINE.read_text())


@pytest.fixture(scope="module")
def result(baseline: dict) -> dict:
    # an entry missing from the baseline runs, so that the regression names it
    seconds = {n: baseline["models"].get(n, {}).get("seconds", 0) for n in regress.ZOO}
    names = bounded(sorted(regress.ZOO, key=seconds.__getitem__), CI_MODELS)
    return regress.run(names)


@pytest.mark.slow
def test_zoo_models_optimize_check_and_hold_their_baseline(result: dict, baseline: dict) -> None:
    assert len(result["models"]) >= 4
    assert all(r["check_ok"] for r in result["models"].values())
    assert regress.regressions(result, baseline) == []


def test_a_worse_cost_ratio_fails(result: dict, baseline: dict) -> None:
    name = next(iter(result["models"]))
    planted = copy.deepcopy(baseline)
    planted["models"][name]["cost_ratio"] = result["models"][name]["cost_ratio"] * 0.9  # the past was better
    assert any(f"{name}: predicted cost ratio" in r for r in regress.regressions(result, planted))


def test_a_changed_verdict_or_failed_check_fails(result: dict, baseline: dict) -> None:
    planted = copy.deepcopy(baseline)
    planted["store"]["digest"] = "0" * 64
    assert any("store verdicts changed" in r for r in regress.regressions(result, planted))
    broken = copy.deepcopy(result)
    name = next(iter(broken["models"]))
    broken["models"][name]["check_ok"] = False
    assert any(f"{name}: check failed" in r for r in regress.regressions(broken, baseline))


def _regress(monkeypatch: pytest.MonkeyPatch, result: dict, *args: object) -> int:
    """`python models/regress.py ARGS` (`make zoo`), run in this process: its exit code, which
    `sys.exit(main())` passes on (a process of its own cost some 3 s of CPU in imports and the store's rules).
    Its `run` gives the module's run of the models it names (`result`, the same call): optimizing them again
    cost each test 9 to 19 s of CPU, and what these tests check is what main makes of a run."""
    monkeypatch.setattr(sys, "argv", ["regress.py", *map(str, args)])
    monkeypatch.setattr(
        regress, "run", lambda names: {"store": result["store"], "models": {n: result["models"][n] for n in names}}
    )
    return regress.main()


def test_make_zoo_exits_1_on_a_planted_regression(
    tmp_path: Path,
    result: dict,
    baseline: dict,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = next(iter(result["models"]))
    planted = copy.deepcopy(baseline)
    planted["models"][name]["cost_ratio"] *= 0.5
    (tmp_path / "baseline.json").write_text(json.dumps(planted))
    assert _regress(monkeypatch, result, "--only", name, "--baseline", tmp_path / "baseline.json") == 1
    assert f"REGRESSION {name}" in capsys.readouterr().err
    assert _regress(monkeypatch, result, "--only", name, "--baseline", regress.BASELINE) == 0, capsys.readouterr().err


def test_update_of_some_entries_keeps_the_others(
    tmp_path: Path,
    result: dict,
    baseline: dict,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = next(iter(result["models"]))
    other = next(n for n in baseline["models"] if n not in result["models"])
    planted = copy.deepcopy(baseline)
    del planted["models"][name]
    planted["models"][other]["seconds"] = -1.0  # marks the entry that must be kept as it was
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(planted))
    assert _regress(monkeypatch, result, "--update", "--only", name, "--baseline", path) == 0, capsys.readouterr().err
    written = json.loads(path.read_text())["models"]
    assert set(written) == set(baseline["models"]) and written[other]["seconds"] == -1.0
    assert written[name]["cost_ratio"] == pytest.approx(baseline["models"][name]["cost_ratio"])
