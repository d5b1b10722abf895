"""Known numbers as 0-d tensors: ``num(value)`` is the number `taso.ops.numbers` reads a 0-d float constant as
(sqrt 2 for 1.4142135, 1/2 for 0.5), named by its float64 bits; the lowering writes a rule's 0-d float weight
with data as it (any other weight stays a free tensor). What makes an exporter's division by a constant the
product by its reciprocal: ``sdiv(x, num(c)) = smul(x, num(1/c))``, one axiom per number whose reciprocal is
known exactly (`taso.ops.numbers.Number.inverse`), and a product by one twice as the product by its square
(x * (1/sqrt 2) * (1/sqrt 2) is x / 2); x ** 2 and x ** 3 are products and x ** 0.5 is the root (a norm's,
specs/layernorm.py); a product by ``num(b)`` is ``scale(x, b)`` (specs/gemm.py: QuickGelu's alpha). Each is
``eager`` (`taso.verify.Axiom`): the form it rewrites a rule into counts as the rule's own, so GELU spelled with
x / 2 meets its definition by x * 0.5 among its relevant axioms. ``num``'s integer is the one
`taso.verify.attr_int` makes of a float attribute, so a norm's epsilon attribute and the constant its spelling
adds are one term. The reading is the approximation a model's floats already make
(1.4142135 is not sqrt 2): `subst optimize` checks every application numerically."""

import struct
from fractions import Fraction

import numpy as np

from taso.ops import numbers
from taso.verify import Axiom, Symbol, ints, tensors


def _num(attrs, xs):
    """The number, as the float64 nearest to it (the spec check's tolerance covers the rest)."""
    c = struct.unpack("<d", struct.pack("<q", int(attrs["value"])))[0]
    return np.array(numbers.read(c).value)


SYMBOLS = [Symbol("num", 0, dims=lambda i, a: 1, rank=lambda a: 0, attrs=("value",), compute=_num)]

_DIVISORS = (*numbers.KNOWN, *(numbers.Number(Fraction(2) ** k) for k in (-2, -1, 1, 2)))
"""The numbers a division by is an axiom: the known ones, and 1/4, 1/2, 2, 4 (GELU's x / 2)."""
_HALF, _TWO, _THREE = (numbers.Number(Fraction(k)) for k in (Fraction(1, 2), 2, 3))


def axioms(f):
    (x,) = tensors("x")
    m, n, b = ints("m n b")
    return (
        [
            Axiom(
                f"div-by-{c.value:.6g}",
                f.sdiv(x, f.num(value=c.bits)),
                f.smul(x, f.num(value=c.inverse().bits)),
                {"x": (m, n)},
                generic=True,
                eager=True,
            )
            for c in _DIVISORS
        ]
        + [
            Axiom(
                f"twice-by-{c.value:.6g}",
                f.smul(f.smul(x, f.num(value=c.bits)), f.num(value=c.bits)),
                f.smul(x, f.num(value=(c * c).bits)),
                {"x": (m, n)},
                generic=True,
                eager=True,
            )
            for c in _DIVISORS
        ]
        + [
            Axiom(  # QuickGelu's alpha, Gemm's: a float attribute is a scale by the number it is read as
                "smul-num-scale",
                f.smul(x, f.num(value=b)),
                f.scale(x, factor=b),
                {"x": (m, n)},
                domains={"b": tuple(numbers.Number(c).bits for c in (Fraction(1, 2), Fraction("1.702")))},
                generic=True,
                eager=True,
                oriented=True,
            ),
            Axiom("spow-half", f.spow(x, f.num(value=_HALF.bits)), f.sqrt(x), {"x": (m, n)}, generic=True, eager=True),
            Axiom("spow-two", f.spow(x, f.num(value=_TWO.bits)), f.mul(x, x), {"x": (m, n)}, generic=True, eager=True),
            Axiom(
                "spow-three",
                f.spow(x, f.num(value=_THREE.bits)),
                f.mul(x, f.mul(x, x)),
                {"x": (m, n)},
                generic=True,
                eager=True,
            ),
        ]
    )
