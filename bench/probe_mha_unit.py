"""onnxruntime's MultiHeadAttention alone against its spelled-out form, one node set per session, on the CUDA
provider: is the fused kernel faster as a unit? (issue 48; attention-h200.json asks the same in whole models)

    PYTHONPATH=/tmp/site python3 bench/probe_mha_unit.py $OUT/mha-unit-h200.json

Query (1, S, N*64), key and value already split into heads (1, N, S, 64), as the proved attention rules hand them
to onnxruntime; the spelled-out form is what TorchScript exports (Reshape, Transpose, MatMul, Mul by the scale,
Softmax, MatMul, Transpose, Reshape). Median host wall of 200 runs after 20 warm-up runs, at four sizes.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper

SIZES = [(197, 3, 64), (16, 8, 64), (50, 12, 64), (1500, 6, 64)]  # DeiT-tiny, T5-small, ViT-B/32-like, Whisper


def _models(s: int, n: int, h: int) -> tuple[ModelProto, ModelProto]:
    d = n * h
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, s, d])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, n, s, h])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, n, s, h])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, s, d])
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=n)
    fused = helper.make_model(
        helper.make_graph([node], "mha", [q, k, v], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    consts = [
        helper.make_tensor("shp", TensorProto.INT64, [4], [1, s, n, h]),
        helper.make_tensor("shp3", TensorProto.INT64, [3], [1, s, d]),
        helper.make_tensor("sc", TensorProto.FLOAT, [], [h**-0.5]),
    ]
    nodes = [
        helper.make_node("Reshape", ["q", "shp"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qh", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "sc"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["p"], axis=3),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("Transpose", ["o"], ["o2"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o2", "shp3"], ["y"]),
    ]
    spelled = helper.make_model(
        helper.make_graph(nodes, "spelled", [q, k, v], [y], initializer=consts),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    for m in (fused, spelled):
        m.ir_version = 9  # onnxruntime 1.31 reads IR versions up to 13
    return fused, spelled


def _time(model: ModelProto, feeds: dict[str, np.ndarray]) -> tuple[float, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    for _ in range(20):
        y = sess.run(None, feeds)[0]
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times)), y


def main() -> None:
    rows = {}
    for s, n, h in SIZES:
        rng = np.random.default_rng(0)
        feeds = {
            "q": rng.random((1, s, n * h), dtype=np.float32),
            "k": rng.random((1, n, s, h), dtype=np.float32),
            "v": rng.random((1, n, s, h), dtype=np.float32),
        }
        fused, spelled = _models(s, n, h)
        (a, ya), (b, yb) = _time(fused, feeds), _time(spelled, feeds)
        rows[f"s{s}_n{n}_h{h}"] = {
            "mha_ms": a,
            "spelled_ms": b,
            "speedup": b / a,
            "max_abs_diff": float(abs(ya - yb).max()),
        }
        print(f"S={s} N={n}: MultiHeadAttention {a:.3f} ms, spelled out {b:.3f} ms, {b / a:.2f}x", flush=True)
    json.dump({"rows": rows}, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
