"""End-to-end latency of the corpus of real exporter output (models/corpus/) before and after `subst optimize`.

    PYTHONPATH=. python3 bench/bench_corpus.py --device cuda --result $OUT/corpus-h100.json   # on the GPU machine
    PYTHONPATH=. python3 bench/bench_corpus.py --device cpu --models squeezenet1_1_ts --rounds 2

Each model is optimized as the regression optimizes it (models/regress.py: the committed cost table, a search
bounded by its budget, so the same rewrites as on CI; ``--workers`` at a time, on the CPU), then the original, the
original again (the run's noise band) and subst's output are timed side by side in ``--rounds`` rounds, each
opening fresh sessions in another order, at batch 1 and sequences of 16 (`corpus.dims`). Writes
bench/results/<today>/corpus-<device>.json (``--result``) after every model and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import regress  # noqa: E402

from taso import check, onnx_io, profiler, store  # noqa: E402


def _optimize(name: str, tmp: Path) -> dict:
    t0 = time.perf_counter()
    try:
        row = regress.run_model(name, store.DEFAULT_PATH, tmp)
    except Exception as e:  # a model that fails is a row of the table, not the end of the run
        row = {"error": f"{type(e).__name__}: {e}"[:500]}
    return {**row, "optimize_s": round(time.perf_counter() - t0, 1)}


def _time(name: str, tmp: Path, device: profiler.Device, rounds: int) -> dict[str, float]:
    """Median over rounds of each variant's median latency in ms."""
    dims = corpus.dims(name)
    paths = {"original": tmp / f"{name}.onnx", "again": tmp / f"{name}.onnx", "subst": tmp / f"{name}.opt.onnx"}
    feeds = check.random_inputs(onnx_io.load_model(paths["original"]), seed=0, dims=dims)
    runs = [(str(p), feeds) for p in paths.values()]
    per: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        first = r % len(runs)
        timed = profiler.time_models(runs[first:] + runs[:first], device, warmup=20, samples=40)
        for i, t in enumerate(timed):
            per[(first + i) % len(runs)].append(t.median_ms)
    return {k: statistics.median(v) for k, v in zip(paths, per)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=",".join(corpus.NAMES))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/corpus-<device>.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("corpus", device.key)
    names = [n for n in args.models.split(",") if n]
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir, ProcessPoolExecutor(args.workers) as pool:
        tmp = Path(tmpdir)
        jobs = {n: pool.submit(_optimize, n, tmp) for n in names}
        for name in names:
            row = {**corpus.MANIFEST[name], "model": name, **jobs[name].result()}
            if "error" not in row and row.get("check_ok"):
                row["ms"] = _time(name, tmp, device, args.rounds)
                row["speedup"] = {k: row["ms"]["original"] / v for k, v in row["ms"].items()}
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("model", "cost_ratio", "speedup", "rules", "error")}), flush=True)
            layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
            for f in (tmp / f"{name}.onnx", tmp / f"{name}.opt.onnx"):
                f.unlink(missing_ok=True)
    print(f"\ndevice {device.key}")
    print(f"{'model':<28}{'orig ms':>9}{'again x':>9}{'subst x':>9}{'pred x':>8}{'opt s':>7}  rules")
    for r in rows:
        if "ms" not in r:
            print(f"{r['model']:<28}  not timed: {r.get('error') or r.get('check')}")
            continue
        rules = ", ".join(f"{k} x{v}" for k, v in sorted(r["rules"].items())) or "none"
        print(
            f"{r['model']:<28}{r['ms']['original']:>9.3f}{r['speedup']['again']:>9.3f}{r['speedup']['subst']:>9.3f}"
            f"{1 / r['cost_ratio']:>8.3f}{r['optimize_s']:>7.1f}  {rules}"
        )
    timed = [r["speedup"]["subst"] for r in rows if "speedup" in r]
    if timed:
        print(f"geomean subst: {math.exp(sum(map(math.log, timed)) / len(timed)):.3f}x over {len(timed)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
