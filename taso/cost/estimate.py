"""The analytic fallback for a unit that cannot be timed: its FLOPs and the bytes it must move, weighed against a
device's measured peak rate and bandwidth (`taso.cost.calibration.Calibration.estimate`).
"""

from __future__ import annotations

import numpy as np

from taso.ir import Graph, TensorType


def _numel(t: TensorType | None) -> int:
    if t is None or not t.is_static:
        return 0
    return int(np.prod(t.shape, dtype=np.int64))  # type: ignore[arg-type]


def flops(ug: Graph) -> float:
    """Arithmetic of a unit: exact for the matrix ops, one op per output element otherwise."""
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
        elif n.op in ("AveragePool", "MaxPool") and not n.is_opaque:
            total += out * int(np.prod(n.attr["kernel_shape"]))  # type: ignore[arg-type]
        else:
            total += out
    return total


def traffic(ug: Graph) -> float:
    """Bytes a unit must move at least: every input read once, every output written once."""
    values = (*ug.inputs, *ug.weights, *ug.outputs)
    return float(sum(_numel(ug.types.get(v)) * np.dtype(ug.types[v].dtype).itemsize for v in values if v in ug.types))
