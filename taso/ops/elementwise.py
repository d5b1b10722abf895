"""Element-wise ops: the arithmetic (Add, Sub, Mul, Div, Neg, Reciprocal) and the activations (Relu, Sigmoid, Tanh,
Erf, Gelu, Clip, HardSigmoid, HardSwish)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops import field as ff
from taso.ops.opdef import Attrs, AttrValue, Export, FieldRule, OpDef, register
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
ADD = _binary(
    "Add",
    np.add,
    "Element-wise sum with numpy broadcasting.",
    _ARITHMETIC,
    frozenset({SKIP_EPILOGUE}),
    meaning="a + b",
)
MUL = _binary(
    "Mul",
    np.multiply,
    "Element-wise product with broadcasting; a 0-d second input is TASO's scalar mul.",
    _ARITHMETIC,
    meaning="a * b",
)
DIV = _binary(
    "Div",
    np.divide,
    "Element-wise quotient with broadcasting, of floats (integer division stays opaque).",
    {BATCH_POLYMORPHIC, EPILOGUE},
    commutative=False,
    normalize=_floats_only,
    field=lambda xs, a, n, z: (xs[0] * z.inverse(xs[1]) % z.m,),
    meaning="a / b",
)
RECIPROCAL = _unary(
    "Reciprocal",
    np.reciprocal,
    "1 / x, of floats. The dynamo exporter writes rsqrt (RMSNorm's) as Reciprocal(Sqrt(v)) times x, a form "
    "onnxruntime's SimplifiedLayerNormFusion does not match where it matches x / Sqrt(v) (specs/div.py).",
    {BATCH_POLYMORPHIC},
    normalize=_floats_only,
    field=lambda xs, a, n, z: (z.inverse(xs[0]),),
    meaning="recip(a)",
)
RELU = _unary("Relu", lambda x: np.maximum(x, 0).astype(x.dtype), "max(x, 0).", {BATCH_POLYMORPHIC, EPILOGUE, TASO})
SIGMOID = _unary(
    "Sigmoid",
    lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "1 / (1 + exp(-x)); over Z_p a keyed random function (specs/sigmoid.py).",
    {BATCH_POLYMORPHIC, EPILOGUE},
    meaning="sigmoid(a)",
)
TANH = _unary(
    "Tanh",
    np.tanh,
    "Hyperbolic tangent; over Z_p a keyed random function.",
    {BATCH_POLYMORPHIC, EPILOGUE},
    meaning="tanh(a)",
)


# ---- the element-wise vocabulary of transformers and mobile nets (issue 47) --------------------------------


def _keyed_by_attrs(name: str) -> FieldRule:
    """A keyed random function per attribute setting: HardSigmoid(0.2, 0.5) and HardSigmoid(1/6, 0.5), or the
    two Gelus, are different functions and must not share a fingerprint."""
    return lambda xs, a, n, z: (z.keyed(xs[0], f"{name}{sorted(a.items())}"),)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu(xs: Sequence[np.ndarray], attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    x = xs[0]
    if attrs["approximate"] == "tanh":
        return ((0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))).astype(x.dtype),)
    return ((0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype),)


def _gelu_field(xs: Sequence[np.ndarray], attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """GELU by its definition over the field, Erf's or Tanh's keyed function inside: x * 1/2 * (1 + erf(x /
    sqrt 2)), or x * 1/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))), its constants the numbers
    `taso.ops.numbers` reads exporters' floats as, so that their spellings share its fingerprint. The two forms
    stay two functions: erf and tanh are different keyed functions."""
    m, x = z.m, xs[0] % z.m
    if attrs["approximate"] == "tanh":
        cube = x * x % m * x % m * z.constant(0.044715) % m
        inner = (x + cube) % m * z.constant(_SQRT_2_OVER_PI) % m
        (f,) = _field(TANH)([inner], {}, n, z)
    else:
        (f,) = _field(ERF)([x * z.constant(math.sqrt(0.5)) % m], {}, n, z)
    return (x * z.constant(0.5) % m * (1 + f) % m,)


def _field(op: OpDef) -> FieldRule:
    assert op.field is not None
    return op.field


def _gelu_normalize(attrs: dict[str, AttrValue], in_types: Sequence[TensorType | None], opset: int) -> dict | str:
    if attrs.get("approximate", "none") not in ("none", "tanh"):
        return f"Gelu approximate={attrs['approximate']!r} is not an ONNX Gelu"
    return _floats_only(attrs, in_types, opset)


def _hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(x * alpha + beta, 0, 1)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _clip_normalize(attrs: dict[str, AttrValue], in_types: Sequence[TensorType | None], opset: int) -> dict | str:
    """min and max are float attributes here, read off the constant inputs 1 and 2 ONNX passes them as
    (`OpDef.attr_inputs`). An omitted bound is ONNX's default, float32's limit, so only a float32 Clip may omit
    one; an integer Clip, or one to NaN or to an infinity (the text form has none) stays opaque."""
    if any(isinstance(v, float) and not math.isfinite(v) for v in attrs.values()):
        return "Clip to NaN or to an infinity"
    if len(attrs) < 2 and any(t is not None and t.dtype != "float32" for t in in_types):
        return "Clip of other than float32 without both bounds (the default ones are float32's limits)"
    return _floats_only(attrs, in_types, opset)


def _clip_export(attrs: Attrs, in_types: Sequence[TensorType]) -> Export:
    """From opset 11 min and max are inputs (and every model import reads is opset 13+)."""
    dtype = np.dtype(in_types[0].dtype)
    return Export("Clip", {}, (np.array(attrs["min"], dtype), np.array(attrs["max"], dtype)))


SUB = _binary(
    "Sub",
    np.subtract,
    "Element-wise difference with broadcasting; exact over Z_p.",
    {FIELD_EXACT, BATCH_POLYMORPHIC, EPILOGUE},
    commutative=False,
    meaning="a - b",
)
NEG = _unary(
    "Neg",
    np.negative,
    "-x; exact over Z_p.",
    {FIELD_EXACT, BATCH_POLYMORPHIC},
    field=lambda xs, a, n, z: (-xs[0] % z.m,),
    meaning="-a",
)
ERF = _unary(
    "Erf",
    _erf,
    "The error function, of floats (GELU's exporters write it); over Z_p a keyed random function.",
    {BATCH_POLYMORPHIC, EPILOGUE},
    normalize=_floats_only,
    meaning="erf(a)",
)
GELU = register(
    OpDef(
        "Gelu",
        (1, 1),
        {"approximate": "none"},
        first_type,
        _gelu,
        "x * Phi(x) (``approximate='none'``, by erf) or its tanh approximation (``'tanh'``): two functions, two "
        "symbols (specs/gelu.py), each defined by its decomposition, over Z_p too (`_gelu_field`). ONNX has it from opset 20; older exporters write its primitives, which import "
        "keeps as they are.",
        elementwise=True,
        min_opset=20,
        normalize=_gelu_normalize,
        tags=frozenset({BATCH_POLYMORPHIC}),
        field=_gelu_field,  # type: ignore[arg-type]
    )
)
CLIP = register(
    OpDef(
        "Clip",
        (1, 1),
        {"min": -_FLOAT32_MAX, "max": _FLOAT32_MAX},
        first_type,
        lambda xs, a, n: (np.minimum(np.maximum(xs[0], a["min"]), a["max"]).astype(xs[0].dtype),),
        "min(max(x, min), max), of floats (Relu6 is Clip(0, 6)); min and max are attributes here, read off the "
        "constant inputs ONNX passes them as (a computed bound leaves the node opaque).",
        elementwise=True,
        normalize=_clip_normalize,
        attr_inputs=(("min", 1, 11), ("max", 2, 11)),
        export=_clip_export,
        tags=frozenset({BATCH_POLYMORPHIC, EPILOGUE}),
        field=_keyed_by_attrs("Clip"),
    )
)
HARD_SIGMOID = register(
    OpDef(
        "HardSigmoid",
        (1, 1),
        {"alpha": 0.2, "beta": 0.5},
        first_type,
        lambda xs, a, n: (_hard_sigmoid(xs[0], a["alpha"], a["beta"]).astype(xs[0].dtype),),  # type: ignore[arg-type]
        "max(0, min(1, alpha * x + beta)); PyTorch's hardsigmoid is alpha = 1/6.",
        elementwise=True,
        normalize=_floats_only,
        tags=frozenset({BATCH_POLYMORPHIC, EPILOGUE}),
        field=_keyed_by_attrs("HardSigmoid"),
    )
)
HARD_SWISH = _unary(
    "HardSwish",
    lambda x: (x * _hard_sigmoid(x, float(np.float32(1 / 6)), 0.5)).astype(x.dtype),
    "x * HardSigmoid(x) at alpha = 1/6 (as a float32, as ONNX stores it), beta = 0.5; ONNX's from opset 14.",
    {BATCH_POLYMORPHIC},
    normalize=_floats_only,
    min_opset=14,
)
