"""The host's drifting speed: measurements scaled to the calibration's host, reports at the quick host."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from taso.cost.host import HOST_ELASTICITY, HOST_LOG, QUICK_QUANTILE, to_calibrated_host
from taso.cost.measure import measure_marginal
from taso.cost.model import CostModel
from taso.cost.unit import unit_graph, units
from taso.rules import store

from .graphs import CONV_CHAIN, with_weights


def test_unit_costs_are_scaled_to_the_host_speed_of_the_calibration(cpu, calibration) -> None:
    assert calibration.reference_ms > 0  # calibrate keeps the quickest reference run it saw
    g = with_weights(
        "graph(%x: float32[256,256], %w: float32[256,256] weight):\n"
        "  %y = MatMul(%x, %w) : float32[256,256]\n  return %y"
    )
    (ug,) = (unit_graph(g, u) for u in units(g))
    ms, timing = measure_marginal(ug, cpu, calibration.run_ms)
    assert timing.reference_ms is not None and timing.reference_ms > 0
    as_calibrated = to_calibrated_host(ms, timing, calibration)
    e = HOST_ELASTICITY
    assert as_calibrated == pytest.approx(ms * (calibration.reference_ms / timing.reference_ms) ** e) and ms > 0
    # a calibration taken on a host 50x slower: the same unit, measured now, costs as on that host, less the
    # part of it the GPU spends, which the host's speed does not move
    slow_host = to_calibrated_host(ms, timing, replace(calibration, reference_ms=50 * calibration.reference_ms))
    assert as_calibrated * 50**e == pytest.approx(slow_host) and slow_host < 50 * as_calibrated


def test_reports_are_at_the_hosts_quick_speed(tmp_path: Path, cpu, calibration, timed: list[int]) -> None:
    g = with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    model = CostModel(cpu, db, calibration=calibration)
    measured = model.graph_cost(g)
    logged = [r["reference_ms"] for r in db["host_speed"].rows_where("device = ?", [model.key])]
    assert len(logged) == len(timed) > 0 and model.measured > 0  # every measurement logs how quick the host was
    quickest_tenth = sorted(logged)[int(QUICK_QUANTILE * (len(logged) - 1))]
    assert model.host_slowdown() == pytest.approx(quickest_tenth / calibration.reference_ms)
    assert model.host_scale() == pytest.approx(model.host_slowdown() ** HOST_ELASTICITY)

    def log(ms: float, times: int, device: str = model.key) -> None:
        db["host_speed"].insert_all([{"device": device, "reference_ms": ms, "measured_at": "t"}] * times)

    log(3 * calibration.reference_ms, HOST_LOG)  # a day on a host 3x slower than at calibration
    log(calibration.reference_ms / 10, HOST_LOG, device="another GPU")  # not this device's
    later = CostModel(cpu, store.open_store(tmp_path / "s.db"), calibration=calibration)
    again = later.graph_cost(g)
    assert later.measured == 0 and again.total_ms == measured.total_ms  # what a search compares stays put
    assert later.host_slowdown() == pytest.approx(3.0)
    k = 3.0**HOST_ELASTICITY  # costs move by the slowdown to the power HOST_ELASTICITY, not in full
    quick = later.at_quick_host(again)
    assert quick.total_ms == pytest.approx(k * again.total_ms)
    assert [u.ms for u in quick.units] == pytest.approx([k * u.ms for u in again.units])
    slow, quick_mode = int(0.7 * HOST_LOG), HOST_LOG - int(0.7 * HOST_LOG)
    log(2 * calibration.reference_ms, quick_mode)  # a bimodal host: mostly slow, at times 2x, not 3x
    log(3 * calibration.reference_ms, slow)
    assert later.host_slowdown() == pytest.approx(2.0)  # its quick mode, not the median
    log(calibration.reference_ms, HOST_LOG)  # then as quick as at calibration: the latest runs count
    assert later.host_slowdown() == pytest.approx(1.0) and later.host_scale() == pytest.approx(1.0)
