"""Exp: e ** x, element-wise. It moves through transposes, concats and slices (as every element-wise function
does) and turns sums into products: exp(x + y) = exp(x) * exp(y), the identity the fingerprint sees exactly
(`taso.ops.field`: w ** x in Z_p)."""

from taso.verify import Axiom, D, R, Symbol, elementwise_axioms, ints, tensors

SYMBOLS = [Symbol("exp", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Exp")]


def axioms(f):
    x, y = tensors("x y")
    m, n = ints("m n")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("exp-add", f.exp(f.add(x, y)), f.mul(f.exp(x), f.exp(y)), shapes, generic=True),
        *elementwise_axioms(f, f.exp),
    ]
