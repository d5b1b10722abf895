"""HardSigmoid: max(0, min(1, alpha * x + beta)), element-wise, at float ``alpha`` and ``beta`` (a symbol's
integer arguments by their bits, `taso.verify.attr_int`): it moves through transposes, concats and slices."""

import struct

from taso import ops
from taso.verify import D, R, Symbol, attr_int, elementwise_axioms, ints


def _float(bits):
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _hardsigmoid(attrs, xs):
    """The symbol's semantics: the catalogue's HardSigmoid at the alpha and beta its bits stand for."""
    floats = {k: _float(attrs[k]) for k in ("alpha", "beta")}
    return ops.OPS["HardSigmoid"].run(list(xs), floats)[0]


SYMBOLS = [
    Symbol(
        "hardsigmoid",
        1,
        dims=lambda i, a, x: D(x, i),
        rank=lambda a, x: R(x),
        attrs=("alpha", "beta"),
        op="HardSigmoid",
        compute=_hardsigmoid,
    )
]
_PARAMS = {
    "al": tuple(attr_int(v) for v in (0.2, 1 / 6, -0.5)),
    "be": tuple(attr_int(v) for v in (0.5, 0.0, 1.25)),
}


def axioms(f):
    al, be = ints("al be")
    return elementwise_axioms(f, f.hardsigmoid, {"alpha": al, "beta": be}, _PARAMS)
