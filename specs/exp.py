"""Exp: e ** x, element-wise. It moves through transposes, concats and slices (as every element-wise function
does) and turns sums into products: exp(x + y) = exp(x) * exp(y), the identity the fingerprint sees exactly
(`taso.ops.field`: w ** x in Z_p)."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("exp", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Exp")]


def axioms(f):
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("exp-add", f.exp(f.add(x, y)), f.mul(f.exp(x), f.exp(y)), shapes, generic=True),
        Axiom("exp-transpose", f.exp(f.tr(x)), f.tr(f.exp(x)), shapes, generic=True),
        Axiom(
            "exp-cat",
            f.exp(f.cat(x, y, axis=a)),
            f.cat(f.exp(x), f.exp(y), axis=a),
            shapes,
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "exp-slice",
            f.exp(f.slice(x, axis=a, start=s, size=k)),
            f.slice(f.exp(x), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
