"""onnxruntime as the judge of ops onnx does not know: contrib ops (com.microsoft's Gelu, Attention, ...) and the
ops onnxruntime registers in the default domain (the transformers optimizer's SimplifiedLayerNormalization).
onnx's checker refuses the latter and its shape inference types neither, so a model onnxruntime runs was refused,
or its values after such an op had no type and the cost model failed on them. Here a model is accepted when
onnxruntime makes a session of it, and the values onnx left untyped take the types onnxruntime gives them."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager

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
    with _exposed(model, names) as probe:
        session = _session(probe)
    if session is None:
        return {}
    inferred = {o.name: _declared(o.type, o.shape) for o in session.get_outputs() if o.name in names}
    return {n: t for n, t in inferred.items() if t is not None}


@contextmanager
def _exposed(model: onnx.ModelProto, names: Collection[str]) -> Iterator[onnx.ModelProto]:
    """``model`` with ``names`` added to its graph's outputs, for as long as the block runs: copying the proto
    would copy every weight."""
    outputs = {o.name for o in model.graph.output}
    added = [n for n in dict.fromkeys(names) if n not in outputs]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in added)
    try:
        yield model
    finally:
        del model.graph.output[len(model.graph.output) - len(added) :]


def _declared(kind: str, shape: list[int | str | None] | None) -> TensorType | None:
    """The IR type of onnxruntime's ``tensor(float)`` and shape; None for sequences, maps and unknown dtypes."""
    if not kind.startswith("tensor(") or kind[7:-1] not in _ELEMENT:
        return None
    dims = None if shape is None else tuple(d if isinstance(d, int | str) else None for d in shape)
    return TensorType(_ELEMENT[kind[7:-1]], dims)
