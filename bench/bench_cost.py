"""Cost model accuracy on a real device: predicted vs measured whole-model latency for every zoo model,
and whether the predicted effect of merging sibling convs agrees with the measured one.

    PYTHONPATH=. python bench/bench_cost.py --device cuda --result $OUT/cost-h100.json    # on the GPU machine
    PYTHONPATH=. python bench/bench_cost.py --device cpu --models squeezenet,bert_tiny

Prints a table; writes bench/results/<today>/cost-<device>.json (``--result``) and the measured cost cache,
costs.db, under --out.
Original and merged variants are timed interleaved, several rounds, so drift hits both alike. Whole models are
timed after every model is profiled, one round each per pass over all of them (``--rounds`` passes), so each
model's median spans the run rather than one moment of it.
Predictions are at the host's quick speed (`CostModel.at_quick_host`); the table also gives how slow the
host was while the whole model ran (its reference run over the quick one) and the error at that speed (the
prediction moved by that slowdown to the power `taso.cost.HOST_ELASTICITY`), and
the error against the median of the rounds the host ran in its quick mode (reference within
`taso.cost.profiler.SLOW_SPELL` of the quick one), with how many such rounds there were.
``--modes`` (bench_noise.py's names) profiles and measures again in other timing modes, e.g. the host's share
alone and the device's alone; the json keeps each model's units in graph order with their cost in every mode,
so a model of how host and device time combine can be fitted to one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models"), str(ROOT / "bench")]

import layout  # noqa: E402
from bench_noise import MODES  # noqa: E402
from variants import merge_sibling_convs  # noqa: E402

import build as zoo  # noqa: E402
from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute import (  # noqa: E402
    check,
    fold_static_shapes,  # noqa: E402
)
from taso.ir import Graph  # noqa: E402
from taso.rules import store  # noqa: E402

LIGHT = ["squeezenet", "inception_v1", "inception_v2", "resnet50", "densenet121", "vgg19", "shufflenet"]
MERGE = ["squeezenet", "inception_v1", "inception_v2", "resnet50"]
BUILT = [
    "resnext50",
    "inception_v3",
    "nasnet_a",
    "nasrnn",
    "gpt2",
    "bert_base",
    "csrnet",
    "squeezenet_fp16",
    "bert_base_fp16",
]
"""The zoo's own builders (static batch 1, float16 ones included), beside the onnx wheel's light models."""


def load(name: str, tmp: Path) -> tuple[Path, Graph]:
    if name == "bert_tiny":
        src = ROOT / "models" / "bert_tiny.onnx"
    elif name == "bert_base4":  # BERT-base shape, 4 layers, as measured in baselines.md
        src = tmp / "bert_base4.onnx"
        onnx.save_model(zoo.bert(layers=4, hidden=768, heads=12, ffn=3072, vocab=1000, max_len=128), str(src))
    elif name in zoo.ZOO and name not in LIGHT:
        src = tmp / f"{name}.src.onnx"
        onnx.save_model(zoo.ZOO[name](), str(src))
    else:
        src = tmp / f"{name}.src.onnx"
        onnx.save_model(zoo.materialize(onnx.load(str(zoo.LIGHT_DIR / f"light_{name}.onnx")), seed=0), str(src))
    g = onnx_io.concretize(onnx_io.load_model(src), {"batch": 1, "seq": 128 if name == "bert_base4" else 32})
    path = onnx_io.save_model(g, tmp / f"{name}.onnx")
    return path, g


def per_mode(
    name: str,
    g: Graph,
    path: Path,
    by_mode: dict[str, cost.CostModel],
    device: profiler.Device,
    rounds: int,
    first: list[float],
) -> dict:
    """``g``'s units in graph order with their cost in each mode, and the whole model measured in each mode
    (``first``: the sessions already measured in the first mode)."""
    g = fold_static_shapes(g)
    found = cost.units(g)
    out: dict = {"model": name, "sequence": [], "costs": {}, "measured": {}}
    for i, (mode, model) in enumerate(by_mode.items()):
        costs = [model.unit_cost(g, unit) for unit in found]
        out["sequence"] = [c.key for c in costs]  # unit keys do not depend on the mode
        for c in costs:
            out["costs"].setdefault(c.key, {"label": c.label})[mode] = c.ms
        try:
            measured = first if i == 0 else cost.medians(cost.interleaved_timings([path], [g], device, rounds, model.mode))[0]
        except Exception as e:  # a CUDA graph cannot capture a model with a node on the CPU
            measured = str(e).splitlines()[0][:160]
        out["measured"][mode] = measured
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default=",".join(["bert_tiny", "bert_base4", *LIGHT, *BUILT]))
    ap.add_argument("--merge", default=",".join(MERGE))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="default", help="timing modes, bench_noise.py's names; the first is the table's")
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/cost-<device>.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("cost", device.key)
    db = store.create(args.out / "costs.db")
    modes = [m for m in args.modes.split(",") if m]
    by_mode = {m: cost.CostModel(device, db, mode=MODES[m]) for m in modes}
    model = by_mode[modes[0]]
    print(f"device {device.key}\ncalibration {model.calibration}", flush=True)
    rows, merges, detail = [], [], []
    names = [m for m in args.models.split(",") if m]
    loaded: dict[str, tuple[Path, Graph, cost.GraphCost, float]] = {}

    def write() -> None:  # after every step: a run cut short keeps its results
        quick = model.quick_reference_ms()
        out = {"device": device.key, "calibration": model.calibration.__dict__, "quick_reference_ms": quick}
        layout.write(result, {"meta": layout.meta(device.key), **out, "rows": rows, "merges": merges, "modes": detail})

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in names:  # profile every model first, and measure the merges (ratios, timed side by side)
            t0 = time.perf_counter()
            path, g = load(name, tmp)
            raw = model.graph_cost(g)  # at the calibration's host speed, as a search compares graphs
            loaded[name] = (path, g, raw, time.perf_counter() - t0)
            print(f"{name}: {sum(u.count for u in raw.units)} units profiled", flush=True)
            if name in args.merge.split(","):
                merged, groups = merge_sibling_convs(g)
                mpath = onnx_io.save_model(merged, tmp / f"{name}.merged.onnx")
                ok = check.compare(path, mpath, g, rtol=1e-3, atol=1e-4).ok
                mraw = model.graph_cost(merged)
                base_ms, merged_ms = cost.interleaved_latency([path, mpath], [g, merged], device, args.rounds)
                merges.append(
                    {
                        "model": name,
                        "groups": groups,
                        "equivalent_on_cpu": ok,
                        "predicted_speedup": raw.total_ms / mraw.total_ms,
                        "measured_speedup": base_ms / merged_ms,
                        "base_ms": base_ms,
                        "merged_ms": merged_ms,
                    }
                )
                print(json.dumps(merges[-1]), flush=True)
                write()
        # then every model end to end, one round each per pass: the passes spread a model's rounds over the
        # minutes the run takes, so one slow spell of the host does not set its latency
        timings: dict[str, list[profiler.Timing]] = {name: [] for name in loaded}
        for _ in range(args.rounds):
            for name, (path, g, _, _) in loaded.items():
                timings[name] += cost.interleaved_timings([path], [g], device, 1, model.mode)[0]
        quick = model.quick_reference_ms()
        for name, (path, g, raw, profile_s) in loaded.items():
            pred = model.at_quick_host(raw)
            sessions = [t.median_ms for t in timings[name]]
            measured = statistics.median(sessions)
            host = statistics.median(t.reference_ms or 0.0 for t in timings[name]) / quick
            in_quick_mode = profiler.in_quick_mode(timings[name], quick)
            quick_ms = statistics.median(in_quick_mode) if in_quick_mode else None
            rows.append(
                {
                    "model": name,
                    "nodes": len(g.nodes),
                    "units": sum(u.count for u in pred.units),
                    "estimated": pred.estimated,
                    "predicted_ms": pred.total_ms,
                    "measured_ms": measured,
                    "rounds_ms": sessions,
                    "error_pct": 100 * (pred.total_ms - measured) / measured,
                    "host_slowdown": host,
                    "error_same_host_pct": 100 * (pred.total_ms * host**cost.HOST_ELASTICITY - measured) / measured,
                    "quick_rounds": len(in_quick_mode),
                    "measured_quick_ms": quick_ms,
                    "error_quick_pct": None if quick_ms is None else 100 * (pred.total_ms - quick_ms) / quick_ms,
                    "profile_s": profile_s,
                }
            )
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "rounds_ms"}), flush=True)
            detail.append(per_mode(name, g, path, by_mode, device, args.rounds, sessions))
            write()
    print(
        f"\n{'model':<14}{'nodes':>6}{'units':>6}{'est':>5}{'pred ms':>10}{'meas ms':>10}{'err %':>8}"
        f"{'host x':>8}{'same-host err %':>17}{'quick':>7}{'quick err %':>13}{'profile s':>10}"
    )
    for r in rows:
        quick_err = f"{r['error_quick_pct']:>+13.1f}" if r["error_quick_pct"] is not None else f"{'-':>13}"
        print(
            f"{r['model']:<14}{r['nodes']:>6}{r['units']:>6}{r['estimated']:>5}{r['predicted_ms']:>10.3f}"
            f"{r['measured_ms']:>10.3f}{r['error_pct']:>+8.1f}{r['host_slowdown']:>8.2f}"
            f"{r['error_same_host_pct']:>+17.1f}{r['quick_rounds']:>7}{quick_err}{r['profile_s']:>10.1f}"
        )
    print(f"\n{'merge':<14}{'groups':>7}{'pred x':>8}{'meas x':>8}{'agree':>7}{'equiv':>7}")
    for m in merges:
        agree = (m["predicted_speedup"] > 1) == (m["measured_speedup"] > 1)
        print(
            f"{m['model']:<14}{m['groups']:>7}{m['predicted_speedup']:>8.3f}{m['measured_speedup']:>8.3f}"
            f"{str(agree):>7}{str(m['equivalent_on_cpu']):>7}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
