"""Weight-only subgraphs computed once, ahead of inference.

A value computed from weights alone (an Unsqueeze of a BatchNorm scale, a Transpose of a kernel, a constant
shape) costs nothing that inference must pay for: evaluate it once and store it as an initializer. The shape
of a tensor whose shape is static is such a value too (`fold_static_shapes`), and so is what an exporter
computes from it (BERT's position ids: Shape, Gather, Range, Unsqueeze); onnxruntime folds these at load.
Opaque ops are evaluated too, by onnxruntime on the CPU, so this is not limited to the catalogue. Beyond saving the ops,
it hands onnxruntime initializers where it expects them: its Conv+BatchNorm/Mul/Add fusions only fire on
initializers, which is where onnxsim's gains on unfused models come from.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from taso import onnx as onnx_io
from taso.execute import ortlog
from taso.ir import Graph, Kind, TensorType, WeightData, eliminate_dead, lint

MAX_BYTES = 64 * 2**20
"""A folded value larger than this stays computed: folding must not blow up the model file."""


def frontier(g: Graph) -> list[str]:
    """Weight-only values that an activation node or the graph output reads: what inference would compute."""
    kinds = g.kinds
    needed: list[str] = []
    for n in g.nodes:
        if any(kinds.get(o) is Kind.ACTIVATION for o in n.outputs):
            needed += [v for v in n.reads if kinds.get(v) is Kind.CONSTANT]
    needed += [o for o in g.outputs if kinds.get(o) is Kind.CONSTANT]
    return list(dict.fromkeys(needed))


def fold_static_shapes(g: Graph) -> Graph:
    """``g`` with each ``Shape`` of a tensor of static shape replaced by an initializer holding that shape."""
    shapes = [n for n in g.nodes if n.op == "Shape" and not n.domain and _static(g, n.inputs[0])]
    if not shapes:
        return g
    data, types = dict(g.data), dict(g.types)
    for n in shapes:
        dims = g.types[n.inputs[0]].shape
        attrs = onnx_io.int_attrs(n)
        value = np.array(dims[attrs.get("start", 0) : attrs.get("end", len(dims))], np.int64)  # type: ignore[misc]
        data[n.outputs[0]] = WeightData(value)
        types[n.outputs[0]] = TensorType("int64", value.shape)
    drop = {id(n) for n in shapes}
    nodes = tuple(n for n in g.nodes if id(n) not in drop)
    weights = (*g.weights, *(n.outputs[0] for n in shapes))
    return lint(eliminate_dead(replace(g, nodes=nodes, weights=weights, data=data, types=types)))


def _static(g: Graph, value: str) -> bool:
    t = g.types.get(value)
    return t is not None and t.is_static


def precompute(g: Graph) -> tuple[Graph, int]:
    """``g`` with its weight-only subgraphs (static shapes included) replaced by initializers; returns the
    graph and how many nodes that removed."""
    g0, g = g, fold_static_shapes(g)
    implicit = {v for n in g.nodes for v in n.implicit}
    targets = [v for v in frontier(g) if _foldable(g, v, implicit)]
    if not targets:
        return g, len(g0.nodes) - len(g.nodes)
    import onnxruntime as ort

    constant = [n for n in g.nodes if all(g.kinds.get(o) is Kind.CONSTANT for o in n.outputs if o)]
    sub = eliminate_dead(replace(g, nodes=tuple(constant), inputs=(), outputs=tuple(targets)))
    opts = ortlog.session_options()  # a subgraph it cannot evaluate is kept: its error is no news to the user
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(onnx_io.model_bytes(sub), opts, providers=["CPUExecutionProvider"])
        values = session.run(list(targets), {})
    except Exception:  # a subgraph onnxruntime cannot evaluate alone stays as it is
        return g, len(g0.nodes) - len(g.nodes)
    data = dict(g.data)
    types = dict(g.types)
    folded = []
    for name, value in zip(targets, values):
        value = np.asarray(value)
        if value.nbytes > MAX_BYTES:
            continue
        data[name] = WeightData(value)
        types[name] = TensorType(str(value.dtype), tuple(value.shape))
        folded.append(name)
    if not folded:
        return g, len(g0.nodes) - len(g.nodes)
    drop = set(folded)
    nodes = tuple(n for n in g.nodes if not any(o in drop for o in n.outputs))
    out = lint(eliminate_dead(replace(g, nodes=nodes, weights=(*g.weights, *folded), data=data, types=types)))
    return out, len(g0.nodes) - len(out.nodes)


def _foldable(g: Graph, value: str, implicit: set[str]) -> bool:
    """Deterministic, a node's only output (a node must go whole), and not read from inside a subgraph (not
    among the ``implicit`` reads of ``g``'s nodes)."""
    producer = g.producers.get(value)
    if producer is None or producer.op in onnx_io.NONDETERMINISTIC or producer.implicit:
        return False
    if len([o for o in producer.outputs if o]) != 1:
        return False
    return value not in implicit
