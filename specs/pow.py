"""Pow: ``pow(x, y)`` is x ** y element-wise for tensors of one shape; an exponent that broadcasts along size-1
axes is ``bcast`` of it (specs/broadcast.py), as for Div. A constant exponent is a weight whose value the terms
do not see, so integer powers as repeated products are stated with the exponent built from ``ones2``
(specs/constants.py): x ** 1 = x and x ** (1 + 1) = x * x, true for every real x. A rule's 0-d constant exponent
is the ``num`` term of its value: x ** 2 = x * x and x ** 0.5 = sqrt(x) (nan below 0 alike). pow(x, y + z) =
pow(x, y) * pow(x, z) holds only for x > 0 (-1 ** (0.5 + 0.5) is -1, nan * nan is nan) and is not stated."""

import numpy as np

from taso.verify import Axiom, D, R, Symbol, Unsupported, attr_int, broadcasts, ints, same_shape, spread, tensors


def _pow(attrs, xs):
    """The symbol's semantics: base and exponent of one shape (broadcasting is `bcast`'s). A fractional power of
    a negative base is nan, which equals nothing: there the check takes |x|'s power, as Sqrt's does (specs/sqrt.py),
    so a root spelled as a power compares with Sqrt, and an axiom wrong at some other x still fails."""
    x, y = xs
    if x.shape != y.shape:
        raise ValueError(f"pow of shapes {x.shape} and {y.shape}: broadcasting is bcast's")
    return np.where((x < 0) & (y != np.round(y)), np.abs(x), x) ** y


SYMBOLS = [Symbol("pow", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Pow", compute=_pow)]


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    if tx.shape == ty.shape:
        f.fact(*same_shape(args[0], args[1], tx.rank))
        return [f.pow(*args)]
    if broadcasts(tx, ty):
        return [f.pow(args[0], spread(f, args[1], ty, args[0], tx))]
    raise Unsupported("Pow with broadcasting other than of the exponent along its size-1 axes")


LOWER = {"Pow": _lower}


def axioms(f):
    x, y, z, w = tensors("x y z w")
    m, n, a, s, k = ints("m n a s k")
    same = {"x": (m, n), "y": (m, n), "z": (m, n), "w": (m, n)}
    one = f.ones2(shape=(m, n))
    return [
        # a rule's 0-d exponent is the `num` term of its value (specs/layernorm.py): a square, or a root
        Axiom("pow-num-two", f.pow(x, f.bcast(f.num(value=attr_int(2.0)), x)), f.mul(x, x), {"x": (m, n)}),
        Axiom("pow-num-half", f.pow(x, f.bcast(f.num(value=attr_int(0.5)), x)), f.sqrt(x), {"x": (m, n)}),
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
