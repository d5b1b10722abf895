"""Operations that compute what an earlier operation already computes, read from it instead.

Exporters write the same computation once per use. TorchScript exports of transformers read ``Shape(x)`` of the
same tensor, and gather, unsqueeze and compare the same dims, once per layer and per mask (ELECTRA: 11 Shape nodes
of which 5 differ); on a GPU each such node is a kernel or a host-side step of its own. An op whose outputs are a
function of its inputs and attributes alone gives the same values for the same inputs, so a later copy's readers
can read the first one's outputs: common subexpression elimination, what onnxslim does and subst's passes did
not. Constants count as the same input where their data is equal, whatever their names: TorchScript writes each
layer's mask constants afresh (ELECTRA: the same ``Where(mask, 0, -inf)`` once per layer, over four pairs of
equal scalars). Like every pass, each application is validated on the model (`taso.optimize.rewrites.validated`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from taso.ir import Graph, Node, WeightData, eliminate_dead, lint

NEVER_MERGED = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"}
    | {"If", "Loop", "Scan", "SequenceMap"}
)
"""Standard ops whose outputs are not a function of their inputs and attributes: random draws (two draws are two
values; Dropout for its training mode), and the ops with bodies, which may draw inside. The list is ONNX's, not a
catalogue entry's trait: the pass merges ops outside the catalogue too."""
SMALL = 4096
"""Constants of at most this many elements are told apart by their data (hashed once, `WeightData.digest`);
larger ones, learned weights, by name: two equal ones are rare, and hashing them all would cost seconds."""


def merge_duplicates(g: Graph) -> tuple[Graph, int]:
    """``g`` with each node that repeats an earlier node (same domain, op, attributes and inputs, after earlier
    merges) read from that node instead; returns the graph and how many nodes that removed (``g`` itself where
    none). Left alone: custom-domain ops (their semantics are unknown) and the ops of `NEVER_MERGED`. Only explicit inputs are renamed: a repeat that is a graph output, or that a subgraph reads by
    name, stays, computing what it did."""
    same = _same_data(g)
    first: dict[tuple, Node] = {}
    renames: dict[str, str] = {}
    nodes: list[Node] = []
    for n in g.nodes:
        if any(i in renames for i in n.inputs):
            n = replace(n, inputs=tuple(renames.get(i, i) for i in n.inputs))
        nodes.append(n)
        if n.domain not in ("", "ai.onnx") or n.op in NEVER_MERGED:
            continue
        key = (
            n.domain,
            n.op,
            tuple(same.get(i, i) for i in n.inputs),
            n.attrs,
            n.opaque,
            tuple(bool(o) for o in n.outputs),
        )
        earlier = first.setdefault(key, n)
        if earlier is not n:
            renames.update((o, e) for o, e in zip(n.outputs, earlier.outputs, strict=True) if o)
    out = lint(eliminate_dead(replace(g, nodes=tuple(nodes)))) if renames else g
    removed = len(g.nodes) - len(out.nodes)
    return (out, removed) if removed else (g, 0)


def _same_data(g: Graph) -> dict[str, str]:
    """Each small constant by the name of the first constant with its data (dtype, shape and bytes)."""
    first: dict[WeightData, str] = {}
    return {w: first.setdefault(g.data[w], w) for w in g.weights if w in g.data and math.prod(g.data[w].shape) <= SMALL}
