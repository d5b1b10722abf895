"""How much one model's measured latency moves from one onnxruntime session to the next, on one device.

    PYTHONPATH=. python bench/bench_noise.py --device cuda --sessions 6

The end-to-end guard in `subst optimize` and bench_optimize compare sessions of two models; when sessions of
one and the same model differ by more than a rewrite gains, the comparison decides nothing. For each model:
``--sessions`` fresh sessions in a row, each timed as `taso.cost.model_latency` does (median of 40 samples),
with cuDNN's EXHAUSTIVE algorithm search (onnxruntime's default: it times candidate algorithms when the session
starts, so two sessions may pick different ones), with HEURISTIC (no timing, the same pick every time), and
with one intra-op thread instead of one per core. Prints per model and mode the session medians' min, median,
max and max/min, and the median interquartile range within a session ("IQR in").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

from build import ZOO  # noqa: E402
from taso import check, onnx_io, profiler  # noqa: E402

MODES = (("EXHAUSTIVE", 0), ("HEURISTIC", 0), ("EXHAUSTIVE", 1))
"""(cuDNN algorithm search, intra-op threads: 0 = onnxruntime's default, one per core)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="squeezenet,resnet50,inception_v3,densenet121,bert_base")
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    args = ap.parse_args()
    device = profiler.pick_device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m for m in args.models.split(",") if m]:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save_model(ZOO[name](), str(path))
            feeds = check.random_inputs(onnx_io.load_model(path), seed=0)
            for search, threads in MODES if device.is_cuda else (("-", 0), ("-", 1)):  # cuDNN only on CUDA
                timings = [
                    profiler.time_model(
                        str(path), feeds, device, warmup=20, samples=40, conv_algo_search=search, threads=threads
                    )
                    for _ in range(args.sessions)
                ]
                ms = [t.median_ms for t in timings]
                mode = f"{search}/{threads or 'all'}"
                rows.append({"model": name, "mode": mode, "session_ms": ms, "iqr_ms": [t.spread_ms for t in timings]})
                print(json.dumps(rows[-1]), flush=True)
    (args.out / "bench_noise.json").write_text(json.dumps({"device": device.key, "rows": rows}, indent=1))
    print(f"\ndevice {device.key}")
    print(f"{'model':<14}{'search/threads':<16}{'min ms':>9}{'median':>9}{'max ms':>9}{'max/min':>9}{'IQR in':>9}")
    for r in rows:
        ms = r["session_ms"]
        print(
            f"{r['model']:<14}{r['mode']:<16}{min(ms):>9.3f}{statistics.median(ms):>9.3f}{max(ms):>9.3f}"
            f"{max(ms) / min(ms):>9.3f}{statistics.median(r['iqr_ms']):>9.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
