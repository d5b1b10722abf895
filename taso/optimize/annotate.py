"""The result's intermediate value types written into it, so that onnxruntime's shape-dependent fusions fire.

onnxruntime fuses a residual Add (and the bias Add before it) into the LayerNormalization after it
(SkipLayerNormalization) only where it can tell both Add operands have one 3-D shape. Its own inference at load
often cannot: behind a Reshape to a computed shape each dim is a fresh unknown. subst's inference (onnx's, then
onnxruntime's session types for what onnx leaves untyped, `taso.onnx.infer`) names those dims, and written as
value_info they let the fusion fire: ELECTRA (TorchScript export) got 8 SkipLayerNormalizations of 9 where
the original and an unannotated result got none and onnxslim's output (which writes onnx's inference) got 4.

The types are inferred afresh from the graph being written (from the source's own declarations on), never taken
from what the rewrites carried: an
annotation is a claim onnxruntime trusts (a stale or concretized type would make it fuse or size for the
wrong shape at sizes the check does not run), so it must say only what inference says of this graph.
"""

from __future__ import annotations

from dataclasses import replace

from taso import onnx as onnx_io
from taso.ir import Graph


def annotated(g: Graph) -> Graph:
    """``g`` with a value_info to be written for each intermediate value whose rank and element type its fresh
    inference knows (an unknown dim is written unnamed, which claims nothing), seeded with the types the source
    model declared (the exporter's, which export wrote back before: Phi's dynamo export names ``seq`` where
    inference alone makes a new dim of it, and a new name written in its place blocked a fusion)."""
    declared = {v: g.types[v] for v in g.meta.annotated if v in g.types and v in g.producers}
    inferred = onnx_io.reinfer(g, known=declared)
    known = {v: t for v, t in inferred.types.items() if t.shape is not None}
    values = tuple(o for n in g.nodes for o in n.outputs if o in known and o not in g.outputs)
    return replace(g, types={**g.types, **{v: known[v] for v in values}}, meta=replace(g.meta, annotated=values))
