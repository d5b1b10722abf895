"""Add the units of newer reference tables to the committed one (taso/cost/reference_costs.json, what CI costs with).

    python models/merge_costs.py taso/cost/reference_costs.json bench-out/reference_costs.json ... -o taso/cost/reference_costs.json

Every table holds unit costs at its host's quick speed, yet hosts differ between leases, so each newer table is
scaled onto the first by the median ratio over the units both hold (0.97 to 1.08 for the H100 leases of
2026-11-24) and gives only the units the first lacks: the first table's values, calibration and device stand.
Then `make zoo-update`, since the predicted ratios move.

Tables exported from cold runs that costed with the first (`bench/bench_cold.py --export-costs`) share no unit
with it, by construction: a run measures only what the prior lacks. There is no overlap to scale on, so
``--unscaled`` takes their units as they are: each export is already at its host's quick speed, as a cold run
combines the prior with what it measures.

    python models/merge_costs.py --unscaled taso/cost/reference_costs.json units/*.json -o taso/cost/reference_costs.json

A new device's whole table (cold runs with ``--no-prior``, every unit measured there: bench/h200-table.sh) comes
from exports that are all of one device, none of them the reference for the rest: ``--same-device`` costs every
unit at the median of the exports that hold it, and the calibration at the median of theirs, and refuses exports
of different devices.

    python models/merge_costs.py --same-device out/costs/*.json -o taso/cost/reference_costs_h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def merge(base: dict, newer: list[dict], unscaled: bool = False) -> tuple[dict, list[tuple[int, float]]]:
    """``base`` with the units of each ``newer`` table it lacks, scaled (by 1 where ``unscaled``); and per
    table (units added, scale)."""
    costs = dict(base["costs"])
    added = []
    for table in newer:
        shared = [k for k in table["costs"] if k in costs]
        if not shared and not unscaled:
            raise ValueError("a table shares no unit with the merged one: no scale to put it on (see --unscaled)")
        scale = 1.0 if unscaled else statistics.median(costs[k] / table["costs"][k] for k in shared)
        new = {k: ms * scale for k, ms in table["costs"].items() if k not in costs}
        costs.update(new)
        added.append((len(new), scale))
    return {**base, "costs": dict(sorted(costs.items()))}, added


def merge_same_device(tables: list[dict]) -> dict:
    """One table of ``tables``, all measured on one device: each unit at the median of the tables holding it,
    each calibration field at the median over the tables that measured anything (one that measured nothing may
    hold the default calibration), the first's device, and the labels of them all (what
    `taso.cost.tables.fit_scales` fits a scale by class on). ValueError where two tables name different devices."""
    devices = {(t["device"]["provider"], t["device"]["name"]) for t in tables}
    if len(devices) != 1:
        raise ValueError(f"tables of {len(devices)} devices ({', '.join(sorted(n for _, n in devices))}); one expected")
    measured = [t for t in tables if t["costs"]] or tables
    units: dict[str, list[float]] = {}
    for table in tables:
        for k, ms in table["costs"].items():
            units.setdefault(k, []).append(ms)
    calibration = {f: statistics.median(t["calibration"][f] for t in measured) for f in measured[0]["calibration"]}
    costs = {k: statistics.median(v) for k, v in sorted(units.items())}
    labels = {k: label for t in tables for k, label in t.get("labels", {}).items()}
    return {
        "device": tables[0]["device"],
        "calibration": calibration,
        "costs": costs,
        "labels": dict(sorted(labels.items())),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", type=Path, help="the table to add to, then the newer tables")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument(
        "--unscaled", action="store_true", help="take the newer tables' units as they are (cold-run exports)"
    )
    ap.add_argument(
        "--same-device",
        action="store_true",
        help="the tables are all of one device (a lease's --no-prior exports): each unit at their median",
    )
    args = ap.parse_args()
    try:
        tables = [json.loads(p.read_text()) for p in args.tables]
        if args.same_device:
            merged = merge_same_device(tables)
        else:
            merged, added = merge(tables[0], tables[1:], args.unscaled)
            for path, (n, scale) in zip(args.tables[1:], added):
                print(f"{path}: {n} units added, scaled by {scale:.3f}")
    except (OSError, ValueError, KeyError, TypeError) as e:  # a file that is no JSON is a ValueError too
        print(f"merge_costs: {e}"[:300], file=sys.stderr)
        return 2
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    tmp.replace(args.output)
    print(f"wrote {args.output}: {len(merged['costs'])} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
