"""A device's constants, measured once per device: a run's fixed overhead, a kernel's, the peak FLOP rate and
bandwidth an estimate weighs a unit against, and the host speed every unit measurement is scaled to; and the
ratios that carry another device's cost table to this one (`Scales`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from taso import onnx as onnx_io
from taso.cost.estimate import flops, kernels, traffic
from taso.cost.profiler import DEFAULT_MODE, Device, Mode, time_model
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs


@dataclass(frozen=True)
class Calibration:
    """Per-device constants measured once: a run's fixed overhead, a kernel's, the two ceilings, and how quick
    the host was then (`reference_ms`, the yardstick every unit measurement is scaled to)."""

    run_ms: float
    kernel_ms: float
    gflops: float
    gbps: float
    reference_ms: float = 0.0
    """The quickest run of `taso.profiler`'s tiny reference model during calibration; 0: unknown (a store
    calibrated before it was kept), and unit measurements are then not scaled."""

    def estimate(self, ug: Graph) -> float:
        return max(flops(ug) / (self.gflops * 1e6), traffic(ug) / (self.gbps * 1e6)) + self.kernel_ms * kernels(ug)

    def at_host(self, scale: float) -> Calibration:
        """The host-bound constants (run and kernel overhead, the yardstick) on a host ``scale`` times slower."""
        return replace(
            self, run_ms=self.run_ms * scale, kernel_ms=self.kernel_ms * scale, reference_ms=self.reference_ms * scale
        )


DEFAULT_CALIBRATION = Calibration(run_ms=0.01, kernel_ms=0.005, gflops=100.0, gbps=20.0)
"""A 2-core CPU's orders of magnitude: used when nothing may be measured and no calibration is cached."""


def _chain(op: str, shape: tuple[int, ...], length: int, second: bool = False) -> tuple[Graph, dict[str, np.ndarray]]:
    """``length`` element-wise ops in a row over one input (with a second input for binary ops)."""
    t = TensorType("float32", shape)
    nodes, prev = [], "x"
    for i in range(length):
        nodes.append(Node(op, (prev, "y") if second else (prev,), (f"v{i}",), make_attrs({})))
        prev = f"v{i}"
    inputs = ("x", "y") if second else ("x",)
    types = {v: t for v in (*inputs, *(f"v{i}" for i in range(length)))}
    rng = np.random.default_rng(0)
    return Graph(tuple(nodes), inputs, (prev,), types), {
        v: rng.standard_normal(shape).astype(np.float32) for v in inputs
    }


def _matmul(n: int) -> tuple[Graph, dict[str, np.ndarray]]:
    t = TensorType("float32", (n, n))
    rng = np.random.default_rng(0)
    w = WeightData(rng.standard_normal((n, n)).astype(np.float32))
    g = Graph((Node("MatMul", ("x", "w"), ("y",)),), ("x",), ("y",), {"x": t, "w": t, "y": t}, ("w",), {"w": w})
    return g, {"x": rng.standard_normal((n, n)).astype(np.float32)}


def calibrate(device: Device, mode: Mode = DEFAULT_MODE) -> Calibration:
    """Measure run overhead and per-kernel cost (1 vs 11 tiny Relus), peak FLOP/s (a large MatMul) and
    bandwidth (a large Add: two reads and a write per element), timed as ``mode`` times units (under CUDA graph
    capture a run's and a kernel's overhead shrink to a replay's), and keep the quickest reference run timed
    beside them: the host speed unit costs are scaled to (`to_calibrated_host`)."""
    one = time_model(onnx_io.model_bytes(_chain("Relu", (4,), 1)[0]), _chain("Relu", (4,), 1)[1], device, mode=mode)
    g11, f11 = _chain("Relu", (4,), 11)
    eleven = time_model(onnx_io.model_bytes(g11), f11, device, mode=mode)
    kernel = max((eleven.median_ms - one.median_ms) / 10, 1e-4)
    run = max(one.median_ms - kernel, 0.0)
    n = 4096 if device.is_cuda else 1024
    mm, feeds = _matmul(n)
    big = time_model(onnx_io.model_bytes(mm), feeds, device, warmup=3, samples=7, mode=mode)
    gflops = 2 * n**3 / max(big.median_ms - run, 1e-3) / 1e6
    size = (64 * 2**20) if device.is_cuda else (8 * 2**20)
    add, feeds = _chain("Add", (size,), 1, second=True)
    wide = time_model(onnx_io.model_bytes(add), feeds, device, warmup=3, samples=7, mode=mode)
    gbps = 3 * 4 * size / max(wide.median_ms - run, 1e-3) / 1e6
    reference = min(t.reference_ms or float("inf") for t in (one, eleven, big, wide))
    return Calibration(run, kernel, gflops, gbps, reference if reference < float("inf") else 0.0)


@dataclass(frozen=True)
class Scales:
    """What a table of another device's costs is multiplied by here: the median ratio (measured here over the
    table's) of the reference units of a unit's class (its head op) where any was measured, else of all. A GPU
    differs from another by class (a faster tensor core moves a Conv, not an Add), so one ratio for all is the
    fallback, not the rule."""

    by_class: Mapping[str, float]
    overall: float
    references: int

    @staticmethod
    def read(pairs: Sequence[tuple[str, float, float]]) -> Scales | None:
        """The scales of reference units (label, cost measured here, cost in the table); None where none has a
        cost on both: a unit whose marginal cost was lost in the noise (measured 0) says nothing of a ratio, and
        alone it would cost its whole class nothing."""
        ratios: dict[str, list[float]] = {}
        for label, here, there in pairs:
            if here > 0 and there > 0:
                ratios.setdefault(unit_class(label), []).append(here / there)
        if not ratios:
            return None
        overall = statistics.median(r for rs in ratios.values() for r in rs)
        return Scales({c: statistics.median(rs) for c, rs in ratios.items()}, overall, sum(map(len, ratios.values())))

    @staticmethod
    def fit(pairs: Sequence[tuple[str, float, float]], least: int = 0) -> Scales | None:
        """The scales between two shipped tables over the units both hold (class, cost in the table scaled to,
        cost in the one scaled): per class the median log-ratio where ``least`` units of it are shared, else
        the median of all; None where fewer than ``least`` (or no) units have a cost in both. A median of logs,
        not a mean: a few units timed in a slow spell on either lease move it little. Class "" (a unit neither
        table labels) counts only towards the overall scale."""
        logs: dict[str, list[float]] = {}
        for cls, here, there in pairs:
            if here > 0 and there > 0:
                logs.setdefault(cls, []).append(math.log(here / there))
        every = [r for rs in logs.values() for r in rs]
        if not every or len(every) < least:
            return None
        by_class = {c: math.exp(statistics.median(rs)) for c, rs in logs.items() if c and len(rs) >= least}
        return Scales(by_class, math.exp(statistics.median(every)), len(every))

    def of(self, label: str) -> float:
        return self.by_class.get(unit_class(label), self.overall)


def unit_class(label: str) -> str:
    """A unit's class: its head op (a unit's label is its ops joined by +)."""
    return label.split("+", 1)[0]
