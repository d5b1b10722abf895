"""ONNX import and export: the only module that knows protobuf.

Import validates the file (format, external-data paths, domains, opset; older opsets are upgraded with onnx's
version converter), infers shapes, and builds a `taso.ir.Graph`: catalogue ops get normalised attributes,
everything else becomes an opaque node that keeps its attributes verbatim. Export writes the graph back with
the model's IR version, opsets, names, doc strings and metadata, and saves atomically (temp file + rename),
with external data when the source had it or the weights pass protobuf's 2 GB limit.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx  # ruff: ignore[banned-api]
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper, shape_inference, version_converter

from taso import ops
from taso.errors import BadInput
from taso.ir import AttrValue, Graph, IRError, ModelMeta, Node, TensorType, WeightData, lint, make_attrs

MIN_OPSET = 13
ORT_MIN_OPSET = 7
"""The oldest default-domain opset onnxruntime runs (it has no kernels for Add-1 or Add-6, say)."""
PROTOBUF_LIMIT = 2**31 - 2**26  # leave headroom under protobuf's 2 GB cap for the graph itself
_DEFAULT_DOMAINS = ("", "ai.onnx")


# ---- loading ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upgrade:
    """What import did to a file older than `MIN_OPSET`: onnx's version converter rewrites it, adding nodes (a
    Reshape's shape attribute becomes a Constant input), so reports count the file's nodes, then the upgrade's."""

    opset: int
    """The file's default-domain opset."""
    nodes: int
    """Nodes of the file's main graph."""
    added: int
    """Nodes the upgrade added to it."""
    to: int = MIN_OPSET

    def __str__(self) -> str:
        return f"upgraded opset {self.opset} -> {self.to} (+{self.added} nodes)"


def load_model(path: str | os.PathLike[str]) -> Graph:
    """Read, validate and import an ONNX model; every failure is a one-line `BadInput`."""
    return import_model(path)[0]


def import_model(path: str | os.PathLike[str]) -> tuple[Graph, Upgrade | None]:
    """`load_model`'s graph, and the opset upgrade import made to the file (None if it made none)."""
    model, external, upgrade = read_proto(path)
    return from_proto(model, external_data=external), upgrade


def read_proto(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, bool, Upgrade | None]:
    """The validated, opset-13+ ModelProto of ``path`` with external data loaded, whether it had any, and the
    opset upgrade that made it (None if the file was opset 13+ already)."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p}: no such file")
    if not p.is_file():
        raise BadInput(f"{p}: not a file")
    try:
        model = onnx.load_model(str(p), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise BadInput(f"{p}: not an ONNX model (protobuf could not parse it: {_first_line(e)})") from None
    if model.ir_version <= 0 or not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise BadInput(f"{p}: not an ONNX model (no graph); the file may be truncated or of another format")
    external = _load_external_data(model, p)
    _check_domains(model, p)
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), None)
    nodes = len(model.graph.node)
    upgraded = _upgrade_opset(model, p)
    _check(upgraded, p)
    if upgraded is model or opset is None:
        return model, external, None
    return upgraded, external, Upgrade(opset, nodes, len(upgraded.graph.node) - nodes)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def _all_graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _all_graphs(sub)


def _external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    for g in _all_graphs(model.graph):
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                yield t
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_location == onnx.TensorProto.EXTERNAL:
                    yield a.t


def _load_external_data(model: onnx.ModelProto, path: Path) -> bool:
    """Load external tensors, refusing any location that leaves the model's folder; True if there were any."""
    base = path.parent.resolve()
    tensors = list(_external_tensors(model))
    for t in tensors:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = (base / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(base):
            raise BadInput(
                f"{path}: tensor {t.name!r} points at external data {location!r} outside the model's folder; refused"
            )
        if not target.is_file():
            raise BadInput(f"{path}: external data file {location!r} for tensor {t.name!r} is missing")
    if tensors:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(base))
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: cannot read external data: {_first_line(e)}") from None
    return bool(tensors)


def _check_domains(model: onnx.ModelProto, path: Path) -> None:
    imported = {o.domain for o in model.opset_import} | {"ai.onnx"}
    local = {(f.domain, f.name) for f in model.functions}
    for g in _all_graphs(model.graph):
        for node in g.node:
            if node.domain not in imported and (node.domain, node.op_type) not in local:
                raise BadInput(
                    f"{path}: node {node.name or node.op_type!r} uses op domain {node.domain!r}, "
                    "which the model does not import"
                )


def _upgrade_opset(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    version = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), None)
    newest = onnx.defs.onnx_opset_version()
    if version is not None and version > newest:
        raise BadInput(f"{path}: opset {version} is newer than this onnx supports ({newest}); upgrade onnx")
    if version is None or version >= MIN_OPSET:
        return model
    try:
        with _payloads_set_aside(model) as stash:
            upgraded = version_converter.convert_version(model, MIN_OPSET)
            for t in upgraded.graph.initializer:
                if t.name in stash and not t.HasField("raw_data"):
                    t.raw_data = stash[t.name]
    except Exception as e:  # the converter raises bare RuntimeError/ValidationError subclasses
        raise BadInput(
            f"{path}: opset {version} is older than {MIN_OPSET} and onnx's version converter cannot upgrade it "
            f"({_first_line(e)}); convert the model to opset {MIN_OPSET}+ first"
        ) from None
    upgraded.ir_version = max(upgraded.ir_version, 7)
    _lift_initializer_inputs(upgraded.graph)
    return upgraded


def _lift_initializer_inputs(g: onnx.GraphProto) -> None:
    """IR < 4 listed initializers as graph inputs; as weights they stay constant-foldable (IR 4+ semantics)."""
    inits = {t.name for t in g.initializer}
    kept = [i for i in g.input if i.name not in inits]
    if len(kept) != len(g.input):
        del g.input[:]
        g.input.extend(kept)


def _check(model: onnx.ModelProto, path: Path) -> None:
    try:
        if _size(model) < PROTOBUF_LIMIT:
            onnx.checker.check_model(model)
        else:
            onnx.checker.check_model(str(path))
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise BadInput(f"{path}: invalid ONNX model: {_first_line(e)}") from None
    except ValueError as e:  # e.g. an opset newer than the installed onnx knows
        raise BadInput(f"{path}: unsupported ONNX model: {_first_line(e)}") from None


# ---- proto -> IR ------------------------------------------------------------------------------------------


def _tensor_type(t: onnx.TypeProto) -> TensorType | None:
    if not t.HasField("tensor_type") or t.tensor_type.elem_type == 0:
        return None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type)).name
    if not t.tensor_type.HasField("shape"):
        return TensorType(dtype, None)
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.tensor_type.shape.dim)
    return TensorType(dtype, dims)


@contextmanager
def _payloads_set_aside(model: onnx.ModelProto) -> Iterator[dict[str, bytes]]:
    """Temporarily strip large raw weight payloads: version conversion and shape inference need only types
    and small constants, and copying gigabytes of weights through them costs seconds or breaks the 2 GB cap."""
    stash: dict[str, bytes] = {}
    for t in model.graph.initializer:
        if t.HasField("raw_data") and len(t.raw_data) > 4096:
            stash[t.name] = t.raw_data
            t.ClearField("raw_data")
    try:
        yield stash
    finally:
        for t in model.graph.initializer:
            if t.name in stash and not t.HasField("raw_data"):
                t.raw_data = stash[t.name]


def _size(model: onnx.ModelProto) -> int:
    """Serialized size, estimated from the weight payloads (exact ByteSize() costs a pass over gigabytes)."""
    return sum(len(t.raw_data) + 4 * len(t.float_data) + 8 * len(t.int64_data) for t in model.graph.initializer) + 2**20


def _infer_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    folded: dict[str, np.ndarray] = {}
    try:
        with _payloads_set_aside(model):
            inferred = _infer_folding(model, folded)
    except Exception:  # inference is an aid: fall back to what the model declares
        inferred = model
    types: dict[str, TensorType] = {}
    g = inferred.graph
    for vi in (*g.input, *g.value_info, *g.output):
        t = _tensor_type(vi.type)
        if t is not None:
            types[vi.name] = t
    for name, value in folded.items():
        types.setdefault(name, TensorType(value.dtype.name, tuple(int(d) for d in value.shape)))
    for init in model.graph.initializer:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).name
        types[init.name] = TensorType(dtype, tuple(int(d) for d in init.dims))
    return types


NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
"""Ops whose output is drawn anew in every run: never a constant, whatever their inputs."""
FOLD_ELEMENTS = 2**16
"""The largest value shape inference is handed as a constant (`_infer_folding`): shape arithmetic is small."""
FOLD_ROUNDS = 32
"""Inference passes `_infer_folding` makes at most after the first: each may make a tensor static whose Shape
the next folds (TorchScript's ShuffleNet-v2 needs 15, its Swin-T 18, a block's channel split each)."""


def _infer_folding(model: onnx.ModelProto, folded: dict[str, np.ndarray]) -> onnx.ModelProto:
    """onnx's shape inference, handed the values of the shape arithmetic over static shapes as constants; the
    values go to ``folded``. onnx's data propagation stops at ops it does not cover: with BERT's input dims
    bound, Range over Shape(input_ids) stayed unknown, and so did every activation after it (broadcast against
    1, an unknown length stays unknown), so 26 of BERT-tiny's 32 units were estimated at the default size 1.
    Such values are constants once the shapes they read are static: each node that reads a static tensor's
    shape (Shape, Size) or only such values and constants is evaluated (onnx's reference evaluator, at the
    model's opsets) and becomes an initializer in a copy that only inference sees; the model is unchanged."""
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    values = _Values(model, folded)
    probe = onnx.ModelProto()
    for _ in range(FOLD_ROUNDS):
        new = values.fold_round(inferred)
        if not new:
            break
        if not probe.HasField("graph"):
            probe.CopyFrom(model)
        kept = [n for n in probe.graph.node if not any(o in folded for o in n.output)]
        del probe.graph.node[:]
        probe.graph.node.extend(kept)
        try:
            probe.graph.initializer.extend(numpy_helper.from_array(folded[k], k) for k in new)
            inferred = shape_inference.infer_shapes(probe, data_prop=True)
        except Exception:  # keep what the last round inferred
            break
    return inferred


def _evaluable(node: onnx.NodeProto) -> bool:
    """Whether `_infer_folding` may evaluate ``node``: a default-domain op with no subgraph, every output named,
    that computes the same in every run."""
    return (
        node.domain in _DEFAULT_DOMAINS
        and node.op_type not in NONDETERMINISTIC
        and len(node.output) > 0
        and "" not in node.output
        and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
    )


class _Values:
    """Values `_infer_folding` knows: those folded so far, small initializers, and what nodes compute from
    them alone (evaluated when a folded node reads them: a Reshape of two constants, say)."""

    def __init__(self, model: onnx.ModelProto, folded: dict[str, np.ndarray]) -> None:
        self.model, self.folded = model, folded
        self.initializers = {t.name: t for t in model.graph.initializer}
        self.producers = {o: n for n in model.graph.node for o in n.output}
        self.candidates = [n for n in model.graph.node if _evaluable(n)]
        self.evaluable = {id(n) for n in self.candidates}
        self.failed: set[int] = set()
        """Nodes the evaluator cannot run, or whose output is too large: not tried again."""
        self.unknown: set[int] = set()
        """Nodes with an input this round does not know: not tried again in the round."""

    def fold_round(self, inferred: onnx.ModelProto) -> list[str]:
        """Fold each node that reads a static tensor's shape (its type in ``inferred``) or a value folded
        before it; returns the values it added to `folded`."""
        g = inferred.graph
        infos = {vi.name: vi for vi in (*g.input, *g.value_info, *g.output)}
        before = len(self.folded)
        self.unknown.clear()
        for node in self.candidates:
            if id(node) in self.failed or node.output[0] in self.folded:
                continue
            if ops.SHAPE_ONLY in ops.traits_of(node.op_type):
                vi = infos.get(node.input[0])
                t = None if vi is None else _tensor_type(vi.type)
                if t is not None and t.is_static:
                    self.evaluate(node, {node.input[0]: np.broadcast_to(np.zeros((), np.uint8), t.shape)})
            elif any(i in self.folded for i in node.input):
                self.evaluate(node)
        return list(self.folded)[before:]

    def get(self, name: str) -> np.ndarray | None:
        if name in self.folded:
            return self.folded[name]
        if name in self.initializers:
            t = self.initializers[name]
            if np.prod(t.dims, dtype=np.int64) > FOLD_ELEMENTS or t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            try:
                return numpy_helper.to_array(t)
            except ValueError:  # a payload `_payloads_set_aside` holds
                return None
        node = self.producers.get(name)
        if node is not None and id(node) in self.evaluable and self.evaluate(node):
            return self.folded[name]
        return None

    def evaluate(self, node: onnx.NodeProto, feeds: Mapping[str, np.ndarray] | None = None) -> bool:
        """Evaluate ``node`` on ``feeds`` (default: its inputs' known values) into `folded`; False if an input
        is unknown, the evaluator cannot run it, or an output is too large."""
        if id(node) in self.failed or id(node) in self.unknown:
            return False
        if feeds is None:
            feeds = {}
            for i in dict.fromkeys(i for i in node.input if i):
                value = self.get(i)
                if value is None:
                    self.unknown.add(id(node))
                    return False
                feeds[i] = value
        values = _evaluate(node, feeds, self.model)
        if values is None or any(v.size > FOLD_ELEMENTS for v in values):
            self.failed.add(id(node))
            return False
        self.folded.update(zip(node.output, values))
        return True


def _evaluate(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray], model: onnx.ModelProto) -> list[np.ndarray] | None:
    """``node``'s outputs on ``feeds``, by onnx's reference evaluator at ``model``'s opsets; None if it cannot."""
    from onnx.reference import ReferenceEvaluator

    try:
        elems = {k: helper.np_dtype_to_tensor_dtype(v.dtype) for k, v in feeds.items()}
        inputs = [helper.make_tensor_value_info(k, elem, None) for k, elem in elems.items()]
        graph = helper.make_graph([node], "fold", inputs, [onnx.ValueInfoProto(name=o) for o in node.output])
        one = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
        with np.errstate(all="ignore"):  # constants of a model's arithmetic (a log of 0, say) are its own business
            return [np.asarray(v) for v in ReferenceEvaluator(one).run(None, dict(feeds))]
    except Exception:  # an op the evaluator does not cover, or inputs it refuses: inference goes without it
        return None


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
        return Node(
            node.op_type, tuple(node.input), tuple(outputs), make_attrs(reason), node.name, "", node.doc_string
        ), None
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


def _catalogue_attrs(
    node: onnx.NodeProto,
    types: dict[str, TensorType],
    opset: int,
    producers: dict[str, onnx.NodeProto],
    data: dict[str, WeightData],
) -> dict[str, AttrValue] | str:
    """Normalised attributes if the catalogue fully describes ``node``, else the reason it does not."""
    if node.domain not in _DEFAULT_DOMAINS:
        return f"custom domain {node.domain}"
    d = ops.OPS.get(node.op_type)
    if d is None or not d.onnx:
        return "not in the catalogue"
    raw_attrs = {a.name: _attr_value(a) for a in node.attribute}
    if any(v is None for v in raw_attrs.values()):
        return "attribute of a kind the catalogue does not model"
    in_types = [types.get(i) if i else None for i in node.input]
    outputs = [o for o in node.output if o]
    if d.outputs is not None and (len(outputs) != d.outputs or node.output[0] == ""):
        return f"{node.op_type} with {len(outputs)} outputs"
    attrs = d.from_onnx(raw_attrs, in_types, len(node.input), opset)  # type: ignore[arg-type]
    if isinstance(attrs, str):
        return attrs
    if any(not i for i in node.input):
        return "omitted optional input"
    if any(t is None for t in in_types):
        return "input type unknown"
    consts = [_constant_value(i, producers, data) if k in d.static_inputs else None for k, i in enumerate(node.input)]
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


# ---- IR -> proto ------------------------------------------------------------------------------------------


def _value_info(name: str, t: TensorType | None, doc: str = "") -> onnx.ValueInfoProto:
    if t is None:
        vi = onnx.ValueInfoProto(name=name)
    else:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
        vi = helper.make_tensor_value_info(name, elem, None if t.shape is None else list(t.shape))
    if doc:
        vi.doc_string = doc
    return vi


def opaque_ints(n: Node) -> dict[str, int]:
    """The integer attributes of an opaque node (Shape's ``start`` and ``end``, say): what a stage that
    reasons about an op outside the catalogue may read without knowing protobuf."""
    proto = onnx.NodeProto()
    proto.ParseFromString(n.opaque or b"")
    return {a.name: a.i for a in proto.attribute if a.type == onnx.AttributeProto.INT}


def _opset(g: Graph) -> int:
    """The default domain's opset that ``g`` declares."""
    return g.meta.opset("") or g.meta.opset("ai.onnx") or MIN_OPSET


def _export_node(n: Node, g: Graph, extra: list[onnx.TensorProto], taken: set[str]) -> onnx.NodeProto:
    """The NodeProto for ``n``; constant inputs the ONNX form needs (e.g. Pad's pads) go to ``extra``."""
    if n.is_opaque:
        proto = onnx.NodeProto()
        proto.ParseFromString(n.opaque)  # type: ignore[arg-type]
        proto.op_type = n.op
        if n.domain:
            proto.domain = n.domain
        proto.input.extend(n.inputs)
    else:
        spec = ops.get(n.op).to_onnx(n.attr, [g.types[i] for i in n.inputs if i])
        proto = onnx.NodeProto(op_type=spec.op_type)
        for k, v in sorted(spec.attrs.items()):
            value = numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
            proto.attribute.append(helper.make_attribute(k, value))
        proto.input.extend(n.inputs)
        for i, value in enumerate(spec.extra_inputs):
            name = f"{n.name or n.outputs[0]}__{spec.op_type.lower()}{i}"
            while name in taken:
                name += "_"
            taken.add(name)
            extra.append(numpy_helper.from_array(value, name))
            proto.input.append(name)
        if spec.op_type == "Split" and len(proto.input) == 1 and _opset(g) >= 18:
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
    nodes = [_export_node(n, g, extra, taken) for n in g.nodes]
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
        opset_imports=[helper.make_opsetid(d, v) for d, v in g.meta.opsets],
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


def op_census(path: str | os.PathLike[str]) -> dict[str, int]:
    """How many nodes of each op type a model file holds (onnxruntime's optimized models included, whose
    contrib ops the IR need not know)."""
    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def model_bytes(g: Graph) -> bytes:
    """``g`` serialized, for onnxruntime sessions made in memory (small graphs: units, probes)."""
    return to_proto(g).SerializeToString()


def check_dims(g: Graph, dims: Mapping[str, int]) -> None:
    """Refuse a dim name ``g``'s inputs do not have, naming those they have: a misspelt ``--dim`` was taken
    without a word, and the model costed at size 1."""
    have = sorted({d for v in g.inputs if (t := g.types.get(v)) and t.shape for d in t.shape if isinstance(d, str)})
    unknown = sorted(set(dims) - set(have))
    if unknown:
        raise BadInput(
            f"--dim {unknown[0]}: the model has no symbolic dim of that name "
            f"(its inputs have {', '.join(have) if have else 'none'})"
        )


def dim_sizes(g: Graph, dims: Mapping[str, int], default: int = 1) -> dict[str, int]:
    """The size of every named symbolic dim of ``g`` once its inputs' are fixed as `concretize` fixes them:
    the user's ``dims``, and the dims shape inference named inside the model (``unk__0``; BERT's sequence
    length after a Range over its input's Shape), which no flag can name. A cost model binding only the
    user's names estimated 28 of BERT-tiny's 35 units."""
    symbolic = {d for t in g.types.values() if t.shape is not None for d in t.shape if isinstance(d, str)}
    named_inputs = {d for v in g.inputs if g.types[v].shape is not None for d in g.types[v].shape if isinstance(d, str)}
    sizes = {**dict.fromkeys(named_inputs, default), **dims}
    if symbolic <= set(sizes):  # no dim but the inputs' own: no inference needed (it copies every weight)
        return sizes
    fixed = concretize(g, dict(dims), default)
    for v, t in g.types.items():
        c = fixed.types.get(v)
        if t.shape is None or c is None or not c.is_static or len(c.shape) != len(t.shape):
            continue
        for d, n in zip(t.shape, c.shape):
            if isinstance(d, str):
                sizes.setdefault(d, n)
    return sizes


def reinfer(g: Graph) -> Graph:
    """``g`` with every intermediate value's type inferred afresh: after a fold has made a Reshape's target
    a constant, the dims it sets become static (the annotations the IR kept would hold them unknown)."""
    model = to_proto(g)
    del model.graph.value_info[:]
    return replace(from_proto(model, external_data=g.meta.external_data), meta=g.meta)


def concretize(g: Graph, dims: dict[str, int], default: int = 1) -> Graph:
    """``g`` with every symbolic or unknown input dim fixed (by name from ``dims``, else ``default``) and
    shapes re-inferred, so every value has a static shape to measure or estimate."""
    model = to_proto(g)
    fixed: dict[str, int] = {}
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                name = d.dim_param
                fixed[name] = dims.get(name, default)
                d.Clear()
                d.dim_value = fixed[name]
    del model.graph.value_info[:]
    for vi in model.graph.output:  # named dims follow the inputs; others become unknown for inference to fill
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                value = fixed.get(d.dim_param)
                d.Clear()
                if value is not None:
                    d.dim_value = value
    return from_proto(model, external_data=g.meta.external_data)


# ---- protos handed to and returned by the Python API (`taso.api`) -------------------------------------------

ModelProto = onnx.ModelProto
"""The proto type `taso.api` passes through, named here so that only this module imports onnx."""


def write_proto(model: object, path: Path) -> Path:
    """Write a ModelProto a caller handed over to ``path``, so it is read, validated and checked as a file is."""
    if not isinstance(model, onnx.ModelProto):
        raise BadInput(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")
    if next(_external_tensors(model), None) is not None:
        raise BadInput("the ModelProto's weights are in external data it does not hold; pass the model's path")
    try:
        onnx.save_model(model, str(path))
    except ValueError as e:  # past protobuf's 2 GB
        raise BadInput(f"the ModelProto cannot be serialized ({_first_line(e)}); pass the model's path") from None
    return path


def read_model_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """The ModelProto at ``path``, external data loaded: what the API hands back."""
    return onnx.load_model(str(path))
