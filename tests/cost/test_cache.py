"""The cost cache: keyed by device, read back by a second run, old caches still open, per user for the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import subst

from taso.cachedir import cost_cache
from taso.cost.calibration import Calibration
from taso.cost.model import CostModel
from taso.rules import store

from .graphs import CONV_CHAIN, with_weights


def test_cache_hit_on_second_run_and_device_key_respected(tmp_path: Path, cpu, calibration) -> None:
    g = with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    first = CostModel(cpu, db, calibration=calibration)
    a = first.graph_cost(g)
    assert first.measured == len(a.units) and a.estimated == 0 and a.total_ms > 0
    second = CostModel(cpu, store.open_store(tmp_path / "s.db"), calibration=calibration)
    b = second.graph_cost(g)
    assert second.measured == 0 and second.cached == len(b.units) and b.total_ms == a.total_ms
    other = replace(cpu, name="another CPU")
    third = CostModel(other, store.open_store(tmp_path / "s.db"), calibration=calibration)
    third.graph_cost(g)
    assert third.measured == len(a.units) and third.cached == 0
    refreshed = CostModel(cpu, store.open_store(tmp_path / "s.db"), refresh=True, calibration=calibration)
    refreshed.graph_cost(g)
    assert refreshed.measured == len(a.units)
    devices = {r["device"] for r in db["costs"].rows}
    assert devices == {cpu.key, other.key}


def test_a_store_calibrated_before_the_yardstick_was_kept_still_opens(tmp_path: Path, cpu) -> None:
    db = store.create(tmp_path / "old.db")
    db["devices"].insert(
        {"device": cpu.key, "run_ms": 0.01, "kernel_ms": 0.002, "gflops": 50.0, "gbps": 10.0, "measured_at": "then"},
        pk="device",
    )
    model = CostModel(cpu, db)
    assert model.calibration == Calibration(0.01, 0.002, 50.0, 10.0, 0.0)  # read back, not re-measured
    assert "reference_ms" in db["devices"].columns_dict


def test_profile_cli_caches_per_user(tmp_path: Path, bert_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --dim every dim is 1, and every unit is measured: at size 1, Range's length over Shape(input_ids)
    stayed unknown to shape inference, and 26 of BERT-tiny's 32 units were estimated."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["profile", bert_path, "--device", "cpu", "--json"]
    r = subst(*args)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["measured_now"] == first["distinct_units"] > 0 and first["estimated"] == 0
    assert first["measured_ms"] > 0 and first["predicted_ms"] > 0
    assert first["host_slowdown"] > 0  # the reference run timed beside the whole model, over the quick one
    r = subst(*args, "--dim", "batch=1", "--dim", "seq=1", "--no-measure-model")
    second = json.loads(r.stdout)  # the default sizes, named: the same units
    assert second["measured_now"] == 0 and second["from_cache"] == first["measured_now"]
    assert (tmp_path / "cache" / "subst" / "costs.db").is_file()
    r = subst("profile", bert_path, "--dim", "seq")
    assert r.returncode == 2 and "NAME=SIZE" in r.stderr


def test_profile_measures_nothing_past_its_measure_limit(
    tmp_path: Path, bert_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["profile", bert_path, "--device", "cpu", "--measure-limit", "0", "--no-measure-model"]
    r = subst(*args, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["measured_now"] == 0 and out["estimated"] == out["units"] > 0 and out["estimated_calibration"]
    cache, _ = cost_cache()  # a fresh cache, not calibrated: a later run does it
    assert "devices" not in cache.table_names() or cache["devices"].count == 0
    assert "device calibration estimated" in subst(*args).stdout
