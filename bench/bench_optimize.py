"""End-to-end latency of `subst optimize` outputs beside onnxsim's and onnxslim's, on one device, interleaved.

    PYTHONPATH=. python bench/bench_optimize.py --device cuda --out $OUT      # on the GPU machine
    PYTHONPATH=. python bench/bench_optimize.py --device cpu --models squeezenet --time-limit 10

For each zoo model (static shapes; `models/build.py`): optimize with the shipped store's proved rules (costs
measured on --device, cached in a cost cache of its own under --out: XDG_CACHE_HOME=--out/cache), then time original, optimized, onnxsim and
onnxslim outputs in rounds (and the original once more as variant "again": its ratio is the run's noise on an
unchanged model), each round visiting every variant once in an order that changes from round to round
(`taso.cost.profiler.visiting_order`), and report each variant's median over rounds and its speed-up, and the cost
model's predicted latency of the original against its measured one (all rounds, and the host's quick-mode
rounds, as bench_cost.py reads them). Prints a table;
writes bench/results/<today>/optimize-<device>.json (``--result``) and, from every unit measured on the way,
reference_costs.json (the table CI costs with; merge it with models/merge_costs.py) under --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import layout  # noqa: E402
import peers  # noqa: E402

from build import ZOO, zoo_files  # noqa: E402
from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cachedir import cost_cache  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402
from taso.rules import store  # noqa: E402


def _error(predicted: float | None, measured: float | None) -> float | None:
    """The prediction's error in percent of the measurement."""
    return None if predicted is None or measured is None else 100 * (predicted - measured) / measured


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default=",".join(n for n in ZOO if not n.endswith("_dyn")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--measure-limit", type=float, default=600.0, help="seconds a search may measure new units")
    ap.add_argument("--store", type=Path, default=store.DEFAULT_PATH)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument(
        "--result", type=Path, help="the result file (default: bench/results/<today>/optimize-<device>.json)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("optimize", device.key)
    os.environ["XDG_CACHE_HOME"] = str(args.out / "cache")  # a fresh --out measures afresh, as a copied store did
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name, path in zoo_files(args.models, tmp):
            out = tmp / f"{name}.subst.onnx"
            t0 = time.perf_counter()
            report = optimize(
                path,
                out,
                args.store,
                settings=Settings(
                    alpha=args.alpha, time_limit=args.time_limit, device=args.device, measure_limit=args.measure_limit
                ),
            )
            seconds = time.perf_counter() - t0
            # the original timed a second time, as a variant of its own: how far an unchanged model moves in
            # this run, the noise band every other ratio is read against
            variants = {
                "original": path,
                "again": path,
                "subst": out,
                **peers.peers(path, tmp, name, only=("onnxsim", "onnxslim")),
            }
            graphs = [onnx_io.load_model(p) for p in variants.values()]
            timings = dict(
                zip(variants, cost.interleaved_timings(list(variants.values()), graphs, device, args.rounds))
            )
            times = {k: statistics.median(t.median_ms for t in ts) for k, ts in timings.items()}
            # the cost model's prediction of the original beside its measurement (issue 5's check, free here):
            # predictions are at the host's quick speed, so compare with the rounds the host ran quick in too
            model = cost.CostModel(device, cost_cache()[0])  # what the search cached and logged
            quick_rounds = profiler.in_quick_mode(timings["original"], model.quick_reference_ms())
            predicted = report.cost["before_ms"] if report.cost else None
            row = {
                "model": name,
                "rules": report.rules_applied,
                "predicted_speedup": report.cost["before_ms"] / report.cost["after_ms"] if report.cost else 1.0,
                "optimize_s": seconds,
                "search_s": report.search.get("seconds", 0.0),
                "check": report.check.summary() if report.check else None,
                "ms": times,
                "speedup": {k: times["original"] / v for k, v in times.items()},
                "rounds_ms": {k: [t.median_ms for t in ts] for k, ts in timings.items()},
                "rounds_reference_ms": [t.reference_ms for t in timings["original"]],
                "predicted_ms": predicted,
                "error_pct": _error(predicted, times["original"]),
                "quick_rounds": len(quick_rounds),
                "error_quick_pct": _error(predicted, statistics.median(quick_rounds) if quick_rounds else None),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            # written after every model, so a run stopped at a time limit still leaves what it measured
            layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
            units = cost.export_reference(model, str(args.out / "reference_costs.json"))
            print(f"reference table: {units} measured units", flush=True)
    columns = ["again", "subst", "onnxsim", "onnxslim"]
    print(f"\ndevice {device.key}")
    print(
        f"{'model':<14}{'orig ms':>9}"
        + "".join(f"{p + ' x':>12}" for p in columns)
        + f"{'pred x':>8}{'opt s':>7}  rules"
    )
    for r in rows:
        cells = "".join(f"{r['speedup'][p]:>12.3f}" if p in r["speedup"] else f"{'-':>12}" for p in columns)
        rules = ", ".join(f"{k} x{v['count']}" for k, v in sorted(r["rules"].items())) or "none"
        print(
            f"{r['model']:<14}{r['ms']['original']:>9.3f}{cells}{r['predicted_speedup']:>8.3f}{r['optimize_s']:>7.1f}  {rules}"
        )
    errors = [(r["model"], r["error_pct"], r["error_quick_pct"]) for r in rows if r.get("error_pct") is not None]
    if errors:
        print("\ncost model, predicted original vs measured: " + ", ".join(f"{m} {e:+.1f} %" for m, e, _ in errors))
        within = sum(abs(q if q is not None else e) <= 20 for _, e, q in errors)
        print(f"within 20 % (quick-mode rounds where any): {within} of {len(errors)}")
    for p in columns:
        values = [r["speedup"][p] for r in rows if p in r["speedup"]]
        if values:
            print(f"geomean {p}: {math.exp(sum(map(math.log, values)) / len(values)):.3f}x over {len(values)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
