"""Every value's type at import: onnx's shape inference, helped by evaluating the shape arithmetic over static
shapes (`_infer_folding`), then the model's declared and initializer types, then onnxruntime's types for the
values onnx left untyped (after an op it does not know: `taso.onnx.runtime`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from taso import ops
from taso.ir import TensorType
from taso.onnx.read import _DEFAULT_DOMAINS, PROTOBUF_LIMIT, _payloads_set_aside, _size
from taso.onnx.runtime import runtime_types


def _tensor_type(t: onnx.TypeProto) -> TensorType | None:
    if not t.HasField("tensor_type") or t.tensor_type.elem_type == 0:
        return None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type)).name
    if not t.tensor_type.HasField("shape"):
        return TensorType(dtype, None)
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.tensor_type.shape.dim)
    return TensorType(dtype, dims)


def _infer_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    types = _onnx_types(model)
    untyped = [o for n in model.graph.node for o in n.output if o and o not in types]
    if not untyped or _size(model) >= PROTOBUF_LIMIT:  # past it, no session can be made from the proto
        return types
    found = runtime_types(model, untyped)
    seeds = {o: _named(o, found[o]) for n in model.graph.node if not _known(n) for o in n.output if o in found}
    if not seeds:
        return {**found, **types}
    with _annotated(model, seeds):  # onnx's inference carries its names and folds on from onnxruntime's types
        return {**found, **_onnx_types(model)}


def _known(node: onnx.NodeProto) -> bool:
    """Whether onnx has a schema for ``node``'s op (contrib ops and onnxruntime's own have none)."""
    return onnx.defs.has(node.op_type, node.domain)


def _named(value: str, t: TensorType) -> TensorType:
    """``t`` with each unknown dim named for ``value`` and its axis, as onnx names those it cannot size
    (``unk__0``): onnxruntime leaves them unnamed, and an unnamed dim is never sized for costing, while a named
    one is sized where the model is inferred at its costing dims (`taso.onnx.dims.dim_sizes`)."""
    if t.shape is None or all(d is not None for d in t.shape):
        return t
    return TensorType(t.dtype, tuple(f"unk__{value}.{k}" if d is None else d for k, d in enumerate(t.shape)))


@contextmanager
def _annotated(model: onnx.ModelProto, types: Mapping[str, TensorType]) -> Iterator[onnx.ModelProto]:
    """``model`` with ``types`` added to its value_info while the block runs (a copy would copy every weight)."""
    infos = model.graph.value_info
    start = len(infos)
    for name, t in types.items():
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
        infos.append(helper.make_tensor_value_info(name, elem, None if t.shape is None else list(t.shape)))
    try:
        yield model
    finally:
        del infos[start:]


def _onnx_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    """The types onnx's inference gives, Slices that step back from past an axis's end left unsized."""
    types = _inferred_types(model)
    overruns = _reversed_overruns(model, types)
    if not overruns:
        return types
    hidden = onnx.ModelProto()
    hidden.CopyFrom(model)
    unknown = []
    for k, count in overruns.items():  # their ends fed from an input of no known value: no size is inferred
        n = hidden.graph.node[k]
        unknown.append(f"{n.output[0]}__unknown_ends")
        hidden.graph.input.append(helper.make_tensor_value_info(unknown[-1], onnx.TensorProto.INT64, [count]))
        n.input[2] = unknown[-1]
    types = _inferred_types(hidden)
    for name in unknown:
        types.pop(name, None)
    return types


def _reversed_overruns(model: onnx.ModelProto, types: Mapping[str, TensorType]) -> dict[int, int]:
    """The Slices (by index, with how many ends they take) that step backwards from an end at or past the axis's last
    element. The spec clamps that end to the last element and takes none of it (``x[0:MAX:-1]`` is empty), and
    shape inference says so, but onnxruntime takes one: a rewrite that trusted the inferred size would change
    what onnxruntime computes (a Transpose of the result, padded, read as a Reshape moves other elements)."""
    inits = {t.name: t for t in model.graph.initializer}

    def const(n: onnx.NodeProto, i: int) -> list[int] | None:
        t = inits.get(n.input[i]) if i < len(n.input) and n.input[i] else None
        return [int(v) for v in numpy_helper.to_array(t).ravel()] if t is not None else None

    found: dict[int, int] = {}
    for k, n in enumerate(model.graph.node):
        if n.op_type != "Slice" or n.domain not in _DEFAULT_DOMAINS or len(n.input) < 5:
            continue
        data, steps, ends = types.get(n.input[0]), const(n, 4), const(n, 2)
        if data is None or data.shape is None or steps is None or ends is None or len(ends) != len(steps):
            continue
        axes = const(n, 3) or list(range(len(steps)))
        sizes = [data.shape[a % len(data.shape)] if -len(data.shape) <= a < len(data.shape) else None for a in axes]
        if any(s < 0 and e >= 0 and (not isinstance(d, int) or e >= d) for s, e, d in zip(steps, ends, sizes)):
            found[k] = len(ends)
    return found


def _inferred_types(model: onnx.ModelProto) -> dict[str, TensorType]:
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
