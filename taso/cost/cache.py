"""The per-user cost cache's tables (`taso.cachedir.cost_cache`): each device's calibration, its unit costs, the
host speed logged beside every measurement, and the end-to-end verdicts on pairs of models. Every row is filed
under a key (``key``: `taso.cost.CostModel.key`, the device and how it was timed); this module alone writes SQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

import sqlite_utils

from taso.cost.calibration import Calibration


def create_tables(db: sqlite_utils.Database) -> None:
    db["devices"].create(
        {
            "device": str,
            "run_ms": float,
            "kernel_ms": float,
            "gflops": float,
            "gbps": float,
            "reference_ms": float,
            "measured_at": str,
        },
        pk="device",
        if_not_exists=True,
    )
    if "reference_ms" not in db["devices"].columns_dict:  # stores made before the yardstick was kept
        db["devices"].add_column("reference_ms", float)
    db["costs"].create(
        {"device": str, "unit": str, "label": str, "ms": float, "estimated": int, "note": str, "measured_at": str},
        pk=("device", "unit"),
        if_not_exists=True,
    )
    db["host_speed"].create({"device": str, "reference_ms": float, "measured_at": str}, if_not_exists=True)
    db["host_speed"].create_index(["device"], if_not_exists=True)
    db["verdicts"].create(
        {"device": str, "pair": str, "before_ms": float, "after_ms": float, "kept_original": int, "measured_at": str},
        pk=("device", "pair"),
        if_not_exists=True,
    )
    if "detail" not in db["verdicts"].columns_dict:  # caches made before a verdict carried its noise band
        db["verdicts"].add_column("detail", str)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def calibration(db: sqlite_utils.Database, key: str) -> Calibration | None:
    """The device's calibration as stored (None where it was never calibrated)."""
    row = next(db["devices"].rows_where("device = ?", [key]), None)
    if row is None:
        return None
    return Calibration(row["run_ms"], row["kernel_ms"], row["gflops"], row["gbps"], row["reference_ms"] or 0.0)


def keep_calibration(db: sqlite_utils.Database, key: str, cal: Calibration) -> None:
    db["devices"].upsert({"device": key, **cal.__dict__, "measured_at": now()}, pk="device")


def log_host(db: sqlite_utils.Database, key: str, reference_ms: float) -> None:
    """Log one reference run timed beside a measurement: how quick the host was then."""
    db["host_speed"].insert({"device": key, "reference_ms": reference_ms, "measured_at": now()})


def host_log(db: sqlite_utils.Database, key: str, limit: int) -> list[float]:
    """The device's latest ``limit`` reference runs, the latest first."""
    rows = db["host_speed"].rows_where("device = ?", [key], order_by="rowid desc", limit=limit, select="reference_ms")
    return [r["reference_ms"] for r in rows]


def cost(db: sqlite_utils.Database, key: str, unit: str) -> dict | None:
    """The unit's row (ms, estimated, label, note) as stored, or None."""
    return next(db["costs"].rows_where("device = ? AND unit = ?", [key, unit]), None)


def keep_costs(db: sqlite_utils.Database, key: str, costs: Sequence[tuple[str, str, float, bool, str]]) -> None:
    """Keep unit costs (unit, label, ms, estimated, note) in one transaction: a search's cold run measures an
    expansion's new units side by side, and writing each in one of its own was a fifth of what it spent besides
    measuring (ResNet-50 on the 2-core CPU)."""
    at = now()
    rows = [
        {
            "device": key,
            "unit": u,
            "label": label,
            "ms": ms,
            "estimated": int(estimated),
            "note": note,
            "measured_at": at,
        }
        for u, label, ms, estimated, note in costs
    ]
    if rows:
        db["costs"].upsert_all(rows, pk=("device", "unit"))


def measured_costs(db: sqlite_utils.Database, key: str) -> dict[str, float]:
    """Every unit cost measured (not estimated) on the device, by unit key, in key order."""
    rows = db["costs"].rows_where("device = ? AND estimated = 0", [key], order_by="unit")
    return {r["unit"]: r["ms"] for r in rows}


def measured_labels(db: sqlite_utils.Database, key: str) -> dict[str, str]:
    """The label of every unit measured on the device (`measured_costs`), by unit key, in key order."""
    rows = db["costs"].rows_where("device = ? AND estimated = 0", [key], order_by="unit", select="unit, label")
    return {r["unit"]: r["label"] for r in rows}


def verdict(db: sqlite_utils.Database, key: str, pair: str) -> dict[str, object] | None:
    """What timing a pair of models end to end found (`record_verdict`), or None: also where the row has no
    detail, a verdict taken before the guard measured its noise (it may have been decided by that noise)."""
    row = next(db["verdicts"].rows_where("device = ? AND pair = ?", [key, pair]), None)
    if row is None or not row["detail"]:
        return None
    kept = {"kept_original": True} if row["kept_original"] else {}
    return {"before_ms": row["before_ms"], "after_ms": row["after_ms"], **json.loads(row["detail"]), **kept}


def record_verdict(db: sqlite_utils.Database, key: str, pair: str, measured: Mapping[str, object]) -> None:
    """Keep a verdict with all it says (noise band, rounds, what it was measured on) and when it was taken."""
    detail = {k: v for k, v in measured.items() if k not in ("before_ms", "after_ms", "kept_original")}
    db["verdicts"].upsert(
        {
            "device": key,
            "pair": pair,
            "before_ms": measured["before_ms"],
            "after_ms": measured["after_ms"],
            "kept_original": int(bool(measured.get("kept_original"))),
            "detail": json.dumps(detail, sort_keys=True),
            "measured_at": now(),
        },
        pk=("device", "pair"),
    )
