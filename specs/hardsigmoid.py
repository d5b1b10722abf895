"""HardSigmoid: max(0, min(1, alpha * x + beta)), element-wise, at float ``alpha`` and ``beta`` (a symbol's
integer arguments by their bits, `taso.verify.attr_int`): it moves through transposes, concats and slices."""

import struct

from taso import ops
from taso.verify import Axiom, D, R, Symbol, attr_int, ints, tensors


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
    x, y = tensors("x y")
    m, n, a, s, k, al, be = ints("m n a s k al be")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom(
            "hardsigmoid-transpose",
            f.hardsigmoid(f.tr(x), alpha=al, beta=be),
            f.tr(f.hardsigmoid(x, alpha=al, beta=be)),
            shapes,
            domains=_PARAMS,
            generic=True,
        ),
        Axiom(
            "hardsigmoid-cat",
            f.hardsigmoid(f.cat(x, y, axis=a), alpha=al, beta=be),
            f.cat(f.hardsigmoid(x, alpha=al, beta=be), f.hardsigmoid(y, alpha=al, beta=be), axis=a),
            shapes,
            domains={"a": (0, 1), **_PARAMS},
            generic=True,
        ),
        Axiom(
            "hardsigmoid-slice",
            f.hardsigmoid(f.slice(x, axis=a, start=s, size=k), alpha=al, beta=be),
            f.slice(f.hardsigmoid(x, alpha=al, beta=be), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2), **_PARAMS},
            generic=True,
            oriented=True,
        ),
    ]
