"""How much one model's measured latency moves from one onnxruntime session to the next, and why.

    PYTHONPATH=. python bench/bench_noise.py --device cuda --sessions 5

The end-to-end guard in `subst optimize` and bench_optimize compare sessions of two models; when sessions of
one and the same model differ by more than a rewrite gains, the comparison decides nothing. Each round opens
one fresh session per (model, mode), in `taso.cost.profiler.visiting_order` (so drift over the run hits every pair
alike), and times it as `taso.cost.model_latency` does (median of 40 samples). The modes (`taso.cost.profiler.Mode`)
take a run apart: cuDNN's algorithm search, intra-op threads, outputs allocated once, a
warm-up long enough for the GPU's clocks to ramp up, the host's share alone (no wait for the device) and the
device's alone (a replayed CUDA graph). On CUDA the GPU's SM clock is sampled all along (nvidia-smi) and each
session is given the median clock seen while it ran. Prints per model and mode the session medians' min,
median, max and max/min, the median IQR within a session, and the clock range; writes
bench/results/<today>/noise-<device>.json (``--result``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import layout  # noqa: E402

import build as zoo  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import (  # noqa: E402
    Mode,  # noqa: E402
    profiler,  # noqa: E402
)
from taso.execute import check  # noqa: E402

MODES = {
    "default": Mode(),
    "heuristic": Mode(conv_algo_search="HEURISTIC"),
    "1-thread": Mode(threads=1),
    "prealloc": Mode(preallocate=True),
    "warm-1s": Mode(warmup_s=1.0),
    "host-only": Mode(host_only=True),
    "cuda-graph": Mode(cuda_graph=True),
}
BUILDERS = {**zoo.ZOO, "bert_base4": lambda: zoo.bert(4, 768, 12, 3072, vocab=1000, max_len=128, seq=128, batch=1)}
"""bert_base4: the zoo's bert_base with a small vocabulary (they measured 0.7 vs 1.0 ms in earlier runs)."""


class Clocks:
    """The GPU's SM clock sampled every 20 ms by nvidia-smi in the background, with host timestamps."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "20"],
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.samples: list[tuple[float, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.samples.append((time.perf_counter(), float(line.split(",")[0])))
            except ValueError:
                continue

    def between(self, t0: float, t1: float) -> float | None:
        seen = [mhz for t, mhz in self.samples if t0 <= t <= t1]
        return statistics.median(seen) if seen else None

    def stop(self) -> None:
        self.proc.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="squeezenet,resnet50,bert_base,bert_base4")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/noise-<device>.json)")
    args = ap.parse_args()
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("noise", device.key)
    args.out.mkdir(parents=True, exist_ok=True)
    modes = [
        m for m in args.modes.split(",") if m and (device.is_cuda or not (MODES[m].cuda_graph or MODES[m].host_only))
    ]
    clocks = Clocks() if device.is_cuda else None
    rows: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for name in [m for m in args.models.split(",") if m]:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save_model(BUILDERS[name](), str(path))
            feeds = check.random_inputs(onnx_io.load_model(path), seed=0)
            cases += [(name, path, feeds, mode) for mode in modes]
        for r in range(args.sessions):
            for i in profiler.visiting_order(len(cases), r):
                name, path, feeds, mode = cases[i]
                row = rows.setdefault((name, mode), {"model": name, "mode": mode, "ms": [], "iqr": [], "mhz": []})
                t0 = time.perf_counter()
                try:
                    t = profiler.time_model(str(path), feeds, device, warmup=20, samples=40, mode=MODES[mode])
                except Exception as e:  # e.g. a model with a CPU node cannot be captured as a CUDA graph
                    row["error"] = str(e).splitlines()[0][:160]
                    continue
                row["ms"].append(t.median_ms)
                row["iqr"].append(t.spread_ms)
                row["mhz"].append(clocks.between(t0, time.perf_counter()) if clocks else None)
            print(f"round {r + 1}/{args.sessions} done", flush=True)
    if clocks:
        clocks.stop()
    result = {"device": device.key, "loadavg": os.getloadavg(), "rows": list(rows.values())}
    layout.write(result, {"meta": layout.meta(device.key), **result})
    print(f"\ndevice {device.key}, load average {result['loadavg']}")
    print(f"{'model':<12}{'mode':<12}{'min ms':>9}{'median':>9}{'max ms':>9}{'max/min':>9}{'IQR in':>9}{'SM MHz':>12}")
    for row in rows.values():
        ms, mhz = row["ms"], [m for m in row["mhz"] if m]
        if not ms:
            print(f"{row['model']:<12}{row['mode']:<12} failed: {row.get('error')}")
            continue
        clock = f"{min(mhz):.0f}-{max(mhz):.0f}" if mhz else "-"
        print(
            f"{row['model']:<12}{row['mode']:<12}{min(ms):>9.3f}{statistics.median(ms):>9.3f}{max(ms):>9.3f}"
            f"{max(ms) / min(ms):>9.3f}{statistics.median(row['iqr']):>9.3f}{clock:>12}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
