"""Relu: max(x, 0), element-wise. The axioms here hold for any element-wise function; those that need
relu(0) = 0 or monotonicity sit with enlarge, the identity kernel (constants.py) and max pooling."""

from taso.verify import D, R, Symbol, elementwise_axioms

SYMBOLS = [Symbol("relu", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Relu")]


def axioms(f):
    return elementwise_axioms(f, f.relu)
