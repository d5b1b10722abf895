"""Sigmoid: 1 / (1 + exp(-x)), element-wise. Only the axioms every element-wise function satisfies (it moves
through transposes, concats and slices); sigmoid(0) = 1/2, so none of relu's that need f(0) = 0 (enlarge, the
identity kernel, padding) hold for it."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("sigmoid", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Sigmoid")]


def axioms(f):
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("sigmoid-transpose", f.sigmoid(f.tr(x)), f.tr(f.sigmoid(x)), shapes, generic=True),
        Axiom(
            "sigmoid-cat",
            f.sigmoid(f.cat(x, y, axis=a)),
            f.cat(f.sigmoid(x), f.sigmoid(y), axis=a),
            shapes,
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "sigmoid-slice",
            f.sigmoid(f.slice(x, axis=a, start=s, size=k)),
            f.slice(f.sigmoid(x), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
