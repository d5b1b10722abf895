"""How robust is the search to noise in unit costs? Optimize with a reference cost table whose every unit cost is
multiplied by its own log-normal factor, once per seed, and report what each search found.

    PYTHONPATH=. python bench/bench_perturb.py --models squeezenet --sigma 0.15 --seeds 8

Runs on the CPU: nothing is measured (the table is `taso/cost/reference_costs.json` unless --costs says
otherwise). A search whose result swings with small cost noise is one a GPU run will find only sometimes.
``--sigma 0 --seeds 1 --time-limit 10`` is `subst optimize` with its defaults and the table as it is: the
search time per model with a warm cost cache. Prints a table (predicted speed-up, graphs expanded, search and
optimize seconds, rules per seed); writes bench/results/<today>/perturb-cpu.json (``--result``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import layout  # noqa: E402

from build import zoo_files  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402
from taso.rules import store  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="squeezenet")
    ap.add_argument("--sigma", type=float, default=0.15, help="log-normal sigma of each unit's cost factor")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--costs", type=Path, default=ROOT / "taso" / "cost" / "reference_costs.json")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument(
        "--result", type=Path, help="the result file (default: bench/results/<today>/perturb-<device>.json)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = args.result or layout.result_path("perturb", "cpu")
    table = json.loads(args.costs.read_text())
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name, path in zoo_files(args.models, tmp):
            for seed in range(args.seeds):
                rng = np.random.default_rng(seed)
                noisy = {k: v * float(rng.lognormal(0.0, args.sigma)) for k, v in table["costs"].items()}
                costs = tmp / f"costs-{seed}.json"
                costs.write_text(json.dumps({**table, "costs": noisy}))
                settings = Settings(costs=str(costs), time_limit=args.time_limit)
                t0 = time.perf_counter()
                report = optimize(path, tmp / f"{name}.out.onnx", store.DEFAULT_PATH, settings=settings)
                rows.append(
                    {
                        "model": name,
                        "seed": seed,
                        "predicted_speedup": report.cost["before_ms"] / report.cost["after_ms"],
                        "expanded": report.search.get("expanded", 0),
                        "search_s": report.search.get("seconds", 0.0),
                        "optimize_s": time.perf_counter() - t0,
                        "rules": report.rules_applied,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    layout.write(result, {"meta": layout.meta("cpu"), "sigma": args.sigma, "rows": rows})
    print(
        f"\nsigma {args.sigma}\n{'model':<14}{'seed':>5}{'pred x':>8}{'expanded':>9}{'search s':>9}{'opt s':>7}  rules"
    )
    for r in rows:
        rules = ", ".join(f"{k} x{v['count']}" for k, v in sorted(r["rules"].items())) or "none"
        print(
            f"{r['model']:<14}{r['seed']:>5}{r['predicted_speedup']:>8.3f}{r['expanded']:>9}"
            f"{r['search_s']:>9.1f}{r['optimize_s']:>7.1f}  {rules}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
