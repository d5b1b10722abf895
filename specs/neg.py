"""Neg: -x, element-wise and linear: it moves through transposes, concats and slices, into sums, products and
matrix products, and undoes itself."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("neg", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Neg")]


def axioms(f):
    x, y, s = tensors("x y s")
    m, n, k, a, b, ln = ints("m n k a b l")
    same = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("neg-neg", f.neg(f.neg(x)), x, same, generic=True),
        Axiom("neg-add", f.neg(f.add(x, y)), f.add(f.neg(x), f.neg(y)), same, generic=True),
        Axiom("neg-mul", f.mul(f.neg(x), y), f.neg(f.mul(x, y)), same, generic=True),
        Axiom("neg-smul", f.smul(f.neg(x), s), f.neg(f.smul(x, s)), {"x": (m, n), "s": ()}, generic=True),
        Axiom("neg-mm-left", f.mm(f.neg(x), y), f.neg(f.mm(x, y)), {"x": (m, k), "y": (k, n)}, generic=True),
        Axiom("neg-mm-right", f.mm(x, f.neg(y)), f.neg(f.mm(x, y)), {"x": (m, k), "y": (k, n)}, generic=True),
        Axiom("neg-transpose", f.neg(f.tr(x)), f.tr(f.neg(x)), same, generic=True),
        Axiom(
            "neg-cat",
            f.neg(f.cat(x, y, axis=a)),
            f.cat(f.neg(x), f.neg(y), axis=a),
            same,
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "neg-slice",
            f.neg(f.slice(x, axis=a, start=b, size=ln)),
            f.slice(f.neg(x), axis=a, start=b, size=ln),
            same,
            domains={"a": (0, 1), "b": (0, 1), "l": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
