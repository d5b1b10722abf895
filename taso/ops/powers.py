"""Exp, Sqrt and Pow: element-wise ops with exact fingerprints beyond + and x (`taso.ops.field`'s table says
which identities each one's field rule lets a fingerprint see)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops import field as ff
from taso.ops.elementwise import _unary
from taso.ops.opdef import Arrays, Attrs, OpDef, register
from taso.ops.shapes import broadcast_shapes
from taso.ops.traits import BATCH_POLYMORPHIC, EPILOGUE


def _exp_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """In Z_p, w ** (x's Z_q component): exp(a + b) = exp(a) * exp(b) exactly. Its own Z_q component is a keyed
    function, so an exp of an exp is a random function of the inner one (Mirage's LAX fragment)."""
    if z.partner is None:
        return (z.keyed(xs[0], "Exp"),)
    return (z.exp(z.partner[0]),)


EXP = _unary(
    "Exp",
    np.exp,
    "e ** x. Over Z_p, w ** x with w of order q, exact through sums (see `_exp_field`).",
    {BATCH_POLYMORPHIC, ff.EXPONENTIAL},
    field=_exp_field,
    meaning="exp(a)",
)
SQRT = _unary(
    "Sqrt",
    np.sqrt,
    "Square root (nan below 0). Over Z_m, x ** ((m + 1) / 4): a root of the residues, of -x for the others.",
    {BATCH_POLYMORPHIC, EPILOGUE},
    field=lambda xs, a, n, z: (z.sqrt(xs[0]),),
    meaning="sqrt(a)",
)


def _pow_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    """The base's dtype (ONNX lets the exponent's differ), the broadcast shape."""
    return (TensorType(types[0].dtype, broadcast_shapes(types[0].shape, types[1].shape)),)


def _half_steps(e: np.ndarray, m: int) -> int | None:
    """The exponent, in halves, when it is one constant k / 2 with |k| <= 128 (2 is 4 halves, 0.5 one), read
    back from its residue; None for any other (a varying or arbitrary exponent)."""
    values = np.unique(np.asarray(e) % m)
    if values.size != 1:
        return None
    halves = int(values[0]) * 2 % m
    signed = halves if halves <= m // 2 else halves - m
    return signed if abs(signed) <= 128 else None


def _pow_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """x ** k exactly for a constant k that is a whole or half number (x ** 0.5 is `Sqrt`'s root, a negative k
    through the inverse); any other exponent makes it a keyed function of both inputs."""
    x, e = (np.asarray(v, dtype=np.int64) for v in xs)
    shape = np.broadcast_shapes(x.shape, e.shape)
    halves = _half_steps(e, z.m)
    if halves is None:
        x, e = np.broadcast_arrays(x, e)
        return (z.keyed(x * z.m + e, "Pow"),)
    base = z.sqrt(x) if halves % 2 else x
    steps = halves if halves % 2 else halves // 2
    return (np.broadcast_to(z.power(base, steps), shape).copy(),)


POW = register(
    OpDef(
        "Pow",
        (2, 2),
        {},
        _pow_shape,
        lambda xs, a, n: (np.power(xs[0], xs[1]).astype(xs[0].dtype),),
        "x ** y element-wise with broadcasting; modelled for a constant exponent (over Z_p: `_pow_field`).",
        elementwise=True,
        tags=frozenset({BATCH_POLYMORPHIC, EPILOGUE}),
        field=_pow_field,
        meaning="a ** b",
    )
)
