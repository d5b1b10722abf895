"""The per-user cost cache's tables (`taso.cachedir.cost_cache`): each device's calibration, its unit costs, the
host speed logged beside every measurement, and the end-to-end verdicts on pairs of models.
"""

from __future__ import annotations

import time

import sqlite_utils


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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
