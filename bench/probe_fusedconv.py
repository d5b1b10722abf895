"""Does onnxruntime's FusedConv with a residual input pay on this GPU? A probe of a lever before building it, not a
rewrite subst makes: every Relu(Add(Conv(x, w, b), z)) of a corpus model is rewritten by hand into
``com.microsoft`` FusedConv(x, w, b, z, activation="Relu") (one cuDNN ConvolutionBiasActivation call where the CUDA
provider's own fusions leave three kernels: its ConvAddActivationFusion is registered for the CPU provider only),
the outputs compared on the device, and original, original again and the fused file timed side by side as
bench_corpus.py times them, without and under CUDA graph capture.

    PYTHONPATH=/tmp/site:. python3 bench/probe_fusedconv.py resnet50_ts regnety_002_ts --result $OUT/probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
from bench_corpus import time_captured, time_variants  # noqa: E402

from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute import check  # noqa: E402


def fuse_residuals(m: onnx.ModelProto) -> int:
    """Each Relu of an Add of a Conv (read by that Add alone) and another tensor made one FusedConv; their count."""
    g = m.graph
    made = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in g.output}

    def private(name: str) -> bool:
        return readers.get(name) == 1 and name not in outputs

    gone, fused = set(), {}
    for relu in g.node:
        add = made.get(relu.input[0])
        if relu.op_type != "Relu" or add is None or add.op_type != "Add" or not private(add.output[0]):
            continue
        for side in (0, 1):
            conv = made.get(add.input[side])
            if conv is None or conv.op_type != "Conv" or id(conv) in gone or not private(conv.output[0]):
                continue
            inputs = [*conv.input, *[""] * (3 - len(conv.input)), add.input[1 - side]]
            node = helper.make_node("FusedConv", inputs, list(relu.output), conv.name + "_fused", activation="Relu")
            node.domain = "com.microsoft"
            node.attribute.extend(conv.attribute)
            gone |= {id(conv), id(add)}
            fused[id(relu)] = node
            break
    nodes = [fused.get(id(n), n) for n in g.node if id(n) not in gone]
    del g.node[:]
    g.node.extend(nodes)
    if fused and not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(fused)


def probe(name: str, device: profiler.Device, rounds: int) -> dict:
    src, dst = Path(f"/tmp/probe_{name}.onnx"), Path(f"/tmp/probe_{name}.fused.onnx")
    corpus.write(name, src)
    m = onnx.load(str(src))
    row: dict = {"fused_blocks": fuse_residuals(m)}
    onnx.save(m, str(dst))
    feeds = check.random_inputs(onnx_io.load_model(src), seed=0, dims=corpus.dims(name))
    providers = [profiler.CUDA] if device.is_cuda else [profiler.CPU]
    a, b = (ort.InferenceSession(str(p), providers=providers).run(None, feeds) for p in (src, dst))
    row["max_rel_err"] = max(float(np.abs(x - y).max() / (np.abs(x).max() + 1e-9)) for x, y in zip(a, b))
    variants = {"original": str(src), "again": str(src), "fused": str(dst)}
    ms = time_variants(name, variants, device, rounds)
    row |= {"ms": ms, "speedup": ms["original"] / ms["fused"], "noise": ms["original"] / ms["again"]}
    if device.is_cuda:
        captured, refused = time_captured(name, variants, device, rounds)
        row |= {"ms_graph": captured, "refused": refused}
        if "fused" in captured:
            row["speedup_graph"] = captured["original"] / captured["fused"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="corpus names")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--result", type=Path, required=True)
    args = ap.parse_args()
    device = profiler.pick_device(args.device)
    rows = {}
    for name in args.models:
        rows[name] = probe(name, device, args.rounds)
        print(name, json.dumps(rows[name]), flush=True)
        args.result.write_text(json.dumps({"device": device.key, "models": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
