"""onnxruntime as the judge of ops onnx does not know: contrib ops (com.microsoft's Gelu, Attention, ...) and the
ops onnxruntime registers in the default domain (the transformers optimizer's SimplifiedLayerNormalization).
onnx's checker refuses the latter and its shape inference types neither, so a model onnxruntime runs was refused,
or its values after such an op had no type and the cost model failed on them. Here a model is accepted when
onnxruntime makes a session of it, and the values onnx left untyped take the types onnxruntime gives them."""

from __future__ import annotations

import os
from collections.abc import Collection

import onnx

from taso.ir import TensorType

_ELEMENT = {
    "float": "float32",
    "float16": "float16",
    "double": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
}
"""onnxruntime's element type names (``tensor(float)``) -> numpy's: the dtypes the IR can hold."""


LIGHT_BYTES = 4096
"""Weights up to this size stay weights when onnxruntime infers types (shapes, indices: values inference may
read); larger ones become inputs (`_probe`)."""


def _session(model: onnx.ModelProto | str | os.PathLike[str]):  # noqa: ANN202 (onnxruntime.InferenceSession)
    """A CPU session of ``model`` (a proto or a path) as written, no graph rewrites; None if onnxruntime refuses it."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's errors share no base class it exports
        return None


def runs(model: onnx.ModelProto | str | os.PathLike[str]) -> bool:
    """Whether onnxruntime makes a session of ``model``: the judge of a model whose ops onnx's checker lacks."""
    return _session(model) is not None


def runtime_types(model: onnx.ModelProto, names: Collection[str]) -> dict[str, TensorType]:
    """The types onnxruntime's session infers for ``names`` (values of ``model``'s main graph), symbolic dims
    kept; values it cannot type, and all of them where it refuses the model, are left out. At the costing dims
    (`taso.onnx.dims.concretize` makes every input static) its inference sizes what a run would, a Range over
    a Shape included, and only that: a run on made-up inputs would also size what follows their values (a
    NonZero's output), which other inputs size otherwise."""
    if not names:
        return {}
    session = _session(_probe(model, names))
    if session is None:
        return {}
    inferred = {o.name: _declared(o.type, o.shape) for o in session.get_outputs() if o.name in names}
    return {n: t for n, t in inferred.items() if t is not None}


def _probe(model: onnx.ModelProto, names: Collection[str]) -> onnx.ModelProto:
    """A copy of ``model`` for onnxruntime's inference alone: ``names`` among its outputs, and its weights over
    `LIGHT_BYTES` made inputs of their types, which inference reads only the types of (a session of BERT-base
    that copied its 420 MB took 5 s on the loaded 2-core machine)."""
    probe = onnx.ModelProto(ir_version=model.ir_version)
    probe.opset_import.extend(model.opset_import)
    probe.functions.extend(model.functions)
    g = probe.graph
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    declared = {i.name for i in g.input} | {o.name for o in g.output}
    for t in model.graph.initializer:
        if t.ByteSize() <= LIGHT_BYTES:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    g.output.extend(onnx.ValueInfoProto(name=n) for n in dict.fromkeys(names) if n not in declared)
    return probe


def _declared(kind: str, shape: list[int | str | None] | None) -> TensorType | None:
    """The IR type of onnxruntime's ``tensor(float)`` and shape; None for sequences, maps and unknown dtypes."""
    if not kind.startswith("tensor(") or kind[7:-1] not in _ELEMENT:
        return None
    dims = None if shape is None else tuple(d if isinstance(d, int | str) else None for d in shape)
    return TensorType(_ELEMENT[kind[7:-1]], dims)
