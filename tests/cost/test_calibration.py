"""A device's calibration: the first measurement a fresh cache makes, bounded by the measure limit."""

from __future__ import annotations

from pathlib import Path

from taso.cost.calibration import DEFAULT_CALIBRATION
from taso.cost.model import CostModel
from taso.rules import store

from .graphs import CONV_CHAIN, with_weights


def test_the_measure_limit_bounds_a_fresh_store_s_calibration(tmp_path: Path, cpu) -> None:
    """Calibration is the first measurement a fresh store makes: with no seconds to measure it is not made (the
    defaults stand in, stored nowhere, and say so), and its seconds count against the limit the units share."""
    g = with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    none = CostModel(cpu, db, measure_limit=0.0)
    a = none.graph_cost(g)
    assert none.calibration_estimated and none.calibration == DEFAULT_CALIBRATION
    assert none.measuring_s == 0 and none.measured == 0 and a.estimated == len(a.units)
    assert db["devices"].count == 0 and db["costs"].count == 0
    spent = CostModel(cpu, store.open_store(tmp_path / "s.db"), measure_limit=1e-9)  # calibration spends it
    b = spent.graph_cost(g)
    assert not spent.calibration_estimated and spent.measuring_s > 0 and db["devices"].count == 1
    assert spent.measured == 0 and b.estimated == len(b.units)
