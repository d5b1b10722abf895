"""PET on one device: single convs against their corrected mutants, then whole models with and without --pet.

    PYTHONPATH=. python bench/bench_pet.py --device cuda --out bench-out/      # on the GPU machine
    PYTHONPATH=. python bench/bench_pet.py --device cpu --models csrnet --batches 1 --layers ''

Layers: for each conv shape of --layers (taken from ResNet-50, Inception-v3 and CSRNet), the conv alone and
each corrected mutant `taso.pet` builds for it, timed interleaved: does any mutant ever beat the conv?
Models: each zoo builder at each batch of --batches (static shapes), optimized without and with PET (costs
measured on --device, cached in a copy of the store under --out, so the second run profiles only the
mutants), then original, plain and PET outputs timed interleaved (`taso.profiler.visiting_order`). Prints both tables; writes bench_pet.json under --out after every model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

from build import bert_base, csrnet, inception_v3, resnext50  # noqa: E402
from taso import cost, onnx_io, ops, pet, profiler, store  # noqa: E402
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402

MODELS = {
    "inception_v3": inception_v3,
    "resnet50": partial(resnext50, groups=1, width_per_group=64),
    "resnext50": resnext50,
    "bert_base": partial(bert_base, layers=4, seq=128),
    "csrnet": csrnet,
}
LAYERS = {
    # name: (input N,C,H,W, output channels, kernel, pads, dilation)
    "resnet 3x3 56": ((16, 64, 56, 56), 64, (3, 3), (1, 1, 1, 1), 1),
    "resnet 3x3 28": ((16, 128, 28, 28), 128, (3, 3), (1, 1, 1, 1), 1),
    "resnet 3x3 14": ((16, 256, 14, 14), 256, (3, 3), (1, 1, 1, 1), 1),
    "resnet 3x3 7": ((16, 512, 7, 7), 512, (3, 3), (1, 1, 1, 1), 1),
    "inception 1x7 17": ((16, 128, 17, 17), 128, (1, 7), (0, 3, 0, 3), 1),
    "inception 7x1 17": ((16, 128, 17, 17), 192, (7, 1), (3, 0, 3, 0), 1),
    "csrnet d2 b1": ((1, 512, 32, 32), 512, (3, 3), (2, 2, 2, 2), 2),
    "csrnet d2 b16": ((16, 512, 32, 32), 256, (3, 3), (2, 2, 2, 2), 2),
}


def conv_graph(x: tuple[int, ...], m: int, kernel: tuple[int, int], pads: tuple[int, ...], d: int) -> Graph:
    rng = np.random.default_rng(0)
    attrs = {"kernel_shape": kernel, "strides": (1, 1), "pads": pads, "dilations": (d, d), "group": 1}
    w = (m, x[1], *kernel)
    types = {"x": TensorType("float32", x), "w": TensorType("float32", w)}
    types["y"] = ops.infer("Conv", list(types.values()), attrs)[0]
    data = {"w": WeightData((rng.standard_normal(w) * 0.05).astype(np.float32))}
    return Graph((Node("Conv", ("x", "w"), ("y",), make_attrs(attrs)),), ("x",), ("y",), types, ("w",), data)


def bench_layers(names: list[str], device: profiler.Device, rounds: int, tmp: Path) -> list[dict]:
    rows = []
    for name in names:
        g = conv_graph(*LAYERS[name])
        variants = {"conv": g, **{label.split(" ")[1]: h for label, h in pet.mutations(g)}}
        paths = [onnx_io.save_model(h, tmp / f"layer{i}.onnx") for i, h in enumerate(variants.values())]
        times = dict(zip(variants, cost.interleaved_latency(paths, list(variants.values()), device, rounds)))
        row = {"layer": name, "ms": times, "speedup": {k: times["conv"] / v for k, v in times.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_model(name: str, batch: int, args: argparse.Namespace, db: Path, tmp: Path) -> dict:
    device = profiler.pick_device(args.device)
    src = tmp / f"{name}-b{batch}.onnx"
    model = MODELS[name](batch=batch)
    onnx.save_model(model, str(src))
    row: dict = {"model": name, "batch": batch}
    outs = {}
    for flag in (False, True):
        label = "pet" if flag else "plain"
        outs[label] = tmp / f"{name}-b{batch}.{label}.onnx"
        t0 = time.perf_counter()
        settings = Settings(alpha=1.05, budget=args.budget, time_limit=args.time_limit, device=args.device, pet=flag)
        report = optimize(src, outs[label], db, settings=settings)
        row[label] = {
            "optimize_s": time.perf_counter() - t0,
            "search_s": report.search.get("seconds"),
            "candidates": report.search.get("candidates"),
            "predicted": report.cost["before_ms"] / report.cost["after_ms"] if report.cost else 1.0,
            "measured_guard": report.cost.get("measured"),
            "applied": report.rules_applied,
            "check": report.check.summary() if report.check else None,
        }
    paths = [src, outs["plain"], outs["pet"]]
    graphs = [onnx_io.load_model(p) for p in paths]
    times = cost.interleaved_latency(paths, graphs, device, args.rounds)
    row["ms"] = dict(zip(("original", "plain", "pet"), times))
    print(json.dumps(row, default=str), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--store", type=Path, default=store.DEFAULT_PATH)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    db = args.out / "store.db"
    if not db.exists():
        shutil.copy(args.store, db)
    result_path = args.out / "bench_pet.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {"device": device.key, "models": []}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        layers = [n for n in args.layers.split(",") if n]
        if layers:
            result["layers"] = bench_layers(layers, device, args.rounds, tmp)
        for name in [m for m in args.models.split(",") if m]:
            for batch in [int(b) for b in args.batches.split(",")]:
                result["models"].append(bench_model(name, batch, args, db, tmp))
                result_path.write_text(json.dumps(result, indent=2, default=str))
    result_path.write_text(json.dumps(result, indent=2, default=str))
    print(f"\ndevice {device.key}")
    for r in result.get("layers", []):
        cells = ", ".join(f"{k} {v:.3f}x" for k, v in r["speedup"].items() if k != "conv")
        print(f"{r['layer']:<20} conv {r['ms']['conv']:.4f} ms; {cells or 'no mutant'}")
    print(f"{'model':<14}{'batch':>6}{'orig ms':>9}{'plain x':>9}{'pet x':>8}{'opt s':>7}{'pet s':>7}  mutants")
    for r in result["models"]:
        ms = r["ms"]
        mutants = [k for k in r["pet"]["applied"] if k.startswith(pet.PREFIX)]
        print(
            f"{r['model']:<14}{r['batch']:>6}{ms['original']:>9.3f}{ms['original'] / ms['plain']:>9.3f}"
            f"{ms['original'] / ms['pet']:>8.3f}{r['plain']['optimize_s']:>7.1f}{r['pet']['optimize_s']:>7.1f}  "
            + (", ".join(mutants) or "none")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
