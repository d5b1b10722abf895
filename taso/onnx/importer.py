"""A ModelProto into the IR: catalogue ops get normalised attributes, every other node becomes an opaque node
that keeps its attributes verbatim (and `opaque_reasons` says why, for `subst info`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from taso import ops
from taso.errors import BadInput
from taso.ir import AttrValue, Graph, IRError, ModelMeta, Node, TensorType, WeightData, lint, make_attrs
from taso.onnx.infer import _infer_types
from taso.onnx.read import _DEFAULT_DOMAINS, MIN_OPSET, Upgrade, read_proto


def load_model(path: str | os.PathLike[str]) -> Graph:
    """Read, validate and import an ONNX model; every failure is a one-line `BadInput`."""
    return import_model(path)[0]


def import_model(path: str | os.PathLike[str]) -> tuple[Graph, Upgrade | None]:
    """`load_model`'s graph, and the opset upgrade import made to the file (None if it made none)."""
    model, external, upgrade = read_proto(path)
    return from_proto(model, external_data=external), upgrade


def _attr_value(a: onnx.AttributeProto) -> AttrValue | None:
    """Plain Python for the attribute kinds the catalogue uses; None for tensors, graphs and the like."""
    if a.type == onnx.AttributeProto.INT:
        return int(a.i)
    if a.type == onnx.AttributeProto.FLOAT:
        return float(a.f)
    if a.type == onnx.AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == onnx.AttributeProto.INTS:
        return tuple(int(i) for i in a.ints)
    if a.type == onnx.AttributeProto.FLOATS:
        return tuple(float(f) for f in a.floats)
    return None


def _outer_reads(g: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from enclosing scopes."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    reads: set[str] = set()
    for node in g.node:
        for name in node.input:
            if name and name not in defined:
                reads.add(name)
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subs:
                reads |= {n for n in _outer_reads(sub) if n not in defined}
        defined.update(node.output)
    return reads | {o.name for o in g.output if o.name not in defined}


def _constant_value(name: str, producers: dict[str, onnx.NodeProto], data: dict[str, WeightData]) -> np.ndarray | None:
    if name in data:
        return data[name].array
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS:
        for a in node.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
    return None


def _kept_inputs(node: onnx.NodeProto, opset: int) -> tuple[str, ...]:
    """``node``'s inputs but those the catalogue reads as attributes at ``opset`` (`OpDef.attr_inputs`, always
    trailing: ReduceSum's axes)."""
    d = ops.OPS.get(node.op_type)
    if d is not None and d.onnx_inputs:  # the positions the entry models, trailing absent ones left out
        picked = [node.input[p] if p < len(node.input) else "" for p in d.onnx_inputs]
        while picked and not picked[-1]:
            picked.pop()
        return tuple(picked)
    moved = [pos for _, pos, since in (d.attr_inputs if d else ()) if opset >= since]
    return tuple(node.input[: min(moved)] if moved else node.input)


@dataclass(frozen=True)
class Opaque:
    """Why a node stays opaque: kept for `subst info` and reports."""

    node: str
    op: str
    reason: str


def _import_node(
    node: onnx.NodeProto,
    types: dict[str, TensorType],
    opset: int,
    producers: dict[str, onnx.NodeProto],
    data: dict[str, WeightData],
) -> tuple[Node, str | None]:
    """The IR node for ``node`` and, if it stays opaque, why."""
    reason = _catalogue_attrs(node, types, opset, producers, data)
    if isinstance(reason, dict):
        outputs = list(node.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        inputs = _kept_inputs(node, opset)
        return Node(node.op_type, inputs, tuple(outputs), make_attrs(reason), node.name, "", node.doc_string), None
    raw = onnx.NodeProto()
    raw.CopyFrom(node)
    for f in ("input", "output", "name", "doc_string", "op_type", "domain"):
        raw.ClearField(f)
    implicit: set[str] = set()
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            implicit |= _outer_reads(sub)
    return (
        Node(
            node.op_type,
            tuple(node.input),
            tuple(node.output),
            (),
            node.name,
            node.domain,
            node.doc_string,
            raw.SerializeToString(deterministic=True),
            tuple(sorted(implicit - set(node.input))),
        ),
        reason,
    )


def _as_attr(value: np.ndarray) -> AttrValue:
    """A constant input read as the attribute it stands for: a scalar as a number (Clip's bounds), else a tuple
    of ints (ReduceSum's axes)."""
    if value.ndim == 0:
        return float(value) if value.dtype.kind == "f" else int(value)
    return tuple(int(v) for v in value.ravel())


def _catalogue_attrs(
    node: onnx.NodeProto,
    types: dict[str, TensorType],
    opset: int,
    producers: dict[str, onnx.NodeProto],
    data: dict[str, WeightData],
) -> dict[str, AttrValue] | str:
    """Normalised attributes if the catalogue fully describes ``node``, else the reason it does not."""
    domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
    d = ops.OPS.get(node.op_type)
    if d is None or not d.onnx or d.domain != domain:
        return f"custom domain {node.domain}" if domain else "not in the catalogue"
    raw_attrs = {a.name: _attr_value(a) for a in node.attribute}
    if any(v is None for v in raw_attrs.values()):
        return "attribute of a kind the catalogue does not model"
    inputs = _kept_inputs(node, opset)
    if d.onnx_inputs and any(i for p, i in enumerate(node.input) if p not in d.onnx_inputs):
        return f"{node.op_type} with an input at a position the catalogue does not model"
    for name, pos, since in d.attr_inputs:
        if opset >= since and len(node.input) > pos and node.input[pos]:
            value = _constant_value(node.input[pos], producers, data)
            if value is None:
                return f"{node.op_type} {name} not a constant"
            if value.dtype.kind not in "fiu":  # bfloat16 (numpy's kind "V") would read as a truncated int
                return f"{node.op_type} {name} of type {value.dtype}, which no attribute reads"
            if value.ndim > 1:  # an attribute is a number or a flat tuple: Gather's 2-D indices would flatten
                return f"{node.op_type} {name} of rank {value.ndim}"
            raw_attrs[name] = _as_attr(value)
    in_types = [types.get(i) if i else None for i in inputs]
    outputs = [o for o in node.output if o]
    if d.outputs is not None and (len(outputs) != d.outputs or node.output[0] == ""):
        return f"{node.op_type} with {len(outputs)} outputs"
    attrs = d.from_onnx(raw_attrs, in_types, len(inputs), opset)  # type: ignore[arg-type]
    if isinstance(attrs, str):
        return attrs
    if any(not i for i in inputs):
        return "omitted optional input"
    if any(t is None for t in in_types):
        return "input type unknown"
    consts = [_constant_value(i, producers, data) if k in d.static_inputs else None for k, i in enumerate(inputs)]
    try:
        ops.infer(node.op_type, in_types, attrs, consts, len(outputs))  # type: ignore[arg-type]
    except ops.OpError as e:
        return f"shape rule declined: {e}"
    return attrs


def from_proto(model: onnx.ModelProto, external_data: bool = False) -> Graph:
    """Build the IR of a validated ModelProto (see `read_proto`)."""
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), MIN_OPSET)
    types = _infer_types(model)
    data = {t.name: WeightData(numpy_helper.to_array(t)) for t in g.initializer}
    weights = tuple(t.name for t in g.initializer)
    inputs = tuple(i.name for i in g.input if i.name not in data)
    producers = {o: n for n in g.node for o in n.output}
    nodes = []
    for n in g.node:
        node, _ = _import_node(n, types, opset, producers, data)
        nodes.append(node)
    for n in nodes:  # catalogue shape rules fill what ONNX inference left unknown
        if not n.is_opaque and any(o not in types for o in n.outputs):
            consts = [data[i].array if i in data else None for i in n.inputs]
            out = ops.infer(n.op, [types[i] for i in n.inputs], n.attr, consts, len(n.outputs))
            types.update({o: t for o, t in zip(n.outputs, out) if o not in types})
    docs = tuple((v.name, v.doc_string) for v in (*g.input, *g.output, *g.initializer) if v.doc_string)
    meta = ModelMeta(
        ir_version=model.ir_version,
        opsets=tuple((o.domain, o.version) for o in model.opset_import),
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
        doc=model.doc_string,
        graph_name=g.name,
        graph_doc=g.doc_string,
        metadata=tuple((p.key, p.value) for p in model.metadata_props),
        functions=tuple(f.SerializeToString(deterministic=True) for f in model.functions),
        docs=docs,
        annotated=tuple(vi.name for vi in g.value_info),
        external_data=external_data,
    )
    graph = Graph(tuple(nodes), inputs, tuple(o.name for o in g.output), types, weights, data, meta)
    try:
        return lint(graph)
    except IRError as e:
        raise BadInput(f"model graph is malformed: {e}") from None


def opaque_reasons(path: str | os.PathLike[str]) -> list[Opaque]:
    """For `subst info`: each node the catalogue does not take over, with the reason."""
    model, _, _ = read_proto(path)
    types = _infer_types(model)
    data = {t.name: WeightData(numpy_helper.to_array(t)) for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), MIN_OPSET)
    out = []
    for n in model.graph.node:
        _, reason = _import_node(n, types, opset, producers, data)
        if reason is not None:
            out.append(Opaque(n.name or n.output[0], f"{n.domain}::{n.op_type}" if n.domain else n.op_type, reason))
    return out


def int_attrs(n: Node) -> Mapping[str, int | tuple[int, ...]]:
    """A node's integer and integer-list attributes (Shape's ``start`` and ``end``, Transpose's ``perm``): an
    opaque node's as written (a Transpose the importer could not type stays opaque), a catalogue node's normalised
    attributes (all of them), so a stage that reasons about ops need not know which it was, nor protobuf."""
    if not n.is_opaque:
        return n.attr  # type: ignore[return-value]
    proto = onnx.NodeProto()
    proto.ParseFromString(n.opaque or b"")
    ints = {a.name: a.i for a in proto.attribute if a.type == onnx.AttributeProto.INT}
    return ints | {a.name: tuple(a.ints) for a in proto.attribute if a.type == onnx.AttributeProto.INTS}
