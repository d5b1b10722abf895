"""Pow: ``pow(x, y)`` is x ** y element-wise for tensors of one shape; an exponent that broadcasts along size-1
axes is ``bcast`` of it (specs/broadcast.py), as for Div. A constant exponent is a weight whose value the terms
do not see, so integer powers as repeated products are stated with the exponent built from ``ones2``
(specs/constants.py): x ** 1 = x and x ** (1 + 1) = x * x, true for every real x. pow(x, y + z) =
pow(x, y) * pow(x, z) holds only for x > 0 (-1 ** (0.5 + 0.5) is -1, nan * nan is nan) and is not stated.
``spow(x, e)`` is to a 0-d exponent, a rule's constant one the ``num`` term of its value: specs/numbers.py makes
x ** 2 and x ** 3 products (the tanh GELU's x ** 3, a norm's square) and x ** 0.5 the root (a norm's)."""

import numpy as np

from taso.verify import Axiom, D, R, Symbol, Unsupported, broadcasts, ints, same_shape, spread, tensors


def _power(x, y):
    """x ** y, but where a fractional power of a negative base is nan, which equals nothing: there the check takes
    |x|'s power, as Sqrt's does (specs/sqrt.py), so a root spelled as a power compares with Sqrt, and an axiom
    wrong at some other x still fails."""
    return np.where((x < 0) & (y != np.round(y)), np.abs(x), x) ** y


def _pow(attrs, xs):
    """The symbol's semantics: base and exponent of one shape (broadcasting is `bcast`'s)."""
    x, y = xs
    if x.shape != y.shape:
        raise ValueError(f"pow of shapes {x.shape} and {y.shape}: broadcasting is bcast's")
    return _power(x, y)


def _spow(attrs, xs):
    """``spow``'s semantics: to a 0-d exponent."""
    if xs[1].ndim != 0:
        raise ValueError(f"spow to a tensor of shape {xs[1].shape}: only a 0-d exponent is modelled")
    return _power(*xs)


SYMBOLS = [
    Symbol("pow", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Pow", compute=_pow),
    Symbol("spow", 2, dims=lambda i, a, x, e: D(x, i), rank=lambda a, x, e: R(x), op="Pow", compute=_spow),
]


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    if tx.shape == ty.shape:
        f.fact(*same_shape(args[0], args[1], tx.rank))
        return [f.pow(*args)]
    if broadcasts(tx, ty):
        return [f.pow(args[0], spread(f, args[1], ty, args[0], tx))]
    if ty.shape == ():
        return [f.spow(*args)]
    raise Unsupported("Pow with broadcasting other than of the exponent along its size-1 axes or a 0-d one")


LOWER = {"Pow": _lower}


def axioms(f):
    x, y, z, w = tensors("x y z w")
    m, n, a, s, k = ints("m n a s k")
    same = {"x": (m, n), "y": (m, n), "z": (m, n), "w": (m, n)}
    one = f.ones2(shape=(m, n))
    return [
        Axiom("pow-one", f.pow(x, one), x, {"x": (m, n)}),
        Axiom("pow-two", f.pow(x, f.add(one, one)), f.mul(x, x), {"x": (m, n)}),
        Axiom("pow-transpose", f.pow(f.tr(x), f.tr(y)), f.tr(f.pow(x, y)), same, generic=True),
        Axiom(
            "pow-cat",
            f.pow(f.cat(x, z, axis=a), f.cat(y, w, axis=a)),
            f.cat(f.pow(x, y), f.pow(z, w), axis=a),
            same,
            when=(D(x, a) == D(y, a),),
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "pow-slice",
            f.slice(f.pow(x, y), axis=a, start=s, size=k),
            f.pow(f.slice(x, axis=a, start=s, size=k), f.slice(y, axis=a, start=s, size=k)),
            same,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
