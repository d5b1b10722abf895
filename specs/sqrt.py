"""Sqrt: the square root, element-wise (nan below 0). Only the axioms every element-wise function satisfies (it
moves through transposes, concats and slices). sqrt(x) * sqrt(x) = x holds only for x >= 0, and an axiom's
``when`` constrains sizes, not values, so it is not stated; sqrt(x * y) = sqrt(x) * sqrt(y) is false for
negative x and y (nan against a number): z3 must leave it unproved (tests/test_field_ops.py plants it)."""

import numpy as np

from taso.verify import D, R, Symbol, elementwise_axioms


def _sqrt(attrs, xs):
    """The spec check's semantics: the root of |x|. Sqrt is nan below 0, and nan equals nothing, so on the
    check's small integers (-3..3) no axiom could pass; these axioms hold for every element-wise function,
    |x|'s root among them, and one that used sqrt(x) ** 2 = x would still fail on it (|x| is not x)."""
    return np.sqrt(np.abs(xs[0]))


SYMBOLS = [Symbol("sqrt", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Sqrt", compute=_sqrt)]


def axioms(f):
    return elementwise_axioms(f, f.sqrt)
