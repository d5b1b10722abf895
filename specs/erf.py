"""Erf, element-wise: it moves through transposes, concats and slices, and it is odd (erf(-x) = -erf(x)).
erf(0) = 0, but relu's axioms that need f(0) = 0 sit with the ops that pad (constants.py): not written here."""

from taso.verify import Axiom, D, R, Symbol, elementwise_axioms, ints, tensors

SYMBOLS = [Symbol("erf", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Erf")]


def axioms(f):
    (x,) = tensors("x")
    m, n = ints("m n")
    return [
        *elementwise_axioms(f, f.erf),
        Axiom("erf-odd", f.erf(f.neg(x)), f.neg(f.erf(x)), {"x": (m, n)}, generic=True),
    ]
