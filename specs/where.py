"""Where: ``where(c, x, y)`` picks, per element, ``x`` where the boolean ``c`` holds and ``y`` elsewhere, all of
one shape; a condition or an operand that broadcasts over ``x`` (a (1, 1, S, S) mask, a scalar fill) is
``bcast`` of it (specs/broadcast.py). Its axioms hold for any condition: it is element-wise (through a
transpose, a concat, a slice) and a choice (the same value either way, a condition tested twice).
"""

import numpy as np

from taso.verify import Axiom, D, R, Symbol, Unsupported, broadcasts, ints, same_shape, spread, tensors


def _where(attrs, xs):
    c, x, y = xs
    if not c.shape == x.shape == y.shape:
        raise ValueError(f"where of shapes {c.shape}, {x.shape}, {y.shape}: broadcasting is outside the symbol")
    return np.where(c != 0, x, y)


SYMBOLS = [Symbol("where", 3, dims=lambda i, a, c, x, y: D(x, i), rank=lambda a, c, x, y: R(x), compute=_where)]


def _lower(node, args, types, f):
    tc, tx, ty = (types[v] for v in node.inputs)
    c, x, y = args
    if tx.shape != ty.shape and not broadcasts(tx, ty):
        raise Unsupported("Where whose second and third inputs broadcast otherwise than the third over the second")
    if tc.shape != tx.shape and not broadcasts(tx, tc):
        raise Unsupported("Where whose condition broadcasts otherwise than over its second input")
    c = spread(f, c, tc, x, tx) if tc.shape != tx.shape else c
    y = spread(f, y, ty, x, tx) if ty.shape != tx.shape else y
    f.fact(
        *same_shape(args[0], x, tx.rank) if tc.shape == tx.shape else (),
        *same_shape(args[2], x, tx.rank) if ty.shape == tx.shape else (),
    )
    return [f.where(c, x, y)]


LOWER = {"Where": _lower}


def axioms(f):
    c, x, y, z, d, w = tensors("c x y z d w")
    m, n, a, s, k = ints("m n a s k")
    same = {"c": (m, n), "x": (m, n), "y": (m, n), "z": (m, n), "d": (m, n), "w": (m, n)}
    return [
        Axiom("where-same", f.where(c, x, x), x, same, generic=True),
        Axiom("where-twice", f.where(c, f.where(c, x, y), z), f.where(c, x, z), same, generic=True),
        Axiom("where-transpose", f.tr(f.where(c, x, y)), f.where(f.tr(c), f.tr(x), f.tr(y)), same, generic=True),
        Axiom(
            "where-cat",
            f.cat(f.where(c, x, y), f.where(d, z, w), axis=a),
            f.where(f.cat(c, d, axis=a), f.cat(x, z, axis=a), f.cat(y, w, axis=a)),
            same,
            when=(D(c, a) == D(x, a), D(y, a) == D(x, a)),  # read right to left, the seams must line up
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "where-slice",
            f.slice(f.where(c, x, y), axis=a, start=s, size=k),
            f.where(
                f.slice(c, axis=a, start=s, size=k),
                f.slice(x, axis=a, start=s, size=k),
                f.slice(y, axis=a, start=s, size=k),
            ),
            same,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
