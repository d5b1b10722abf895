"""Tanh, element-wise: it moves through transposes, concats and slices, and it is odd (tanh(-x) = -tanh(x)).
tanh(0) = 0, but relu's axioms that need f(0) = 0 sit with the ops that pad (constants.py): not written here."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("tanh", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Tanh")]


def axioms(f):
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("tanh-transpose", f.tanh(f.tr(x)), f.tr(f.tanh(x)), shapes, generic=True),
        Axiom(
            "tanh-cat",
            f.tanh(f.cat(x, y, axis=a)),
            f.cat(f.tanh(x), f.tanh(y), axis=a),
            shapes,
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "tanh-slice",
            f.tanh(f.slice(x, axis=a, start=s, size=k)),
            f.slice(f.tanh(x), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
        Axiom("tanh-odd", f.tanh(f.neg(x)), f.neg(f.tanh(x)), shapes, generic=True),
    ]
