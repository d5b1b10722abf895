"""Known numbers: the float constants exporters write for the irrationals and decimals that definitions name (GELU's
sqrt 2 and 1/sqrt 2, its tanh form's sqrt(2/pi) and 0.044715, QuickGelu's 1.702), read as those numbers.

Why: ``x / 1.4142135`` and ``x * 0.70710677`` are one function only if both constants are read as sqrt 2 and its
inverse; as floats they are two dyadic rationals whose product is not 1, so neither a fingerprint nor a proof
would pair them with Gelu, which is defined by 1/sqrt 2. A float that is the float64, float32 or float16 rounding
of a known number (or of its negation) is read as that number, in the fingerprint (`residue`, a root mod p:
Mirage's construction) and in a proof (`bits`, the attribute of specs/numbers.py's ``num``). Any other float is
read as itself, exactly (a dyadic rational), as before.

This reading is an approximation, the one a model's float computation already makes: its author wrote sqrt(2)
and the file holds 1.4142135. A rule proved under it is exact over the reals for the numbers read, so each
application keeps the numerical check `subst optimize` runs on every rewrite. Only the numbers below are read
so: a float16 constant 1.4140625 is sqrt 2, but 1e-5 (LayerNorm's epsilon) stays the dyadic float it is.

A number is ``r * sqrt(2) ** a * g ** b`` (r rational, a in {0, 1}, b an integer, g = sqrt(2 / pi)): closed
under products and inverses, which is what folding constants needs. Over Z_p, sqrt 2 is a square root of 2 (p
= 7 mod 8, so 2 is a residue); g has no algebra the targets use and is a fixed random residue, an indeterminate
as an uninterpreted constant is in z3. Over Z_q (q = 3 mod 8, where 2 has no root) sqrt 2 is one too: the Z_q
component only feeds Exp, so a lost identity there loses a pair, never makes one.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np


@dataclass(frozen=True)
class Number:
    """``rational * sqrt(2) ** root2 * sqrt(2 / pi) ** g`` exactly (``root2`` is 0 or 1)."""

    rational: Fraction
    root2: int = 0
    g: int = 0

    def __mul__(self, other: Number) -> Number:
        r, a = self.rational * other.rational, self.root2 + other.root2
        return Number(r * 2 if a == 2 else r, a % 2, self.g + other.g)

    def inverse(self) -> Number:
        """1 / self (self not 0): 1 / sqrt 2 is sqrt(2) / 2."""
        return Number(1 / self.rational / (2 if self.root2 else 1), self.root2, -self.g)

    @property
    def value(self) -> float:
        """The nearest float64 (what a spec check computes with)."""
        return float(self.rational) * math.sqrt(2) ** self.root2 * math.sqrt(2 / math.pi) ** self.g

    @property
    def bits(self) -> int:
        """The float64 bits of `value`: the integer a proof names the number by (distinct numbers, distinct
        bits), as a float attribute is named by its bits (`taso.verify.lowering.attr_int`)."""
        return struct.unpack("<q", struct.pack("<d", self.value))[0]

    def residue(self, m: int) -> int:
        """The number in Z_m (m = p or q of `taso.ops.field`); sqrt 2 and g as the module docstring says."""
        out = self.rational.numerator % m * pow(self.rational.denominator, -1, m) % m
        if self.root2:
            out = out * _root2(m) % m
        g = _g(m)
        return out * pow(g, self.g, m) % m


@cache
def _root2(m: int) -> int:
    """A square root of 2 mod m where one exists (m = 3 mod 4: 2 ** ((m + 1) / 4)), else a fixed stand-in."""
    root = pow(2, (m + 1) // 4, m)
    return root if root * root % m == 2 else _drawn("sqrt 2", m)


@cache
def _g(m: int) -> int:
    return _drawn("sqrt(2/pi)", m)


def _drawn(name: str, m: int) -> int:
    """A fixed residue in [2, m) drawn from ``name``: an indeterminate's value (`taso.ops.field` cannot be
    imported here: its `constant` reads numbers through this module)."""
    h = int.from_bytes(hashlib.blake2b(f"{name} mod {m}".encode(), digest_size=8).digest(), "little")
    return h % (m - 2) + 2


SQRT2 = Number(Fraction(1), 1)
G = Number(Fraction(1), 0, 1)
"""sqrt(2 / pi), the tanh GELU's scale."""
_DECIMALS = (Fraction("0.044715"), Fraction("1.702"))
KNOWN: tuple[Number, ...] = tuple(
    dict.fromkeys(
        n
        for base in (SQRT2, G, G * G, *(Number(d) for d in _DECIMALS), G * Number(_DECIMALS[0]))
        for n in (base, base.inverse())
    )
)
"""The numbers a float is read as when it rounds one of them: sqrt 2, sqrt(2/pi), 2/pi, 0.044715, 1.702,
sqrt(2/pi) * 0.044715 and their inverses (and negations)."""


@cache
def _roundings() -> dict[float, Number]:
    out: dict[float, Number] = {}
    for n in KNOWN:
        for sign in (1, -1):
            signed = Number(n.rational * sign, n.root2, n.g)
            for dtype in (np.float16, np.float32, np.float64):
                out.setdefault(float(dtype(signed.value)), signed)
    return out


def read(c: float) -> Number:
    """The number the float ``c`` stands for: a known one it rounds, else ``c`` itself (exact; raises on nan
    and inf)."""
    c = float(c)
    return _roundings().get(c) or Number(Fraction(c))
