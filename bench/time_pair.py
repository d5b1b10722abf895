"""An independent timing of two ONNX files, none of subst's timing code: plain onnxruntime sessions of one
thread, runs alternated, the median of each (symbolic dims: batch 1, others 32; integer inputs zero).

    python bench/time_pair.py ORIGINAL.onnx REWRITE.onnx 400
"""

import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

a, b, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
opts = ort.SessionOptions()
opts.intra_op_num_threads = 1
sess = [ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]) for p in (a, b)]
feeds = {}
for i in sess[0].get_inputs():
    shape = [d if isinstance(d, int) else (1 if "batch" in str(d) else 32) for d in i.shape]
    feeds[i.name] = (
        np.zeros(shape, np.int64)
        if "int" in i.type
        else np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    )
times = [[], []]
for s in sess:
    for _ in range(20):
        s.run(None, feeds)
for r in range(rounds):
    for k in (r % 2, 1 - r % 2):
        t = time.perf_counter()
        sess[k].run(None, feeds)
        times[k].append((time.perf_counter() - t) * 1e3)
m = [statistics.median(t) for t in times]
print(json.dumps({"original_ms": m[0], "result_ms": m[1], "speedup": m[0] / m[1], "runs": rounds}))
