"""Concat: joins two tensors along an axis, ``cat(x, y, axis=a)``; an n-ary Concat is a left-nested chain."""

from functools import reduce

from taso.verify import Axiom, D, If, R, Symbol, ints, tensors

SYMBOLS = [
    Symbol(
        "cat",
        2,
        dims=lambda i, a, x, y: If(i == a.axis, D(x, i) + D(y, i), D(x, i)),
        rank=lambda a, x, y: R(x),
        attrs=("axis",),
        op="Concat",
    )
]


def _lower(node, args, types, f):
    rank = types[node.inputs[0]].rank
    axis = int(node.attr["axis"]) % rank
    f.fact(*(D(x, i) == D(args[0], i) for x in args[1:] for i in range(rank) if i != axis))
    return [reduce(lambda x, y: f.cat(x, y, axis=axis), args)]


LOWER = {"Concat": _lower}


def axioms(f):
    x, y, z, w = tensors("x y z w")
    m, n, a, b = ints("m n a b")
    same = {"x": (m, n), "y": (m, n), "z": (m, n), "w": (m, n)}
    return [
        # as a value only: a later split still needs the original boundaries (see split.py)
        Axiom(
            "cat-assoc",
            f.cat(f.cat(x, y, axis=a), z, axis=a),
            f.cat(x, f.cat(y, z, axis=a), axis=a),
            same,
            domains={"a": (0, 1)},
            generic=True,
        ),
        # [[x y] ; [z w]] = [[x ; z] [y ; w]] only for matching blocks
        Axiom(
            "cat-interchange",
            f.cat(f.cat(x, y, axis=b), f.cat(z, w, axis=b), axis=a),
            f.cat(f.cat(x, z, axis=a), f.cat(y, w, axis=a), axis=b),
            same,
            when=(a != b, D(x, b) == D(z, b), D(x, a) == D(y, a)),
            domains={"a": (0, 1), "b": (0, 1)},
            generic=True,
        ),
    ]
