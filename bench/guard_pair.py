"""The end-to-end guard's verdict on one pair of files (original, rewrite), as optimize takes it (CPU, dims
batch=1 seq=32): for running two at once and comparing them with an independent timing (bench/time_pair.py).

    PYTHONPATH=. python bench/guard_pair.py models/bert_tiny.onnx REWRITE.onnx
"""

import json
import sys

from taso import cost
from taso import onnx as onnx_io
from taso.cost import profiler
from taso.optimize import guard

a, b = sys.argv[1], sys.argv[2]
dims = {"batch": 1, "seq": 32}
ga, gb = onnx_io.load_model(a), onnx_io.load_model(b)
cal = cost.Calibration(run_ms=0.01, kernel_ms=0.002, gflops=50.0, gbps=10.0, reference_ms=0.05)
model = cost.CostModel(profiler.pick_device("cpu"), None, calibration=cal, dims=dims)
print(json.dumps(guard.confirm_speedup((a, b), ga, gb, model, lambda *_: None), default=str))
