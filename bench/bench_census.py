"""The corpus's op census (issue 47): nodes and measured GPU time by op type, and the share of both that subst's
catalogue models; with each model's latency with and without CUDA graph capture (issue 49) from the same run.

    PYTHONPATH=. python3 bench/bench_census.py --device cuda --result $OUT/census-h200.json   # the GPU machine
    .venv/bin/python bench/bench_census.py --report bench/results/DATE/census-h200.json          # the share, here

Measuring needs only onnx, numpy and onnxruntime (the GPU machine has no subst dependencies): each model is
loaded with its weights filled (models/corpus.py), fed random inputs at batch 1 and sequences of 16, and profiled
at ORT_ENABLE_BASIC, where onnxruntime folds constants but fuses nothing, so each kernel's time is charged to an op
type of the file. The latency runs are at ORT_ENABLE_ALL, as users run, plain and under CUDA graph capture
(io_binding, static shapes). The result file is rewritten after every model, so a cut-off run keeps what it did.
`--report` adds the catalogue's share by reading `taso.ops` here: an op type counts as modelled when the
catalogue has an entry of that name, so the share before and after a change is this same file read by two trees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import corpus  # noqa: E402

DTYPES = {1: np.float32, 10: np.float16, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def feeds(model, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Random inputs at ``sizes`` for the symbolic dims: token ids below 1000, floats normal."""
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, 1) for d in t.shape.dim]
        dtype = DTYPES[t.elem_type]
        out[i.name] = (
            rng.integers(0, 1000, shape).astype(dtype)
            if np.issubdtype(dtype, np.integer)
            else rng.standard_normal(shape).astype(dtype)
        )
    return out


def profile(ort, path: str, x: dict, provider: str, runs: int) -> dict[str, float]:
    """Microseconds of kernel time per op type per run, over ``runs`` runs after two warm-up runs (which pick
    the convolution algorithms), at ORT_ENABLE_BASIC."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "p")
    s = ort.InferenceSession(path, so, providers=[provider])
    for _ in range(2 + runs):
        s.run(None, x)
    events = json.loads(Path(s.end_profiling()).read_text())
    starts = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    times: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= starts[2]:
            times[e["args"]["op_name"]] += e["dur"] / runs
    return dict(times)


def latency(ort, path: str, x: dict, provider: str, graph: bool, runs: int) -> float:
    """Median milliseconds of one run at ORT_ENABLE_ALL; under CUDA graph capture with ``graph``."""
    so = ort.SessionOptions()
    if not graph:
        s = ort.InferenceSession(path, so, providers=[provider])
        for _ in range(5):
            s.run(None, x)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            s.run(None, x)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3
    s = ort.InferenceSession(path, so, providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
    binding = s.io_binding()
    for name, v in x.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
    for o in s.get_outputs():
        binding.bind_output(o.name, "cuda")
    for _ in range(5):
        s.run_with_iobinding(binding)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        s.run_with_iobinding(binding)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def measure(args: argparse.Namespace) -> None:
    import onnx
    import onnxruntime as ort

    provider = "CUDAExecutionProvider" if args.device == "cuda" else "CPUExecutionProvider"
    result = {
        "meta": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "device": args.device,
            "onnxruntime": ort.__version__,
            "command": " ".join(sys.argv),
        },
        "models": {},
    }
    names = [n for n in args.models.split(",") if n] or corpus.NAMES
    for name in names:
        t0 = time.perf_counter()
        row: dict[str, object] = {}
        try:
            model = corpus.load(name)
            row["nodes"] = dict(Counter(n.op_type for n in model.graph.node))
            with tempfile.TemporaryDirectory() as tmp:
                path = str(Path(tmp) / "m.onnx")
                onnx.save(model, path)
                x = feeds(model, corpus.dims(name))
                row["gpu_us"] = profile(ort, path, x, provider, args.runs)
                row["ms"] = latency(ort, path, x, provider, False, args.runs)
                if args.device == "cuda":
                    try:
                        row["ms_cuda_graph"] = latency(ort, path, x, provider, True, args.runs)
                    except Exception as e:  # not capturable: say why
                        row["cuda_graph_error"] = f"{type(e).__name__}: {e}"[:300]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:500]
        row["seconds"] = round(time.perf_counter() - t0, 1)
        result["models"][name] = row
        print(name, {k: v for k, v in row.items() if k not in ("nodes", "gpu_us")}, flush=True)
        Path(args.result).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def report(path: Path) -> None:
    """The census table, with the share of nodes and GPU time whose op type the catalogue models."""
    from taso import ops

    result = json.loads(path.read_text())
    nodes: Counter[str] = Counter()
    gpu: Counter[str] = Counter()
    for row in result["models"].values():
        nodes.update(row.get("nodes", {}))
        gpu.update(row.get("gpu_us", {}))
    modelled = set(ops.OPS)
    specified = {name for name, d in ops.OPS.items() if not d.no_spec}
    total_n, total_t = sum(nodes.values()), sum(gpu.values())
    print(f"{'op':<28}{'nodes':>8}{'GPU us':>12}{'GPU %':>8}  catalogue")
    for op, t in gpu.most_common():
        says = "with spec" if op in specified else "entry only" if op in modelled else "-"
        print(f"{op:<28}{nodes.get(op, 0):>8}{t:>12.1f}{100 * t / total_t:>7.1f}%  {says}")
    for what, ops_in in (("catalogue entries", modelled), ("entries with a spec", specified)):
        share_n = sum(v for k, v in nodes.items() if k in ops_in) / total_n
        share_t = sum(v for k, v in gpu.items() if k in ops_in) / total_t
        print(f"{what}: {100 * share_n:.1f} % of {total_n} nodes, {100 * share_t:.1f} % of GPU kernel time")
    missing = [op for op in nodes if op not in gpu and op not in modelled]
    print(f"op types with no kernel time (folded or shape-only), not in the catalogue: {sorted(missing)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: all)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--result", default="census.json")
    ap.add_argument("--report", type=Path, help="print the census of a result file with the catalogue's share")
    args = ap.parse_args()
    if args.report:
        report(args.report)
    else:
        measure(args)


if __name__ == "__main__":
    main()
