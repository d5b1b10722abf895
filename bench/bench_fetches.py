"""Does onnxruntime run only the nodes a run's fetches need? (issue 49: several units in one session, each timed
by a run that fetches only its outputs, would share a session's start only if it does.)

    PYTHONPATH=. python3 bench/bench_fetches.py                      # CPU, and CUDA where its provider loads
    PYTHONPATH=. python3 bench/bench_fetches.py --result $OUT/fetches-h200.json

One model of two branches side by side, each its own input and output: branch a a chain of MatMul+Relu, branch b
of MatMul+Sigmoid. Each session (CPU; CUDA; CUDA with graph capture) at each optimization level is run fetching
only branch a's output, with onnxruntime's profiler on; the kernels it ran are counted by op. A provider that runs
only what the fetch needs runs no Sigmoid. Prints a line per session and writes the counts (``--result``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.ir import WeightData, parse_graph  # noqa: E402

DEPTH = 3
"""MatMuls in each branch."""


def two_branches(n: int = 256) -> bytes:
    """The model: branches a (MatMul, Relu) and b (MatMul, Sigmoid), ``DEPTH`` deep, sharing nothing."""
    t = f"float32[{n},{n}]"
    args = [f"%x{b}: {t}" for b in "ab"] + [f"%w{b}{i}: {t} weight" for b in "ab" for i in range(DEPTH)]
    lines = []
    for b, act in (("a", "Relu"), ("b", "Sigmoid")):
        prev = f"%x{b}"
        for i in range(DEPTH):
            lines += [f"  %m{b}{i} = MatMul({prev}, %w{b}{i}) : {t}", f"  %y{b}{i} = {act}(%m{b}{i}) : {t}"]
            prev = f"%y{b}{i}"
    text = f"graph({', '.join(args)}):\n" + "\n".join(lines) + f"\n  return %ya{DEPTH - 1}, %yb{DEPTH - 1}"
    g = parse_graph(text)
    rng = np.random.default_rng(0)
    data = {w: WeightData(rng.standard_normal((n, n)).astype(np.float32) / n) for w in g.weights}
    return onnx_io.model_bytes(replace(g, data=data))


def kernels_run(model: bytes, provider: str, level: str, cuda_graph: bool) -> dict[str, int]:
    """The kernels (by op) a run fetching only branch a's output ran, as onnxruntime's profiler saw them."""
    import onnxruntime as ort

    opts = profiler.session_options()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    with tempfile.TemporaryDirectory() as tmp:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "run")
        fetch = f"ya{DEPTH - 1}"
        if provider == profiler.CPU:
            sess = ort.InferenceSession(model, opts, providers=[profiler.CPU])
            feeds = _feeds(sess)
            for _ in range(2):
                sess.run([fetch], feeds)
        else:
            cuda = {"device_id": 0, **({"enable_cuda_graph": "1"} if cuda_graph else {})}
            sess = ort.InferenceSession(model, opts, providers=[(profiler.CUDA, cuda), profiler.CPU])
            binding = sess.io_binding()
            for name, value in _feeds(sess).items():
                binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
            binding.bind_output(fetch, "cuda")
            for _ in range(3):  # with capture: a warm-up, the capture, a replay
                sess.run_with_iobinding(binding)
        events = json.loads(Path(sess.end_profiling()).read_text())
    ops: dict[str, int] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name", "?")
            ops[op] = ops.get(op, 0) + 1
    return ops


def _feeds(sess) -> dict[str, np.ndarray]:  # noqa: ANN001 (onnxruntime type)
    return {i.name: np.ones(i.shape, np.float32) for i in sess.get_inputs()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--result", type=Path, help="write the counts here as JSON")
    args = ap.parse_args()
    model = two_branches()
    sessions = [(profiler.CPU, False)] + ([(profiler.CUDA, False), (profiler.CUDA, True)] * profiler.cuda_works())
    rows = []
    for provider, graph in sessions:
        for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
            row: dict = {"provider": provider, "cuda_graph": graph, "level": level}
            try:
                row["kernels"] = kernels_run(model, provider, level, graph)
                row["runs_other_branch"] = row["kernels"].get("Sigmoid", 0) > 0
            except Exception as e:  # onnxruntime's own exception types: a mode that refuses a partial fetch
                row["error"] = str(e).splitlines()[0][:300]
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.result is not None:
        args.result.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
