"""The IR back into a ModelProto with the model's IR version, opsets, names, doc strings and metadata, and
saved atomically (temp folder + rename), with external data when the source had it or the weights pass
protobuf's 2 GB limit."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import helper, numpy_helper

from taso import ops
from taso.errors import BadInput
from taso.ir import Graph, Node, TensorType, lint
from taso.onnx.read import MIN_OPSET, PROTOBUF_LIMIT


def _value_info(name: str, t: TensorType | None, doc: str = "") -> onnx.ValueInfoProto:
    if t is None:
        vi = onnx.ValueInfoProto(name=name)
    else:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
        vi = helper.make_tensor_value_info(name, elem, None if t.shape is None else list(t.shape))
    if doc:
        vi.doc_string = doc
    return vi


def opset_of(g: Graph) -> int:
    """The default domain's opset that ``g`` declares: the ops and attribute forms export may write."""
    return g.meta.opset("") or g.meta.opset("ai.onnx") or MIN_OPSET


def _opsets(g: Graph) -> tuple[tuple[str, int], ...]:
    """The model's opsets, with version 1 of each domain a catalogue op written into it needs and the model did
    not import (a rewrite that brought in onnxruntime's first fused kernel)."""
    have = {d for d, _ in g.meta.opsets}
    needed = sorted({ops.get(n.op).domain for n in g.nodes if not n.is_opaque} - have - {""})
    return (*g.meta.opsets, *((d, 1) for d in needed))


def _attrs_as_inputs(spec: ops.Export, d: ops.OpDef, opset: int) -> ops.Export:
    """``spec`` with the attributes its ONNX op takes as constant inputs at ``opset`` (`OpDef.attr_inputs`)
    moved there, in input order."""
    moved = sorted((pos, k) for k, pos, since in d.attr_inputs if opset >= since and k in spec.attrs)
    if not moved:
        return spec
    extra = tuple(np.asarray(spec.attrs[k], np.int64) for _, k in moved)
    names = {k for _, k in moved}
    kept = {k: v for k, v in spec.attrs.items() if k not in names}
    return ops.Export(spec.op_type, kept, (*spec.extra_inputs, *extra))


Known = dict[tuple[str, tuple[int, ...], bytes], str]
"""Small integer constants the model already holds, by (dtype, shape, bytes) -> the value's name."""


def _key(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    return a.dtype.str, a.shape, a.tobytes()


def _known_constants(g: Graph) -> Known:
    """The model's int64 vectors and scalars (Unsqueeze axes import read into an attribute stay its weights):
    export writes an attribute back as the input that held it, so a round trip keeps the file's names."""
    return {_key(d.array): w for w, d in reversed(g.data.items()) if d.array.dtype == np.int64 and d.array.ndim <= 1}


def _constant_node_value(n: Node) -> np.ndarray | None:
    """The value of an opaque Constant node (the form exporters give axes), None for any other node."""
    if n.op != "Constant" or n.domain or not n.is_opaque:
        return None
    proto = onnx.NodeProto()
    proto.ParseFromString(n.opaque or b"")
    return next((numpy_helper.to_array(a.t) for a in proto.attribute if a.name == "value"), None)


def _placed(inputs: tuple[str, ...], positions: tuple[int, ...]) -> list[str]:
    """``inputs`` at their ONNX positions (`OpDef.onnx_inputs`), the ones between empty; as they are without any."""
    if not positions:
        return list(inputs)
    placed = [""] * (max(positions[: len(inputs)], default=-1) + 1)
    for p, name in zip(positions, inputs):
        placed[p] = name
    return placed


def _export_node(n: Node, g: Graph, extra: list[onnx.TensorProto], taken: set[str], known: Known) -> onnx.NodeProto:
    """The NodeProto for ``n``; constant inputs the ONNX form needs (e.g. Pad's pads) go to ``extra``, or are
    read from a value that holds them already (``known``, which gains what is written)."""
    if n.is_opaque:
        proto = onnx.NodeProto()
        proto.ParseFromString(n.opaque)  # type: ignore[arg-type]
        proto.op_type = n.op
        if n.domain:
            proto.domain = n.domain
        proto.input.extend(n.inputs)
    else:
        d, opset = ops.get(n.op), opset_of(g)
        if opset < d.min_opset:  # the search keeps such rules out (`taso.search.rulecache.usable_at`): a last line
            raise BadInput(f"{n.op} {n.name or n.outputs[0]!r} needs opset {d.min_opset}; the model declares {opset}")
        spec = _attrs_as_inputs(d.to_onnx(n.attr, [g.types[i] for i in n.inputs if i]), d, opset)
        proto = onnx.NodeProto(op_type=spec.op_type, domain=d.domain)
        for k, v in sorted(spec.attrs.items()):
            value = numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
            proto.attribute.append(helper.make_attribute(k, value))
        proto.input.extend(_placed(n.inputs, d.onnx_inputs))
        for i, value in enumerate(spec.extra_inputs):
            name = known.get(_key(value))
            if name is None:
                name = f"{n.name or n.outputs[0]}__{spec.op_type.lower()}{i}"
                while name in taken:
                    name += "_"
                taken.add(name)
                extra.append(numpy_helper.from_array(value, name))
                known[_key(value)] = name
            proto.input.append(name)
        if spec.op_type == "Split" and len(proto.input) == 1 and opset >= 18:
            # From opset 18 an equal Split must say how many parts: the output count no longer does.
            proto.attribute.append(helper.make_attribute("num_outputs", len(n.outputs)))
    proto.output.extend(n.outputs)
    if n.name:
        proto.name = n.name
    if n.doc:
        proto.doc_string = n.doc
    return proto


EXTERNAL_THRESHOLD = 1024
"""Weights of at least this many bytes go to the data file when a model is saved with external data."""


def _initializer(name: str, array: np.ndarray, sink: BinaryIO | None, location: str) -> onnx.TensorProto:
    """A TensorProto for ``array``; with a ``sink``, large payloads are streamed to it and only referenced,
    so a model's weights are never copied into one protobuf (which cannot exceed 2 GB)."""
    if sink is None or array.nbytes < EXTERNAL_THRESHOLD or array.dtype.kind in "OUS":
        return numpy_helper.from_array(array, name)
    t = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape)
    offset = sink.tell()
    sink.write(memoryview(np.ascontiguousarray(array)).cast("B"))
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(array.nbytes))):
        t.external_data.add(key=key, value=value)
    return t


def to_proto(g: Graph, sink: BinaryIO | None = None, location: str = "") -> onnx.ModelProto:
    """The ModelProto for ``g``; with a ``sink``, large weights are written there as external data."""
    lint(g)
    docs = dict(g.meta.docs)
    taken = set(g.values())
    extra: list[onnx.TensorProto] = []
    known = _known_constants(g)
    nodes = []
    for n in g.nodes:
        nodes.append(_export_node(n, g, extra, taken, known))
        value = _constant_node_value(n)
        if value is not None and value.dtype == np.int64 and value.ndim <= 1:
            known.setdefault(_key(value), n.outputs[0])
    initializers = []
    for w in g.weights:
        if w not in g.data:
            raise BadInput(f"weight {w!r} has no data; only graphs with concrete weights can be exported")
        t = _initializer(w, g.data[w].array, sink, location)
        if docs.get(w):
            t.doc_string = docs[w]
        initializers.append(t)
    graph = helper.make_graph(
        nodes,
        g.meta.graph_name,
        [_value_info(i, g.types.get(i), docs.get(i, "")) for i in g.inputs],
        [_value_info(o, g.types.get(o), docs.get(o, "")) for o in g.outputs],
        initializer=initializers + extra,
        doc_string=g.meta.graph_doc or None,
        value_info=[_value_info(v, g.types.get(v)) for v in g.meta.annotated if v in g.producers],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in _opsets(g)],
        producer_name=g.meta.producer_name,
    )
    model.ir_version = g.meta.ir_version
    if g.meta.producer_version:
        model.producer_version = g.meta.producer_version
    if g.meta.domain:
        model.domain = g.meta.domain
    model.model_version = g.meta.model_version
    if g.meta.doc:
        model.doc_string = g.meta.doc
    helper.set_model_props(model, dict(g.meta.metadata))
    for raw in g.meta.functions:
        f = onnx.FunctionProto()
        f.ParseFromString(raw)
        model.functions.append(f)
    return model


def save_model(g: Graph, path: str | os.PathLike[str], external_data: bool | None = None) -> Path:
    """Write ``g`` to ``path`` atomically (staged in a temp folder, then renamed). Weights go to
    ``<name>.data`` when asked, when the source had external data, or when they pass protobuf's 2 GB limit."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise BadInput(f"{target}: folder {folder} does not exist")
    if target.is_dir():
        raise BadInput(f"{target}: is a folder")
    weight_bytes = sum(d.array.nbytes for d in g.data.values())
    external = external_data if external_data is not None else g.meta.external_data
    external = external or weight_bytes >= PROTOBUF_LIMIT
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=folder))
    except OSError as e:
        raise BadInput(f"{target}: cannot write there ({e.strerror})") from None
    try:
        staged, data_name = tmp / target.name, f"{target.name}.data"
        if external:
            with open(tmp / data_name, "wb") as sink:
                model = to_proto(g, sink, data_name)
        else:
            model = to_proto(g)
        onnx.save_model(model, str(staged))
        move_model(staged, target)
    except OSError as e:
        raise BadInput(f"{target}: cannot write ({e.strerror})") from None
    finally:
        for leftover in tmp.iterdir():
            leftover.unlink()
        tmp.rmdir()
    return target


def move_model(src: Path, dst: Path) -> Path:
    """Move a saved model (and its ``.data`` file, if any) into place: data first, so the model never points
    at missing weights."""
    data = src.with_name(f"{src.name}.data")
    if data.exists():
        os.replace(data, dst.with_name(f"{dst.name}.data"))
    os.replace(src, dst)
    return dst


def model_bytes(g: Graph) -> bytes:
    """``g`` serialized, for onnxruntime sessions made in memory (small graphs: units, probes)."""
    return to_proto(g).SerializeToString()
