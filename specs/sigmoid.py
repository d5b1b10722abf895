"""Sigmoid: 1 / (1 + exp(-x)), element-wise. Only the axioms every element-wise function satisfies (it moves
through transposes, concats and slices); sigmoid(0) = 1/2, so none of relu's that need f(0) = 0 (enlarge, the
identity kernel, padding) hold for it."""

from taso.verify import D, R, Symbol, elementwise_axioms

SYMBOLS = [Symbol("sigmoid", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Sigmoid")]


def axioms(f):
    return elementwise_axioms(f, f.sigmoid)
