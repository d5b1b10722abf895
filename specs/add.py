"""Add: element-wise sum of two tensors of one shape, or of a per-channel tensor (C, 1, 1) spread over NCHW (a
``bias`` of its ``channels`` vector, specs/conv.py and specs/batchnorm.py), or of a vector along the last axis of
a tensor of rank 3 or more (``bias_last``, specs/reshape.py), or of a 0-d scalar (``sadd``: GELU's 1 +
erf(...), a norm's epsilon, each a ``num``, specs/numbers.py), or of a tensor along its size-1 axes (``bcast``,
specs/broadcast.py, as Mul's and Div's: attention's mask over the batch); other broadcasting is not modelled, and
such rules stay unknown."""

from taso.verify import (
    Axiom,
    D,
    R,
    Symbol,
    Unsupported,
    broadcasts,
    channel_values,
    ints,
    per_channel,
    same_shape,
    spread,
    tensors,
)


def _add(attrs, xs):
    """The symbol's semantics: two tensors of one shape. Broadcasting is outside it (z3 gives the sum the first
    one's shape, and the lowering never broadcasts), so the spec check must not take it for an instance."""
    if xs[0].shape != xs[1].shape:
        raise ValueError(f"add of shapes {xs[0].shape} and {xs[1].shape}: broadcasting is not modelled")
    return xs[0] + xs[1]


def _sadd(attrs, xs):
    """``sadd``'s semantics: a tensor plus a 0-d scalar (GELU's 1 + erf(...))."""
    if xs[1].ndim != 0:
        raise ValueError(f"sadd of a tensor of shape {xs[1].shape}: only a 0-d scalar is modelled")
    return xs[0] + xs[1]


SYMBOLS = [
    Symbol("add", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Add", compute=_add),
    Symbol("sadd", 2, dims=lambda i, a, x, s: D(x, i), rank=lambda a, x, s: R(x), op="Add", compute=_sadd),
]


def _last_axis(x, c):
    """Whether ``c`` is a vector spread along the last axis of ``x`` of rank 3 or more (a transformer's bias over
    [B, S, N]; over a matrix that axis is the channel axis, and per channel says so)."""
    return x.rank is not None and x.rank >= 3 and c.shape == (x.shape[-1],)


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    if per_channel(tx, ty):
        return [f.add(args[0], f.bias(channel_values(f, args[1], ty, args[0]), args[0]))]
    if per_channel(ty, tx):
        return [f.add(args[1], f.bias(channel_values(f, args[0], tx, args[1]), args[1]))]
    if _last_axis(tx, ty):
        f.fact(D(args[1], 0) == D(args[0], tx.rank - 1))
        return [f.add(args[0], f.bias_last(args[1], args[0]))]
    if _last_axis(ty, tx):
        f.fact(D(args[0], 0) == D(args[1], ty.rank - 1))
        return [f.add(args[1], f.bias_last(args[0], args[1]))]
    if ty.shape == () != tx.shape:
        return [f.sadd(*args)]
    if tx.shape == () != ty.shape:
        return [f.sadd(args[1], args[0])]
    if broadcasts(tx, ty):  # along size-1 axes (attention's mask over the batch or the heads), as Mul's
        return [f.add(args[0], spread(f, args[1], ty, args[0], tx))]
    if broadcasts(ty, tx):
        return [f.add(args[1], spread(f, args[0], tx, args[1], ty))]
    if tx.shape != ty.shape:
        raise Unsupported(
            "Add with broadcasting other than per channel, along the last axis, along size-1 axes or of a 0-d scalar"
        )
    f.fact(*same_shape(args[0], args[1], tx.rank))
    return [f.add(*args)]


LOWER = {"Add": _lower}


def axioms(f):
    x, y, z, w = tensors("x y z w")
    m, n, a, s, k = ints("m n a s k")
    same = {"x": (m, n), "y": (m, n), "z": (m, n), "w": (m, n)}
    axis = {"a": (0, 1)}
    return [
        Axiom("add-comm", f.add(x, y), f.add(y, x), same, generic=True),
        # grouped to the right only: with add-comm beside it a sum's terms still meet in one class, and a
        # two-way trigger regrouped sums by the ten thousand (90 k instances in f47b239dcb's search)
        Axiom("add-assoc", f.add(f.add(x, y), z), f.add(x, f.add(y, z)), same, generic=True, oriented=True),
        # cat(x+y, z+w) = cat(x, z) + cat(y, w); the right side alone does not fix where x ends
        Axiom(
            "add-cat",
            f.cat(f.add(x, y), f.add(z, w), axis=a),
            f.add(f.cat(x, z, axis=a), f.cat(y, w, axis=a)),
            same,
            when=(D(x, a) == D(y, a),),
            domains=axis,
            generic=True,
        ),
        Axiom(
            "add-slice",
            f.slice(f.add(x, y), axis=a, start=s, size=k),
            f.add(f.slice(x, axis=a, start=s, size=k), f.slice(y, axis=a, start=s, size=k)),
            same,
            domains={**axis, "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
