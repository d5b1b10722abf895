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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", type=Path, help="the table to add to, then the newer tables")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument(
        "--unscaled", action="store_true", help="take the newer tables' units as they are (cold-run exports)"
    )
    args = ap.parse_args()
    base, *newer = (json.loads(p.read_text()) for p in args.tables)
    merged, added = merge(base, newer, args.unscaled)
    for path, (n, scale) in zip(args.tables[1:], added):
        print(f"{path}: {n} units added, scaled by {scale:.3f}")
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    tmp.replace(args.output)
    print(f"wrote {args.output}: {len(merged['costs'])} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
