"""Sub: element-wise difference of two tensors of one shape, the sum with the negated second (specs/neg.py);
other broadcasting is not modelled, and such rules stay unknown."""

from taso.verify import Axiom, D, R, Symbol, Unsupported, ints, same_shape, tensors


def _sub(attrs, xs):
    """The symbol's semantics: two tensors of one shape (broadcasting is outside it, as for add)."""
    if xs[0].shape != xs[1].shape:
        raise ValueError(f"sub of shapes {xs[0].shape} and {xs[1].shape}: broadcasting is not modelled")
    return xs[0] - xs[1]


SYMBOLS = [Symbol("sub", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Sub", compute=_sub)]


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    if tx.shape != ty.shape:
        raise Unsupported("Sub with broadcasting")
    f.fact(*same_shape(args[0], args[1], tx.rank))
    return [f.sub(*args)]


LOWER = {"Sub": _lower}


def axioms(f):
    x, y = tensors("x y")
    m, n = ints("m n")
    return [Axiom("sub-neg", f.sub(x, y), f.add(x, f.neg(y)), {"x": (m, n), "y": (m, n)}, generic=True)]
