"""The analytic fallback for a unit that cannot be timed: its FLOPs and the bytes it must move, weighed against a
device's measured peak rate and bandwidth, and the kernels onnxruntime launches for it, each at the device's
kernel overhead (`taso.cost.calibration.Calibration.estimate`).
"""

from __future__ import annotations

import numpy as np

from taso import onnx as onnx_io
from taso.cost.fusion import VIEWS
from taso.cost.measure import read_on
from taso.cost.profiler import optimized_ops
from taso.cost.unit import graph_digest
from taso.ir import Graph, TensorType


def _numel(t: TensorType | None) -> int:
    if t is None or not t.is_static:
        return 0
    return int(np.prod(t.shape, dtype=np.int64))  # type: ignore[arg-type]


def flops(ug: Graph) -> float:
    """Arithmetic of a unit: exact for the matrix ops and attention, one op per output element otherwise."""
    total = 0.0
    for n in ug.nodes:
        out = _numel(ug.types.get(n.outputs[0])) if n.outputs else 0
        if n.op in ("MatMul", "Gemm") and not n.is_opaque:
            a = ug.types[n.inputs[0]]
            k = a.shape[-2] if n.op == "Gemm" and n.attr.get("transA") else a.shape[-1]  # type: ignore[index]
            total += 2.0 * out * (k if isinstance(k, int) else 1)
        elif n.op == "Conv" and not n.is_opaque:
            w = ug.types[n.inputs[1]].shape
            total += 2.0 * out * int(np.prod(w[1:]))  # type: ignore[index,arg-type]
        elif n.op == "MultiHeadAttention" and not n.is_opaque:  # Q K^T and its product with V, per head
            key = ug.types[n.inputs[1]].shape
            total += 4.0 * out * (key[-2] if len(key) == 4 else key[1])  # type: ignore[arg-type,index]
        elif n.op in ("AveragePool", "MaxPool") and not n.is_opaque:
            total += out * int(np.prod(n.attr["kernel_shape"]))  # type: ignore[arg-type]
        else:
            total += out
    return total


def traffic(ug: Graph) -> float:
    """Bytes a unit must move at least: every input read once, every output written once."""
    values = (*ug.inputs, *ug.weights, *ug.outputs)
    return float(sum(_numel(ug.types.get(v)) * np.dtype(ug.types[v].dtype).itemsize for v in values if v in ug.types))


def kernels(ug: Graph) -> int:
    """Kernels onnxruntime launches for a unit in a model: its nodes as onnxruntime's fusions leave them, read on
    (`read_on`, as in the model) and views left out. Charging one per node instead credited a rewrite that
    removes a node onnxruntime fuses for free: moving a GELU's final ``* 0.5`` into the next MatMul's weight
    saved one Mul of seven, where the chain had run as one Gelu kernel and without that Mul runs as four
    (ViT-B/16 TorchScript, all of its units estimated: 12 GELUs left unfused, 0.98x on the CPU). Asked of the
    CPU provider at ENABLE_EXTENDED whatever the device, as `fused_when_read` is, once per unit and process; a
    unit onnxruntime cannot load, or runs through Casts it inserts (float16 on the CPU, which fuses nothing
    there and says nothing of the device), is charged one kernel per node."""
    if len(ug.nodes) < 2:
        return len(ug.nodes)
    key = graph_digest(ug)
    if key not in _kernels:
        _kernels[key] = _launched(ug)
    return _kernels[key]


_kernels: dict[str, int] = {}
"""`kernels`' answers by `graph_digest`, for this process: a search estimates a unit each time it is met anew."""


def _launched(ug: Graph) -> int:
    try:
        census = optimized_ops(onnx_io.model_bytes(read_on(ug)), cuda=False, layout=False)
    except Exception:  # onnxruntime raises its own exception types
        return len(ug.nodes)
    if census.get("Cast", 0) > sum(n.op == "Cast" for n in ug.nodes):
        return len(ug.nodes)
    return max(1, sum(k for op, k in census.items() if op not in VIEWS))
