"""Whether a faster search finds what the slower one did, and how much CPU it saves: `subst optimize` of corpus
models by two checkouts, run alternately so that a shared machine's load falls on both alike.

    .venv/bin/python bench/bench_searchfast.py --base /tmp/base --models vit_b_16_dynamo,resnet50_ts --out r.json

``--base`` is a copy of the code before the change (``git archive COMMIT | tar -x -C /tmp/base``); this checkout
is the code after. Each run is the CLI with the H200 reference table, nothing measured, no check and a time limit
no search reaches, so the result depends on the work alone: the written model's bytes (sha256) and the report's
search statistics (regions, replayed, expanded, candidates, declines by reason, rules applied) must be the same
on both sides. The search's CPU seconds (``time.process_time`` around `optimize_graph`) are the number to
compare: wall seconds on a loaded machine are noise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "models"), str(ROOT / "bench")]

import corpus  # noqa: E402
import layout  # noqa: E402

TABLE = ROOT / "taso" / "cost" / "reference_costs_h200.json"
CHILD = """
import sys, time
import taso.optimize.pipeline as pipeline
from cli.main import main
inner, spent = pipeline.optimize_graph, []
def timed(*args, **kwargs):
    t0 = time.process_time()
    try:
        return inner(*args, **kwargs)
    finally:
        spent.append(time.process_time() - t0)
pipeline.optimize_graph = timed
try:
    main(sys.argv[1:])
finally:
    print("search_cpu_s", sum(spent), file=sys.stderr)
"""
SAME = ("regions", "replayed", "expanded", "candidates", "declined", "time_limit_reached")


def run(checkout: Path, model: Path, dims: dict[str, int], out: Path, cache: Path) -> dict:
    """One cold optimize by ``checkout``'s code: what it wrote, its search statistics and CPU seconds."""
    args = ["optimize", str(model), "-o", str(out), "--costs", str(TABLE), "--no-check", "--json"]
    args += [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")] + ["--time-limit", "100000"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(checkout)}
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args], cwd=checkout, env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout)
    cpu = float(done.stderr.rsplit("search_cpu_s", 1)[1].split()[0])
    return {
        "load": load,
        "search_cpu_s": round(cpu, 2),
        "search_wall_s": round(report["seconds"]["search"], 2),
        "output_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "cost_ms": [report["cost"]["before_ms"], report["cost"]["after_ms"]],
        "stats": {k: report["search"][k] for k in SAME} | {"applied": report["rules_applied"]},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="a copy of the code before the change")
    ap.add_argument("--models", default="vit_b_16_dynamo,resnet50_ts,swin_t_ts,bert_ts,mobilenet_v2_ts,t5_encoder_ts")
    ap.add_argument("--rounds", type=int, default=1, help="base/head pairs per model, the first side alternating")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows, flip = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = corpus.write(name, Path(tmp) / f"{name}.onnx")
            row: dict = {"model": name, "base": [], "head": []}
            for _ in range(args.rounds):
                for side in ("head", "base") if flip else ("base", "head"):
                    checkout = args.base if side == "base" else ROOT
                    cache = Path(tempfile.mkdtemp(dir=tmp))  # cold: no cost cache, no rule cache
                    row[side].append(run(checkout, model, corpus.dims(name), Path(tmp) / f"{side}.onnx", cache))
                flip = not flip
            runs = row["base"] + row["head"]
            row["same"] = all(
                r["output_sha256"] == runs[0]["output_sha256"] and r["stats"] == runs[0]["stats"] for r in runs
            )
            row["cpu_ratio"] = round(
                sum(r["search_cpu_s"] for r in row["head"]) / sum(r["search_cpu_s"] for r in row["base"]), 3
            )
            rows.append(row)
            print(name, "same" if row["same"] else "DIFFERENT", "cpu ratio", row["cpu_ratio"], flush=True)
            layout.write(args.out, {"meta": layout.meta(), "base": str(args.base), "rows": rows})
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
