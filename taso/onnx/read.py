"""Reading a model file: format, external data (kept inside the model's folder), domains, the opset (files older
than `MIN_OPSET` upgraded by onnx's version converter) and onnx's checker (onnxruntime the judge of ops onnx
does not know), each failure one `BadInput` line;
and the ModelProtos the Python API hands in and back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import version_converter

from taso.errors import BadInput
from taso.ir import find_cycle
from taso.onnx.runtime import runs

MIN_OPSET = 13


ORT_MIN_OPSET = 7
"""The oldest default-domain opset onnxruntime runs (it has no kernels for Add-1 or Add-6, say)."""


PROTOBUF_LIMIT = 2**31 - 2**26  # leave headroom under protobuf's 2 GB cap for the graph itself


_DEFAULT_DOMAINS = ("", "ai.onnx")


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
        raise BadInput(f"{p}: not an ONNX model (protobuf could not parse it: {_one_line(e)})") from None
    if model.ir_version <= 0 or not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise BadInput(f"{p}: not an ONNX model (no graph); the file may be truncated or of another format")
    external = _load_external_data(model, p)
    _check_domains(model, p)
    _refuse_cycles(model, p)
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), None)
    nodes = len(model.graph.node)
    upgraded = _upgrade_opset(model, p)
    _check(upgraded, p)
    if upgraded is model or opset is None:
        return model, external, None
    return upgraded, external, Upgrade(opset, nodes, len(upgraded.graph.node) - nodes)


def _one_line(e: BaseException) -> str:
    """``e``'s message on one line: onnx's checker breaks its sentences across lines ("... input 'b' of node:",
    then the node, then "is not output of any previous nodes."), and the first line alone stopped mid-sentence."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:299] + "…"


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
        _refuse_leaving(path, base, t.name, location)
    if tensors:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(base))
        except (OSError, ValueError, onnx.checker.ValidationError) as e:
            raise BadInput(f"{path}: cannot read external data: {_one_line(e)}") from None
    return bool(tensors)


def _refuse_leaving(path: Path, base: Path, tensor: str, location: str) -> None:
    """Refuse an external data ``location`` that reads a file outside the model's folder ``base``: a path out of
    it, a symbolic link anywhere along it that leads out, or a hard link (a second name of a file that may live
    anywhere on the file system: onnx before 1.21 read such files, CVE-2026-34446/34447)."""
    where = f"{path}: tensor {tensor!r} points at external data {location!r}"
    target = (base / location).resolve()
    if not location or Path(location).is_absolute() or not Path(os.path.normpath(base / location)).is_relative_to(base):
        raise BadInput(f"{where} outside the model's folder; refused")
    if not target.is_relative_to(base):
        raise BadInput(f"{where}, a symbolic link to {target} outside the model's folder; refused")
    if not target.is_file():
        raise BadInput(f"{path}: external data file {location!r} for tensor {tensor!r} is missing")
    if (links := target.stat().st_nlink) > 1:
        raise BadInput(
            f"{where}, a file with {links} hard links, any of which may be outside the model's folder; refused "
            "(copy the file to break the link)"
        )


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


def _refuse_cycles(model: onnx.ModelProto, path: Path) -> None:
    """Refuse a graph with a cycle, naming it: onnx's checker calls it unsorted and names one input."""
    for g in _all_graphs(model.graph):
        cycle = find_cycle([(n.input, n.output) for n in g.node])
        if cycle is None:
            continue
        steps = [
            f"{_node_label(g.node[k], k)} -> {_written(g.node[k], g.node[cycle[(i + 1) % len(cycle)]])!r} -> "
            for i, k in enumerate(cycle)
        ]
        raise BadInput(
            f"{path}: the graph has a cycle, each node reading the value before it: {''.join(steps)}"
            f"{_node_label(g.node[cycle[0]], cycle[0])}; an ONNX graph must have none"
        )


def _node_label(n: onnx.NodeProto, k: int) -> str:
    return f"{n.op_type} {n.name!r}" if n.name else f"{n.op_type} (node {k})"


def _written(n: onnx.NodeProto, reader: onnx.NodeProto) -> str:
    """The first value ``n`` writes that ``reader`` reads."""
    return next(v for v in n.output if v and v in reader.input)


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
            f"({_one_line(e)}); convert the model to opset {MIN_OPSET}+ first"
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
        # an op onnx has no schema for (onnxruntime's SimplifiedLayerNormalization, in the default domain) is
        # onnxruntime's to judge: the model is valid if onnxruntime makes a session of it
        if "No Op registered" not in str(e) or not runs(model if _size(model) < PROTOBUF_LIMIT else path):
            raise BadInput(f"{path}: invalid ONNX model: {_one_line(e)}") from None
    except ValueError as e:  # e.g. an opset newer than the installed onnx knows
        raise BadInput(f"{path}: unsupported ONNX model: {_one_line(e)}") from None


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


def op_census(path: str | os.PathLike[str]) -> dict[str, int]:
    """How many nodes of each op type a model file holds (onnxruntime's optimized models included, whose
    contrib ops the IR need not know)."""
    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


ModelProto = onnx.ModelProto
"""The proto type `taso.api` passes through, named here so that only this package imports onnx."""


def write_proto(model: object, path: Path) -> Path:
    """Write a ModelProto a caller handed over to ``path``, so it is read, validated and checked as a file is."""
    if not isinstance(model, onnx.ModelProto):
        raise BadInput(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")
    if next(_external_tensors(model), None) is not None:
        raise BadInput("the ModelProto's weights are in external data it does not hold; pass the model's path")
    try:
        onnx.save_model(model, str(path))
    except ValueError as e:  # past protobuf's 2 GB
        raise BadInput(f"the ModelProto cannot be serialized ({_one_line(e)}); pass the model's path") from None
    return path


def read_model_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """The ModelProto at ``path``, external data loaded: what the API hands back."""
    return onnx.load_model(str(path))
