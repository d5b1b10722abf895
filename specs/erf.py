"""Erf, element-wise: it moves through transposes, concats and slices, and it is odd (erf(-x) = -erf(x)).
erf(0) = 0, but relu's axioms that need f(0) = 0 sit with the ops that pad (constants.py): not written here."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("erf", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Erf")]


def axioms(f):
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("erf-transpose", f.erf(f.tr(x)), f.tr(f.erf(x)), shapes, generic=True),
        Axiom(
            "erf-cat",
            f.erf(f.cat(x, y, axis=a)),
            f.cat(f.erf(x), f.erf(y), axis=a),
            shapes,
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "erf-slice",
            f.erf(f.slice(x, axis=a, start=s, size=k)),
            f.slice(f.erf(x), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
        Axiom("erf-odd", f.erf(f.neg(x)), f.neg(f.erf(x)), shapes, generic=True),
    ]
