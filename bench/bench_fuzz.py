"""The differential fuzz of `optimize --no-check` in full (issue 45): ``--count`` random models (tests/fuzz_models.py,
static and symbolic dims) through `taso.optimize` with the shipped store and cost table and the check off, each
result run in onnxruntime beside its original at two sets of sizes. The target: 0 wrong, 0 crashes.
tests/test_fuzz.py runs the first 60 seeds of the same models in CI.

Prints the counts and each failing seed; the result (counts, failures, seconds, with the date, machine, commit and
command) goes to bench/results/<today>/fuzz-cpu.json (``--result``). A failing seed replays alone with
``--start SEED --count 1``.

    nice .venv/bin/python bench/bench_fuzz.py --count 2000 --workers 2
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

import fuzz_models  # noqa: E402
import layout  # noqa: E402

from taso.search import rulecache  # noqa: E402


def _worker() -> None:
    rulecache.proved_rules = fuzz_models.reading_rules_once()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=int, default=0, help="the first seed")
    ap.add_argument("--count", type=int, default=2000, help="models drawn, seeds start..start+count-1")
    ap.add_argument("--workers", type=int, default=2, help="processes trying models at once")
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/fuzz-cpu.json)")
    args = ap.parse_args()
    meta = layout.meta()
    seeds = range(args.start, args.start + args.count)
    t0 = time.perf_counter()
    counts: Counter[str] = Counter()
    failures = []
    with ProcessPoolExecutor(args.workers, initializer=_worker) as pool:
        for seed, (outcome, how) in zip(seeds, pool.map(fuzz_models.trial, seeds, chunksize=4)):
            counts[outcome] += 1
            if outcome != "ok":
                failures.append({"seed": seed, "outcome": outcome, "detail": how})
                print(f"seed {seed}: {outcome}: {how}", flush=True)
    seconds = time.perf_counter() - t0
    print(f"{args.count} models in {seconds:.0f} s: {dict(counts)}")
    record = {
        "meta": meta,
        "seeds": [args.start, args.start + args.count - 1],
        "count": args.count,
        "ok": counts["ok"],
        "wrong": counts["wrong"],
        "crashes": counts["crash"],
        "invalid": counts["invalid"],
        "seconds": round(seconds, 1),
        "workers": args.workers,
        "failures": failures,
    }
    layout.write(args.result or layout.result_path("fuzz", "cpu"), record)


if __name__ == "__main__":
    main()
