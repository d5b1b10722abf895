"""PET on one device: single layers against their corrected mutants, then whole models with and without --pet.

    PYTHONPATH=. python bench/bench_pet.py --device cuda --out $OUT      # on the GPU machine
    PYTHONPATH=. python bench/bench_pet.py --device cpu --models csrnet --batches 1 --layers ''

Layers: for each layer of --layers (convs, sibling convs and MatMuls taken from ResNet-50, ResNeXt-50,
Inception-v3, CSRNet and BERT-base at seq 128), the layer alone and each corrected mutant `taso.pet` builds for
it, timed interleaved: does any mutant ever beat the original?
Models: each zoo builder at each batch of --batches (static shapes), optimized without and with PET (costs
measured on --device, cached in a copy of the store under --out, so the second run profiles only the
mutants), then original, plain and PET outputs timed side by side (`taso.cost.profiler.time_models`). Prints
both tables; writes bench/results/<today>/pet-<device>.json (``--result``) after every model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import layout  # noqa: E402

from build import bert_base, csrnet, inception_v3, resnext50  # noqa: E402
from taso import cost, ops, pet  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402
from taso.rules import store  # noqa: E402

MODELS = {
    "inception_v3": inception_v3,
    "resnet50": partial(resnext50, groups=1, width_per_group=64),
    "resnext50": resnext50,
    "bert_base": partial(bert_base, layers=4, seq=128),
    "csrnet": csrnet,
}


def conv(
    x: tuple[int, ...], m: int, kernel: tuple[int, int], pads: tuple[int, ...], d: int = 1, s: int = 1, group: int = 1
) -> Callable[[], Graph]:
    """One conv layer: input N,C,H,W, output channels, kernel, pads, dilation, stride, groups."""
    return siblings(x, [(m, kernel, pads)], d, s, group)


def siblings(
    x: tuple[int, ...],
    convs: list[tuple[int, tuple[int, int], tuple[int, ...]]],
    d: int = 1,
    s: int = 1,
    group: int = 1,
) -> Callable[[], Graph]:
    """Convs reading one input, each (output channels, kernel, pads); the graph returns all of them."""

    def build() -> Graph:
        rng = np.random.default_rng(0)
        types = {"x": TensorType("float32", x)}
        nodes, data = [], {}
        for i, (m, kernel, pads) in enumerate(convs):
            attrs = {"kernel_shape": kernel, "strides": (s, s), "pads": pads, "dilations": (d, d), "group": group}
            w = (m, x[1] // group, *kernel)
            types[f"w{i}"] = TensorType("float32", w)
            data[f"w{i}"] = WeightData((rng.standard_normal(w) * 0.05).astype(np.float32))
            types[f"y{i}"] = ops.infer("Conv", [types["x"], types[f"w{i}"]], attrs)[0]
            nodes.append(Node("Conv", ("x", f"w{i}"), (f"y{i}",), make_attrs(attrs), name=f"conv{i}"))
        return Graph(tuple(nodes), ("x",), tuple(n.outputs[0] for n in nodes), types, tuple(data), data)

    return build


def matmuls(x: tuple[int, ...], widths: list[int]) -> Callable[[], Graph]:
    """MatMuls of one input [..., K] by [K, N] weights, one per width (several: Q/K/V-like siblings)."""

    def build() -> Graph:
        rng = np.random.default_rng(0)
        types = {"x": TensorType("float32", x)}
        nodes, data = [], {}
        for i, n in enumerate(widths):
            types[f"w{i}"] = TensorType("float32", (x[-1], n))
            data[f"w{i}"] = WeightData((rng.standard_normal((x[-1], n)) * 0.05).astype(np.float32))
            types[f"y{i}"] = ops.infer("MatMul", [types["x"], types[f"w{i}"]], {})[0]
            nodes.append(Node("MatMul", ("x", f"w{i}"), (f"y{i}",), (), name=f"matmul{i}"))
        return Graph(tuple(nodes), ("x",), tuple(n.outputs[0] for n in nodes), types, tuple(data), data)

    return build


SAME, VALID = (1, 1, 1, 1), (0, 0, 0, 0)
INCEPTION_E = [(384, (1, 3), (0, 1, 0, 1)), (384, (3, 1), (1, 0, 1, 0))]
LAYERS: dict[str, Callable[[], Graph]] = {
    "resnet stem 7x7 s2 b1": conv((1, 3, 224, 224), 64, (7, 7), (3, 3, 3, 3), s=2),  # stride-to-channels
    "resnet stem 7x7 s2 b16": conv((16, 3, 224, 224), 64, (7, 7), (3, 3, 3, 3), s=2),
    "resnet 3x3 56": conv((16, 64, 56, 56), 64, (3, 3), SAME),
    "resnet 3x3 28": conv((16, 128, 28, 28), 128, (3, 3), SAME),
    "resnet 3x3 14": conv((16, 256, 14, 14), 256, (3, 3), SAME),
    "resnet 3x3 7": conv((16, 512, 7, 7), 512, (3, 3), SAME),
    "resnet 3x3 s2 56": conv((16, 128, 56, 56), 128, (3, 3), SAME, s=2),  # pad-conv-slice: strided
    "resnext 3x3 g32 56": conv((16, 128, 56, 56), 128, (3, 3), SAME, group=32),
    "inception 1x7 17": conv((16, 128, 17, 17), 128, (1, 7), (0, 3, 0, 3)),
    "inception 7x1 17": conv((16, 128, 17, 17), 192, (7, 1), (3, 0, 3, 0)),
    "inception valid 3x3 149": conv((16, 32, 149, 149), 32, (3, 3), VALID),  # pad-conv-slice: 'valid'
    "inception valid 3x3 73": conv((16, 80, 73, 73), 192, (3, 3), VALID),
    "inception 1x3+3x1 8 b1": siblings((1, 384, 8, 8), INCEPTION_E),
    "inception 1x3+3x1 8 b16": siblings((16, 384, 8, 8), INCEPTION_E),
    "inception 1x1+5x5 35 b16": siblings((16, 192, 35, 35), [(64, (1, 1), VALID), (48, (5, 5), (2, 2, 2, 2))]),
    "csrnet d2 b1": conv((1, 512, 32, 32), 512, (3, 3), (2, 2, 2, 2), d=2),
    "csrnet d2 b16": conv((16, 512, 32, 32), 256, (3, 3), (2, 2, 2, 2), d=2),
    "bert qkv b1": matmuls((1, 128, 768), [768, 768, 768]),
    "bert qkv b16": matmuls((16, 128, 768), [768, 768, 768]),
    "bert ffn b1": matmuls((1, 128, 768), [3072]),
    "bert ffn b16": matmuls((16, 128, 768), [3072]),
}


def bench_layers(names: list[str], device: profiler.Device, rounds: int, tmp: Path) -> list[dict]:
    """Each layer and each of its corrected mutants (named by kind and node), timed interleaved."""
    rows = []
    for name in names:
        g = LAYERS[name]()
        mutants = {label.removeprefix(pet.PREFIX).split(" (")[0]: h for label, h in pet.mutations(g)}
        variants = {"original": g, **mutants}
        paths = [onnx_io.save_model(h, tmp / f"layer{i}.onnx") for i, h in enumerate(variants.values())]
        times = dict(zip(variants, cost.interleaved_latency(paths, list(variants.values()), device, rounds)))
        row = {"layer": name, "ms": times, "speedup": {k: times["original"] / v for k, v in times.items()}}
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
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/pet-<device>.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    db = args.out / "store.db"
    if not db.exists():
        shutil.copy(args.store, db)
    result_path = args.result or layout.result_path("pet", device.key)
    result = json.loads(result_path.read_text()) if result_path.exists() else {"device": device.key, "models": []}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        layers = [n for n in args.layers.split(",") if n]
        if layers:
            result["layers"] = bench_layers(layers, device, args.rounds, tmp)
        for name in [m for m in args.models.split(",") if m]:
            for batch in [int(b) for b in args.batches.split(",")]:
                result["models"].append(bench_model(name, batch, args, db, tmp))
                layout.write(result_path, {**result, "meta": layout.meta(device.key)})
    layout.write(result_path, {**result, "meta": layout.meta(device.key)})
    print(f"\ndevice {device.key}")
    for r in result.get("layers", []):
        cells = ", ".join(f"{k} {v:.3f}x" for k, v in r["speedup"].items() if k != "original")
        print(f"{r['layer']:<26} original {r['ms']['original']:.4f} ms; {cells or 'no mutant'}")
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
