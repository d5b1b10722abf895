"""Sub: element-wise difference of two tensors of one shape, the sum with the negated second (specs/neg.py), or
of a subtrahend spread along its size-1 axes (``bcast``, specs/broadcast.py: LayerNorm's x - mean(x)); other
broadcasting is not modelled, and such rules stay unknown. A tensor less itself is zeros of its shape
(``zerosR``, a symbol no op maps onto: only this axiom makes it), so x - x = y - y, which the generator finds
many times over, is proved rather than left open."""

import numpy as np

from taso.verify import Axiom, D, R, Symbol, Unsupported, broadcasts, ints, pick, same_shape, spread, tensors


def _sub(attrs, xs):
    """The symbol's semantics: two tensors of one shape (broadcasting is outside it, as for add)."""
    if xs[0].shape != xs[1].shape:
        raise ValueError(f"sub of shapes {xs[0].shape} and {xs[1].shape}: broadcasting is not modelled")
    return xs[0] - xs[1]


def _zeros(attrs, xs):
    """A zeros symbol's semantics: float32 zeros of its shape attribute."""
    return np.zeros(attrs["shape"], np.float32)


_RANKS = (1, 2, 3, 4)
SYMBOLS = [
    Symbol("sub", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Sub", compute=_sub),
    *(
        Symbol(
            f"zeros{r}",
            0,
            dims=lambda i, a: pick(i, a.shape),
            rank=lambda a, r=r: r,
            attrs=(f"shape[{r}]",),
            compute=_zeros,
        )
        for r in _RANKS
    ),
]


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    if node.inputs[0] == node.inputs[1] and tx.rank in _RANKS:
        f.reaches(f"zeros{tx.rank}")
    if broadcasts(tx, ty):  # x - mean(x): the (rows, 1) mean spread over the rows
        return [f.sub(args[0], spread(f, args[1], ty, args[0], tx))]
    if tx.shape != ty.shape:
        raise Unsupported("Sub with broadcasting other than of the subtrahend along its size-1 axes")
    f.fact(*same_shape(args[0], args[1], tx.rank))
    return [f.sub(*args)]


LOWER = {"Sub": _lower}


def axioms(f):
    x, y = tensors("x y")
    b, c, m, n = ints("b c m n")
    shapes = [(n,), (m, n), (c, m, n), (b, c, m, n)]
    return [
        Axiom("sub-neg", f.sub(x, y), f.add(x, f.neg(y)), {"x": (m, n), "y": (m, n)}, generic=True),
        # the differences that cancel, as sub-neg and add-neg-cancel would (that one a last resort, which a Sub
        # alone does not make relevant): oriented, so they only shrink terms
        Axiom("sub-add-cancel", f.sub(f.add(x, y), y), x, {"x": (m, n), "y": (m, n)}, generic=True, oriented=True),
        Axiom("add-sub-cancel", f.add(f.sub(x, y), y), x, {"x": (m, n), "y": (m, n)}, generic=True, oriented=True),
        *(Axiom(f"sub-self{len(s)}", f.sub(x, x), getattr(f, f"zeros{len(s)}")(shape=s), {"x": s}) for s in shapes),
    ]
