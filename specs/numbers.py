"""Known numbers as 0-d tensors: ``num(value)`` is the number `taso.ops.numbers` reads a 0-d float constant as
(sqrt 2 for 1.4142135, 1/2 for 0.5), named by its float64 bits; the lowering writes a rule's 0-d float weight
with data as it (any other weight stays a free tensor). What makes an exporter's division by a constant the
product by its reciprocal: ``sdiv(x, num(c)) = smul(x, num(1/c))``, one axiom per number whose reciprocal is
known exactly (`taso.ops.numbers.Number.inverse`), and a product by one twice as the product by its square (x * (1/sqrt
2) * (1/sqrt 2) is x / 2). The reading is the approximation a model's floats already
make (1.4142135 is not sqrt 2): `subst optimize` checks every application numerically."""

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


def axioms(f):
    (x,) = tensors("x")
    m, n = ints("m n")
    return [
        Axiom(
            f"div-by-{c.value:.6g}",
            f.sdiv(x, f.num(value=c.bits)),
            f.smul(x, f.num(value=c.inverse().bits)),
            {"x": (m, n)},
            generic=True,
        )
        for c in _DIVISORS
    ] + [
        Axiom(
            f"twice-by-{c.value:.6g}",
            f.smul(f.smul(x, f.num(value=c.bits)), f.num(value=c.bits)),
            f.smul(x, f.num(value=(c * c).bits)),
            {"x": (m, n)},
            generic=True,
        )
        for c in _DIVISORS
    ]
