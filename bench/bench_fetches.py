"""Does onnxruntime run only the nodes a run's fetches need? (issue 49: several units in one session, each timed
by a run that fetches only its outputs, would share a session's start only if it does.)

    PYTHONPATH=. python3 bench/bench_fetches.py                      # CPU, and CUDA where its provider loads
    PYTHONPATH=. python3 bench/bench_fetches.py --result $OUT/fetches-h200.json

One model of two branches side by side, each its own input and output: branch a a chain of MatMul+Relu, branch b
of MatMul+Sigmoid. Each session (CPU; CUDA; CUDA with graph capture) at each optimization level is run fetching
only branch a's output, with onnxruntime's profiler on; the kernels it ran are counted by op. A provider that runs
only what the fetch needs runs no Sigmoid. Prints a line per session and writes the counts (``--result``).

It does not (CPU, onnxruntime 1.32: both branches run, at every level). So the same script times the other way
to share a session: each unit inside an ``If`` whose condition is an input of its own (`GATES` of them, one
branch a), a run turning one gate on: what a run with only a's gate on costs beside a alone in a session of its
own, and beside all gates off. On the 2-core CPU: a alone 66.3 us, gated 80.2 us, all off 13.1 us (0.8 us a
gate): the gated unit's 67.0 us is its time alone (again: 46.7 us alone, 48.8 gated). On CUDA it may not be (an
If runs its subgraph from the host), and CUDA graphs capture no If.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
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


GATES = 16
"""Gated branches in `gated`'s session: a batch of eight units' one copy and copies."""


def gated(n: int = 64) -> tuple[bytes, bytes]:
    """Branch a (MatMul, Relu; ``DEPTH`` deep, at n x n) alone, and `GATES` branches (a first) each inside an If
    on an input ``c<tag>`` of its own, whose else branch outputs an empty tensor."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(tag: str, seed: int) -> tuple[list, list, str]:
        """A chain whose weights are drawn from ``seed``: branch a's, alone and gated, the same."""
        rng = np.random.default_rng(seed)
        nodes, inits, prev = [], [], f"x{tag}"
        for i in range(DEPTH):
            w = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32) / n, f"w{tag}{i}")
            inits.append(w)
            nodes += [helper.make_node("MatMul", [prev, w.name], [f"m{tag}{i}"])]
            nodes += [helper.make_node("Relu", [f"m{tag}{i}"], [f"y{tag}{i}"])]
            prev = f"y{tag}{i}"
        return nodes, inits, prev

    def value(name: str, shape: list[int] | None, dtype: int = TensorProto.FLOAT):  # noqa: ANN202 (onnx type)
        return helper.make_tensor_value_info(name, dtype, shape)

    def model(graph) -> bytes:  # noqa: ANN001 (onnx type)
        # IR 8 (opset 17's): the installed onnx writes its newest IR version, which onnxruntime may not read yet
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return model.SerializeToString()

    nodes, inits, out = branch("a", 0)
    alone = model(helper.make_graph(nodes, "alone", [value("xa", [n, n])], [value(out, [n, n])], inits))
    tags, ifs = [f"g{i}" for i in range(GATES)], []
    for seed, tag in enumerate(tags):
        nodes, inits, out = branch(tag, seed)
        then = helper.make_graph(nodes, f"then_{tag}", [], [value(out, [n, n])], inits)
        empty = numpy_helper.from_array(np.zeros((0,), np.float32), f"e{tag}")
        skip = helper.make_graph(
            [helper.make_node("Identity", [empty.name], [f"z{tag}"])],
            f"else_{tag}",
            [],
            [value(f"z{tag}", None)],
            [empty],
        )
        ifs.append(helper.make_node("If", [f"c{tag}"], [f"o{tag}"], then_branch=then, else_branch=skip))
    inputs = [value(f"x{t}", [n, n]) for t in tags] + [value(f"c{t}", [], TensorProto.BOOL) for t in tags]
    return alone, model(helper.make_graph(ifs, "gated", inputs, [value(f"o{t}", None) for t in tags]))


def time_runs(model: bytes, on: str | None, provider: str, runs: int = 200, samples: int = 15) -> float:
    """Median microseconds of a run of ``model`` with only gate ``on`` on (None: all off, or no gates), its
    float inputs on the device and its conditions on the host, as an If reads them."""
    import onnxruntime as ort

    opts = profiler.session_options()
    providers = [profiler.CPU] if provider == profiler.CPU else [(profiler.CUDA, {"device_id": 0}), profiler.CPU]
    sess = ort.InferenceSession(model, opts, providers=providers)
    binding = sess.io_binding()
    device = "cpu" if provider == profiler.CPU else "cuda"
    for i in sess.get_inputs():
        if i.type == "tensor(bool)":
            binding.bind_cpu_input(i.name, np.array(i.name == f"c{on}"))
        else:
            binding.bind_ortvalue_input(
                i.name, ort.OrtValue.ortvalue_from_numpy(np.ones(i.shape, np.float32), device, 0)
            )
    for o in sess.get_outputs():
        binding.bind_output(o.name, device)
    for _ in range(20):
        sess.run_with_iobinding(binding)
    values = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(runs):
            sess.run_with_iobinding(binding)
        binding.synchronize_outputs()
        values.append((time.perf_counter() - t0) / runs * 1e6)
    return statistics.median(values)


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
    alone, gates = gated()
    for provider in [profiler.CPU] + [profiler.CUDA] * profiler.cuda_works():
        row = {"provider": provider, "gates": GATES, "us_alone": time_runs(alone, None, provider)}
        row |= {"us_gated": time_runs(gates, "g0", provider), "us_all_off": time_runs(gates, None, provider)}
        row["us_gated_less_off"] = row["us_gated"] - row["us_all_off"]
        rows.append({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()})
        print(json.dumps(rows[-1]), flush=True)
    if args.result is not None:
        args.result.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
