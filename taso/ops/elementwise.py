"""Element-wise ops: the arithmetic (Add, Mul, Div, Reciprocal) and the activations (Relu, Sigmoid, Tanh)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops.opdef import Attrs, AttrValue, FieldRule, OpDef, register
from taso.ops.shapes import broadcast_shapes, first_type, same_dtype
from taso.ops.traits import (
    BATCH_POLYMORPHIC,
    EPILOGUE,
    FIELD_EXACT,
    SKIP_EPILOGUE,
    TASO,
)


def _binary_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    return (TensorType(same_dtype(types), broadcast_shapes(types[0].shape, types[1].shape)),)


def _binary(
    name: str,
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    doc: str,
    tags: set[str],
    fuses: frozenset[str] = frozenset(),
    commutative: bool = True,
    **facts: object,
) -> OpDef:
    return register(
        OpDef(
            name,
            (2, 2),
            {},
            _binary_shape,
            lambda xs, a, n: (fn(xs[0], xs[1]),),
            doc,
            elementwise=True,
            tags=frozenset(tags),
            fuses=frozenset(fuses),
            commutative=commutative,
            **facts,  # type: ignore[arg-type]
        )
    )


def _unary(
    name: str,
    fn: Callable[[np.ndarray], np.ndarray],
    doc: str,
    tags: set[str],
    field: FieldRule | None = None,
    **facts: object,
) -> OpDef:
    """A unary element-wise op; over Z_p a keyed random function (`taso.ops.field`) unless ``field`` says
    otherwise."""
    return register(
        OpDef(
            name,
            (1, 1),
            {},
            first_type,
            lambda xs, a, n: (fn(xs[0]),),
            doc,
            elementwise=True,
            tags=frozenset(tags),
            field=field or (lambda xs, a, n, z: (z.keyed(xs[0], name),)),
            **facts,  # type: ignore[arg-type]
        )
    )


def _floats_only(attrs: dict[str, AttrValue], in_types: Sequence[TensorType | None], opset: int) -> dict | str:
    """Division is modelled over the reals: an integer one (ONNX truncates it) stays opaque, as does one whose
    input types import could not tell."""
    if any(t is None or not t.dtype.startswith(("float", "bfloat")) for t in in_types):
        return "integer (or untyped) division is not modelled"
    return attrs


_ARITHMETIC = {FIELD_EXACT, BATCH_POLYMORPHIC, EPILOGUE, TASO}
ADD = _binary("Add", np.add, "Element-wise sum with numpy broadcasting.", _ARITHMETIC, frozenset({SKIP_EPILOGUE}))
MUL = _binary(
    "Mul", np.multiply, "Element-wise product with broadcasting; a 0-d second input is TASO's scalar mul.", _ARITHMETIC
)
DIV = _binary(
    "Div",
    np.divide,
    "Element-wise quotient with broadcasting, of floats (integer division stays opaque).",
    {BATCH_POLYMORPHIC, EPILOGUE},
    commutative=False,
    normalize=_floats_only,
    field=lambda xs, a, n, z: (xs[0] * z.inverse(xs[1]) % z.m,),
)
RECIPROCAL = _unary(
    "Reciprocal",
    np.reciprocal,
    "1 / x, of floats. The dynamo exporter writes rsqrt (RMSNorm's) as Reciprocal(Sqrt(v)) times x, a form "
    "onnxruntime's SimplifiedLayerNormFusion does not match where it matches x / Sqrt(v) (specs/div.py).",
    {BATCH_POLYMORPHIC},
    normalize=_floats_only,
    field=lambda xs, a, n, z: (z.inverse(xs[0]),),
)
RELU = _unary("Relu", lambda x: np.maximum(x, 0).astype(x.dtype), "max(x, 0).", {BATCH_POLYMORPHIC, EPILOGUE, TASO})
SIGMOID = _unary(
    "Sigmoid",
    lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "1 / (1 + exp(-x)); over Z_p a keyed random function (specs/sigmoid.py).",
    {BATCH_POLYMORPHIC, EPILOGUE},
)
TANH = _unary(
    "Tanh",
    np.tanh,
    "Hyperbolic tangent; over Z_p a keyed random function.",
    {BATCH_POLYMORPHIC, EPILOGUE},
    no_spec="no axioms written yet: it would take the element-wise ones of specs/sigmoid.py (a spec of its own "
    "leaves every shipped proof trusted: each records only what it rested on)",
)
