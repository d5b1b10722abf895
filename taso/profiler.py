"""Timing ONNX models in onnxruntime on the target device, and naming that device.

Latency is measured end to end around `run` (CUDA: inputs and outputs bound on the GPU with io_binding, so
host copies stay out; ORT synchronises its stream at the end of each run), after warm-up runs that take
cuDNN's algorithm search out of the numbers; the median of many samples is kept.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np

from taso import onnx_io
from taso.errors import BadInput
from taso.ir import Graph, Node, TensorType

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class Device:
    """What a measurement is valid for: costs are cached under `key`."""

    provider: str
    name: str
    driver: str
    ort_version: str

    @property
    def key(self) -> str:
        return f"{self.provider}|{self.name}|{self.driver}|ort-{self.ort_version}"

    @property
    def is_cuda(self) -> bool:
        return self.provider == CUDA


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} x{os.cpu_count()}"


def _gpu_name() -> tuple[str, str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        name, driver = (part.strip() for part in out.splitlines()[0].split(","))
        return name, driver
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return "unknown GPU", "unknown driver"


@cache
def cuda_works() -> bool:
    """True when onnxruntime's CUDA provider is installed and actually loads (a session runs on it)."""
    import onnxruntime as ort

    if CUDA not in ort.get_available_providers():
        return False
    t = TensorType("float32", (4,))
    probe = Graph((Node("Relu", ("x",), ("y",)),), ("x",), ("y",), {"x": t, "y": t})
    try:
        sess = ort.InferenceSession(onnx_io.model_bytes(probe), _options(), providers=[CUDA])
        return CUDA in sess.get_providers()
    except Exception:  # a missing CUDA/cuDNN library shows up here
        return False


def pick_device(choice: str = "auto") -> Device:
    """``auto``: CUDA when its provider loads, else CPU; ``cuda`` refuses if it does not load."""
    import onnxruntime as ort

    if choice not in ("auto", "cuda", "cpu"):
        raise BadInput(f"unknown device {choice!r}; use auto, cuda or cpu")
    use_cuda = choice == "cuda" or (choice == "auto" and cuda_works())
    if choice == "cuda" and not cuda_works():
        raise BadInput("--device cuda: onnxruntime's CUDA provider is not available here (install onnxruntime-gpu)")
    if use_cuda:
        name, driver = _gpu_name()
        return Device(CUDA, name, driver, ort.__version__)
    return Device(CPU, _cpu_name(), platform.system(), ort.__version__)


def _options(threads: int = 0):  # noqa: ANN202 (onnxruntime type)
    """Session options; ``threads`` intra-op threads (0: onnxruntime's default, one per core)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return opts


@dataclass(frozen=True)
class Timing:
    median_ms: float
    samples: int
    spread_ms: float
    """Interquartile range of the samples: a difference below it is noise."""


def time_model(
    model: bytes | str,
    feeds: Mapping[str, np.ndarray],
    device: Device,
    warmup: int = 10,
    samples: int = 30,
    min_sample_s: float = 0.002,
    conv_algo_search: str = "EXHAUSTIVE",
    threads: int = 0,
) -> Timing:
    """Median latency of one run of ``model`` on ``device``; each sample averages enough runs to last
    ``min_sample_s``, so timer resolution does not matter for microsecond kernels. ``conv_algo_search`` is
    cuDNN's (onnxruntime's default, EXHAUSTIVE, times candidate algorithms when the session starts)."""
    import onnxruntime as ort

    providers: list = [CPU]
    if device.is_cuda:
        providers = [(CUDA, {"device_id": 0, "cudnn_conv_algo_search": conv_algo_search}), CPU]
    sess = ort.InferenceSession(model, _options(threads), providers=providers)
    if device.is_cuda:
        binding = sess.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
        for out in sess.get_outputs():
            binding.bind_output(out.name, "cuda")

        def once() -> None:
            sess.run_with_iobinding(binding)

    else:
        names = [o.name for o in sess.get_outputs()]
        feed = dict(feeds)

        def once() -> None:
            sess.run(names, feed)

    for _ in range(warmup):
        once()
    t0 = time.perf_counter()
    once()
    single = max(time.perf_counter() - t0, 1e-7)
    per_sample = max(1, min(1000, int(min_sample_s / single)))
    values = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(per_sample):
            once()
        values.append((time.perf_counter() - t0) * 1000 / per_sample)
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return Timing(statistics.median(values), samples * per_sample, q[2] - q[0])
