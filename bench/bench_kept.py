"""What the end-to-end guard kept, timed again: each model's output as `subst optimize --device` made it on this
device (`bench_cold.py --keep DIR`) against the original and the original again (the run's noise band), in fresh
sessions each round, as bench_corpus times its variants. Without bench_corpus's preparing (the regression's
output and every peer's), a lease can check the guard's verdicts on a few models in a minute or two.

    PYTHONPATH=. python3 bench/bench_cold.py --device cuda --cold-only --keep /tmp/keep --models M1,M2
    PYTHONPATH=. python3 bench/bench_kept.py /tmp/keep --models M1,M2 --rounds 6 --result $OUT/kept-h100.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
from bench_corpus import time_variants  # noqa: E402

from taso.cost import profiler  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kept", type=Path, help="the folder bench_cold.py --keep wrote (<model>.onnx)")
    ap.add_argument("--models", required=True, help="comma-separated corpus names")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/kept-<device>.json)")
    args = ap.parse_args()
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("kept", device.key)
    rows = []
    for name in args.models.split(","):
        src = corpus.write(name, args.kept / f"{name}.original.onnx")
        variants = {"original": str(src), "again": str(src), "subst_device": str(args.kept / f"{name}.onnx")}
        ms = time_variants(name, variants, device, args.rounds)
        rows.append({"model": name, "ms": ms, "speedup": {k: ms["original"] / v for k, v in ms.items()}})
        print(name, " ".join(f"{k} {v:.3f}x" for k, v in rows[-1]["speedup"].items()), flush=True)
        layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
