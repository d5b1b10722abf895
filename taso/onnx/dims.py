"""Symbolic dims fixed to sizes: a dynamic model costed at one size needs every value's shape static, the dims
shape inference named inside the model included."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from taso.errors import BadInput
from taso.ir import Graph, TensorType
from taso.onnx.export import _value_info, to_proto
from taso.onnx.importer import from_proto


def input_dims(g: Graph) -> list[str]:
    """The names of the symbolic dims of ``g``'s inputs, in the order they first appear."""
    return list(
        dict.fromkeys(
            d for v in g.inputs if (t := g.types.get(v)) and t.shape for d in t.shape if isinstance(d, str) and d
        )
    )


def check_dims(g: Graph, dims: Mapping[str, int]) -> None:
    """Refuse a dim name ``g``'s inputs do not have, naming those they have (a misspelt ``--dim`` was taken
    without a word, and the model costed at size 1), and sizes that make an input larger than any tensor can be."""
    have = sorted(input_dims(g))
    unknown = sorted(set(dims) - set(have))
    if unknown:
        raise BadInput(
            f"--dim {unknown[0]}: the model has no symbolic dim of that name "
            f"(its inputs have {', '.join(have) if have else 'none'})"
        )
    for v in g.inputs:
        t = g.types.get(v)
        if t is None or t.shape is None:
            continue
        elements = math.prod(dims.get(d, 1) if isinstance(d, str) else max(d, 1) for d in t.shape)
        if elements > MAX_ELEMENTS:
            given = ", ".join(f"{d}={dims[d]}" for d in dict.fromkeys(t.shape) if isinstance(d, str) and d in dims)
            raise BadInput(
                f"--dim {given}: input {v!r} ({t}) would have {elements:.3g} elements, more than any tensor can "
                f"hold (2^63 - 1)"
            )


MAX_ELEMENTS = 2**63 - 1
"""The most elements a tensor can have: its dims and sizes are int64 in ONNX, in numpy and in onnxruntime (a
larger ``--dim`` overflowed numpy's product of a shape: a traceback, not a refusal)."""


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
    fixed = concretize(_light(g), dict(dims), default)
    for v, t in g.types.items():
        c = fixed.types.get(v)
        if t.shape is None or c is None or not c.is_static or len(c.shape) != len(t.shape):
            continue
        for d, n in zip(t.shape, c.shape):
            if isinstance(d, str):
                sizes.setdefault(d, n)
    return sizes


def _light(g: Graph) -> Graph:
    """``g`` with the weights inference sees only the types of (over 4096 bytes: `_payloads_set_aside`) made
    inputs of those types: copying BERT-base's 420 MB into a proto and back took 1-2 s a call."""
    big = {w for w in g.weights if g.data[w].array.nbytes > 4096}
    return replace(
        g,
        inputs=(*g.inputs, *(w for w in g.weights if w in big)),
        weights=tuple(w for w in g.weights if w not in big),
        data={w: d for w, d in g.data.items() if w not in big},
    )


def reinfer(g: Graph, outputs: bool = False, known: Mapping[str, TensorType] | None = None) -> Graph:
    """``g`` with every intermediate value's type inferred afresh: after a fold has made a Reshape's target
    a constant, the dims it sets become static (the annotations the IR kept would hold them unknown). With
    ``outputs``, the outputs' shapes too: what the inputs' types and the weights alone say of them. ``known``
    types are what the caller has proved of values inference cannot size (a Range over a dim): inference
    starts from them and carries their dims on."""
    model = to_proto(_light(g))
    del model.graph.value_info[:]
    model.graph.value_info.extend(_value_info(v, t) for v, t in (known or {}).items())
    if outputs:
        for vi in model.graph.output:
            vi.type.tensor_type.ClearField("shape")
    inferred = from_proto(model, external_data=g.meta.external_data)
    # A catalogue node that import now reads as opaque reads the constants export wrote for its attributes.
    added = tuple(w for w in inferred.weights if w not in g.data)
    data = {**g.data, **{w: inferred.data[w] for w in added}}
    return replace(inferred, inputs=g.inputs, weights=g.weights + added, data=data, meta=g.meta)


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
