"""Shape: ``dim(value=v)``, the one-element int64 vector ``[v]``, of which a Shape node is the concat (``cat``,
specs/concat.py) along axis 0: its input's dims from ``start`` to ``end``, ``D(x, start)`` ... ``D(x, end - 1)``,
as z3 sees a shape. So the Shape of an op whose shape rule keeps its input's dims (Relu, an Add of equal shapes)
is the Shape of that input by the shape rules alone, the Shape of a Transpose is its input's only where the dims
it swaps are equal, and a Concat of a shape's pieces is the whole shape by ``cat-assoc``. An empty Shape
(``start == end``) is not modelled (a catalogue op's result has at least one element in a rule)."""

from functools import reduce

import numpy as np

from taso.verify import Axiom, D, Symbol, Unsupported, ints


def _dim(attrs, xs):
    return np.array([attrs["value"]], np.int64)


SYMBOLS = [Symbol("dim", 0, dims=lambda i, a: 1, rank=lambda a: 1, attrs=("value",), compute=_dim)]


def _lower(node, args, types, f):
    start, end = int(node.attr["start"]), int(node.attr["end"])
    if start >= end:
        raise Unsupported("Shape of no dims")
    return [reduce(lambda a, b: f.cat(a, b, axis=0), [f.dim(value=D(args[0], i)) for i in range(start, end)])]


LOWER = {"Shape": _lower}


def axioms(f):
    (v,) = ints("v")
    return [
        # a dim is at least 1, so a shape's entries are fixed by relu (as the constants' 0/1 entries are)
        Axiom("dim-relu", f.relu(f.dim(value=v)), f.dim(value=v), {}, when=(v >= 1,), domains={"v": (-1, 0, 1, 2, 3)}),
    ]
