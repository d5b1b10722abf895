"""What onnxruntime fuses, as the cost model must see it: the ops that join a head op's kernel as its epilogue,
the ops it runs as views of their input, the BatchNormalization it folds into the Conv before it at load, and
the RMS norms it runs as one kernel.
A unit is timed as one model, so a rewrite onnxruntime would have made itself is never credited as a gain.
"""

from __future__ import annotations

from dataclasses import replace

from taso import ops
from taso.ir import Graph, Kind, Node

ELEMENTWISE = ops.having(ops.EPILOGUE)
EPILOGUES: dict[str, frozenset[str]] = {
    name: frozenset().union(*map(ops.having, op.fuses)) for name, op in ops.OPS.items() if op.fuses
}
"""Head op -> ops that join its unit when they consume it (onnxruntime folds BatchNorm/Mul/Add into Conv
weights, fuses bias, activations, GELU chains and Add+LayerNormalization; on the CUDA EP it runs attention
scores MatMul+Mul+Add+Softmax as FusedMatMul + BiasSoftmax and a projection with its residual and LayerNorm
as Gemm + SkipLayerNormalization). A unit is timed as one model, so joining ops ORT happens not to fuse costs
no accuracy, while splitting ops it does fuse would charge kernels that never run: ORT 1.31's CUDA provider
runs a Conv's Relu as a kernel of its own (it fuses Conv and Relu on the CPU only), and the Conv+Relu unit's
time includes it."""


VIEWS = ops.having(ops.VIEW)
"""Ops that onnxruntime runs as a view of their input (no copy, no kernel) when the input is an intermediate
value: they join the unit that produced it. Timed alone their output is a graph output and must be copied, a
kernel the model never runs (BERT: 8 Reshapes of 6.5 us each, 8 % of its prediction on the H100)."""
REGION_CONTEXT = ELEMENTWISE | VIEWS
"""Consumers a searched region takes in (`taso.regions.with_context`): ops that join the units of its nodes."""


def as_run(ug: Graph) -> Graph:
    """``ug`` with each BatchNormalization whose parameters are weights folded into the Conv before it (when
    nothing else reads the Conv's output), as onnxruntime folds it at load: the Conv with a bias runs, the
    BatchNorm never does. A Conv+BatchNorm unit and the biased Conv that subst's fold leaves then share one
    key, one measurement and one cost, so the search sees the fold as the free rewrite it is on onnxruntime."""
    norms = [n for n in ug.nodes if n.op == "BatchNormalization"]
    if not norms:
        return ug
    producers, consumers = ug.producers, ug.consumers
    folded: dict[int, Node] = {}  # id of a Conv -> the Conv with its BatchNorm folded in
    dropped: set[int] = set()
    for n in norms:
        conv = producers.get(n.inputs[0])
        if (
            conv is None
            or conv.op != "Conv"
            or not all(v in ug.weights for v in n.inputs[1:])
            or len(consumers.get(n.inputs[0], ())) != 1
            or n.inputs[0] in ug.outputs
            or ug.types[n.inputs[2]].dtype != ug.types[n.inputs[0]].dtype
        ):
            continue
        bias = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else n.inputs[2]
        folded[id(conv)] = replace(conv, inputs=(*conv.inputs[:2], bias), outputs=n.outputs)
        dropped.add(id(n))
    if not folded:
        return ug
    nodes = tuple(folded.get(id(n), n) for n in ug.nodes if id(n) not in dropped)
    produced = {o for n in nodes for o in n.outputs}
    reads = dict.fromkeys(v for n in nodes for v in n.reads if v not in produced)
    weights = tuple(v for v in reads if v in ug.weights)  # in order of first read, as `extract` lists them
    data = {w: ug.data[w] for w in weights if w in ug.data}
    return replace(ug, nodes=nodes, weights=weights, data=data)


def rms_norms(g: Graph) -> list[list[Node]]:
    """The RMS norms of ``g``: ``x / Sqrt(ReduceMean(Pow(x, 2)) + eps)``, or ``x`` times ``1 / Sqrt(...)`` (the
    TorchScript exporter's form) or ``Reciprocal(Sqrt(...))`` (the dynamo exporter's), each with the scale Mul
    after it. onnxruntime's SimplifiedLayerNormFusion runs the first two as one kernel and not the third, so a
    norm is one unit, timed as onnxruntime runs it: costed op by op, rewriting the third into the first saved
    one kernel where it saves six (T5 and Llama, nine norms each). Each intermediate value has one reader."""
    roots = [n for n in g.nodes if n.op == "Sqrt"]
    if not roots:  # most graphs a search costs: their readers are never mapped
        return []
    producers, consumers, kinds = g.producers, g.consumers, g.kinds

    def only_reader(v: str) -> Node | None:
        readers = consumers.get(v, ())
        return readers[0] if len(readers) == 1 and v not in g.outputs else None

    def computed(n: Node) -> list[str]:
        return [v for v in n.inputs if v and kinds.get(v) is Kind.ACTIVATION]

    out = []
    for root in roots:
        if not (add := producers.get(root.inputs[0])) or add.op != "Add":
            continue
        mean = producers.get(next(iter(computed(add)), ""))
        if mean is None or mean.op != "ReduceMean" or len(computed(add)) != 1:
            continue
        square = producers.get(mean.inputs[0])
        if square is None or square.op != "Pow" or len(computed(square)) != 1:
            continue
        x = square.inputs[0]
        if not all(only_reader(v) is n for v, n in ((square.outputs[0], mean), (mean.outputs[0], add))):
            continue
        if only_reader(add.outputs[0]) is not root or (closing := only_reader(root.outputs[0])) is None:
            continue
        chain = [square, mean, add, root]
        inverse = closing.op == "Reciprocal" or (closing.op == "Div" and computed(closing) == [root.outputs[0]])
        if inverse and (scaled := only_reader(closing.outputs[0])) is not None:  # x times 1 / Sqrt(...)
            chain, closing = [*chain, closing], scaled
            if closing.op != "Mul" or set(closing.inputs) != {x, chain[-1].outputs[0]}:
                continue
        elif closing.op != "Div" or tuple(closing.inputs) != (x, root.outputs[0]):
            continue
        chain.append(closing)
        scale = only_reader(closing.outputs[0])
        if scale is not None and scale.op == "Mul" and any(kinds.get(v) is not Kind.ACTIVATION for v in scale.inputs):
            chain.append(scale)
        out.append(chain)
    return out
