"""BERT-base on the target device: what onnxruntime fuses, and whether the cost model ranks the Q/K/V merge.

    PYTHONPATH=. python bench/bench_bert.py --device cuda --out bench-out/

Prints the op census of onnxruntime's optimized graph (ENABLE_ALL, on the device's provider), then the
predicted and measured (interleaved) speed-up of merging the projections that read one tensor, using the
matmul-merge rule lifted to [batch, seq, hidden] (`taso.rules.lifted`). Prints only; writes no result file.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_cost import load  # noqa: E402

from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute import check  # noqa: E402
from taso.ir import parse_graph  # noqa: E402
from taso.rules import (  # noqa: E402
    Rule,
    find_matches,  # noqa: E402
    lifted,
    store,  # noqa: E402
)
from taso.search import apply  # noqa: E402

MERGE = Rule(
    parse_graph(
        "graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight):\n"
        "  %a = MatMul(%x, %w1) : float32[2,4]\n  %b = MatMul(%x, %w2) : float32[2,4]\n  return %a, %b"
    ),
    parse_graph(
        "graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight, %s: int64[2] = [4, 4]):\n"
        "  %w = Concat(%w1, %w2) {axis=1} : float32[4,8]\n  %m = MatMul(%x, %w) : float32[2,8]\n"
        "  %a, %b = Split(%m, %s) {axis=1} : float32[2,4], float32[2,4]\n  return %a, %b"
    ),
    name="merge-matmuls",
)


def ort_census(path: Path, device: profiler.Device, tmp: Path) -> collections.Counter:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = str(tmp / "ort_optimized.onnx")
    opts.log_severity_level = 3
    ort.InferenceSession(str(path), opts, providers=[device.provider])
    model = onnx.load(str(tmp / "ort_optimized.onnx"))
    return collections.Counter((f"{n.domain}::" if n.domain else "") + n.op_type for n in model.graph.node)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    rule = lifted(MERGE, 1)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        path, g = load("bert_base4", tmp)
        print("onnxruntime's graph:", dict(ort_census(path, device, tmp).most_common()))
        merged = g
        while (m := next(find_matches(merged, rule), None)) is not None:
            merged = apply(merged, m)
        mpath = onnx_io.save_model(merged, tmp / "merged.onnx")
        ok = check.compare(path, mpath, g, rtol=1e-3, atol=1e-4).ok
        model = cost.CostModel(device, store.create(args.out / "costs.db"))
        before, after = model.graph_cost(g).total_ms, model.graph_cost(merged).total_ms
        base, fast = cost.interleaved_latency([path, mpath], [g, merged], device, args.rounds)
        print(
            f"MatMuls {sum(n.op == 'MatMul' for n in g.nodes)} -> {sum(n.op == 'MatMul' for n in merged.nodes)}, "
            f"equivalent on CPU: {ok}"
        )
        print(
            f"predicted {before:.3f} -> {after:.3f} ms ({before / after:.3f}x); "
            f"measured {base:.3f} -> {fast:.3f} ms ({base / fast:.3f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
