"""Tanh, element-wise: it moves through transposes, concats and slices, and it is odd (tanh(-x) = -tanh(x)).
tanh(0) = 0, but relu's axioms that need f(0) = 0 sit with the ops that pad (constants.py): not written here."""

from taso.verify import Axiom, D, R, Symbol, elementwise_axioms, ints, tensors

SYMBOLS = [Symbol("tanh", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Tanh")]


def axioms(f):
    (x,) = tensors("x")
    m, n = ints("m n")
    return [
        *elementwise_axioms(f, f.tanh),
        Axiom("tanh-odd", f.tanh(f.neg(x)), f.neg(f.tanh(x)), {"x": (m, n)}, generic=True),
    ]
