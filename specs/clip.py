"""Clip: min(max(x, min), max), element-wise, of float bounds (Relu6 is Clip(0, 6)). A float attribute is a
symbol's integer argument by its IEEE bits (`taso.verify.attr_int`); for bounds from +0.0 to +inf those order
as the floats do, which is what relu-clip and clip-relu ask (a bound of at least 0 makes relu idle); NaN's bits
order above +inf's, so those axioms leave it out (import never makes an infinite or NaN bound anyway)."""

import math
import struct

from taso import ops
from taso.verify import Axiom, D, R, Symbol, attr_int, elementwise_axioms, ints, tensors


def _float(bits):
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _clip(attrs, xs):
    """The symbol's semantics: the catalogue's Clip at the bounds its bits stand for."""
    return ops.OPS["Clip"].run(list(xs), {"min": _float(attrs["min"]), "max": _float(attrs["max"])})[0]


SYMBOLS = [
    Symbol(
        "clip", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), attrs=("min", "max"), op="Clip", compute=_clip
    )
]
_BOUNDS = {
    "lo": tuple(attr_int(v) for v in (-math.inf, -1.5, 0.0, 1.0, 2.5)),
    "hi": tuple(attr_int(v) for v in (-1.0, 0.0, 2.0, 6.0, math.inf)),
}
_ZERO, _INF = attr_int(0.0), attr_int(math.inf)


def axioms(f):
    (x,) = tensors("x")
    m, n, lo, hi = ints("m n lo hi")
    shapes = {"x": (m, n)}
    return [
        *elementwise_axioms(f, f.clip, {"min": lo, "max": hi}, _BOUNDS),
        # a lower bound of at least +0.0 (bits from 0 to +inf's) leaves nothing for a relu to do, before or after
        Axiom(
            "clip-relu",
            f.clip(f.relu(x), min=lo, max=hi),
            f.clip(x, min=lo, max=hi),
            shapes,
            when=(lo >= _ZERO, lo <= _INF),
            domains=_BOUNDS,
            generic=True,
            oriented=True,
        ),
        Axiom(
            "relu-clip",
            f.relu(f.clip(x, min=lo, max=hi)),
            f.clip(x, min=lo, max=hi),
            shapes,
            when=(lo >= _ZERO, hi >= lo, hi <= _INF),
            domains=_BOUNDS,
            generic=True,
            oriented=True,
        ),
    ]
