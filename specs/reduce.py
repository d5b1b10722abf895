"""ReduceSum and ReduceMean along one axis, ``rsum(x, axis, keepdims)`` and ``rmean(x, axis, keepdims)``: a
reduction over several axes lowers to one per axis, the last axis first (so with keepdims=0 the axes still to
reduce keep their numbers), and GlobalAveragePool to ``rmean`` over each spatial axis with keepdims=1. A mean
over several axes is the mean of the means over each, every group being the same size.

Axioms: both are linear (a sum of adds, a scalar factor), commute with a concat along another axis and with
each other (a sum and a mean along different axes too), move through a 2-D transpose to the other axis and into a matmul's operand that owns the reduced
axis; a sum over a concat along its own axis is the sum of the sums. Along a size-1 axis either is the
identity; a mean ignores the order of a concat (and within a part of it), a copy of its input and an element equal
to it; a mean of ones is ones, and a row (column) of ones times a matrix is its sum. None relates a mean to a sum: that would
need the count, a constant the vocabulary has no term for, so such rules stay unknown rather than risk one that
drops it.
"""

from taso.ops import OPS
from taso.verify import Axiom, D, If, R, Symbol, attr_int, ints, tensors
from taso.verify.spec import Shape


def _dims(i, a, x):
    """Dimension ``i`` of ``x`` reduced along ``a.axis``: 1 there with keepdims, else the later axes move down."""
    if isinstance(x, Shape):
        kept = [1 if j == a.axis else d for j, d in enumerate(x)] if a.keepdims else [*x[: a.axis], *x[a.axis + 1 :]]
        return kept[i]
    return If(a.keepdims == 1, If(i == a.axis, 1, D(x, i)), If(i < a.axis, D(x, i), D(x, i + 1)))


def _sum(attrs, xs):
    """The catalogue's semantics along one axis (it refuses a bad axis or keepdims)."""
    return OPS["ReduceSum"].run(xs, {"axes": (attrs["axis"],), "keepdims": attrs["keepdims"]})[0]


def _mean(attrs, xs):
    return OPS["ReduceMean"].run(xs, {"axes": (attrs["axis"],), "keepdims": attrs["keepdims"]})[0]


def _symbol(name, op, compute):
    rank = lambda a, x: If(a.keepdims == 1, R(x), R(x) - 1)  # noqa: E731
    return Symbol(name, 1, dims=_dims, rank=rank, attrs=("axis", "keepdims"), op=op, compute=compute)


SYMBOLS = [_symbol("rsum", "ReduceSum", _sum), _symbol("rmean", "ReduceMean", _mean)]


def _lower(name):
    def lower(node, args, types, f):
        t, keep = args[0], attr_int(node.attr["keepdims"])
        for axis in reversed(node.attr["axes"]):
            t = getattr(f, name)(t, axis=int(axis), keepdims=keep)
        return [t]

    return lower


def _lower_gap(node, args, types, f):
    t = args[0]
    for axis in reversed(range(2, types[node.inputs[0]].rank)):
        t = f.rmean(t, axis=axis, keepdims=1)
    return [t]


LOWER = {"ReduceSum": _lower("rsum"), "ReduceMean": _lower("rmean"), "GlobalAveragePool": _lower_gap}


def _linear(f, r):
    """What the sum and the mean both satisfy, ``r`` naming which."""
    s = getattr(f, r)
    x, y, c = tensors("x y c")
    m, n, k, p, a, b, kd = ints("m n k p a b kd")
    same = {"x": (m, n), "y": (m, n), "c": ()}
    dom = {"a": (0, 1), "b": (0, 1), "kd": (0, 1)}
    return [
        Axiom(
            f"{r}-add",
            s(f.add(x, y), axis=a, keepdims=kd),
            f.add(s(x, axis=a, keepdims=kd), s(y, axis=a, keepdims=kd)),
            same,
            when=(D(x, a) == D(y, a),),  # the right side alone does not make the reduced axes equal
            domains=dom,
            generic=True,
        ),
        Axiom(
            f"{r}-smul",
            s(f.smul(x, c), axis=a, keepdims=kd),
            f.smul(s(x, axis=a, keepdims=kd), c),
            same,
            domains=dom,
            generic=True,
        ),
        Axiom(
            f"{r}-cat",
            s(f.cat(x, y, axis=b), axis=a, keepdims=1),
            f.cat(s(x, axis=a, keepdims=1), s(y, axis=a, keepdims=1), axis=b),
            same,
            when=(a != b, D(x, a) == D(y, a)),
            domains=dom,
            generic=True,
        ),
        Axiom(
            f"{r}-cat-dropped",
            s(f.cat(x, y, axis=b), axis=a, keepdims=0),
            f.cat(s(x, axis=a, keepdims=0), s(y, axis=a, keepdims=0), axis=b),
            same,
            when=(b < a, D(x, a) == D(y, a)),
            domains=dom,
            generic=True,
        ),
        Axiom(
            f"{r}-commute",
            s(s(x, axis=a, keepdims=1), axis=b, keepdims=1),
            s(s(x, axis=b, keepdims=1), axis=a, keepdims=1),
            same,
            domains=dom,
            generic=True,
        ),
        Axiom(  # along an axis of size 1 there is one element to sum or average: itself
            f"{r}-single",
            s(x, axis=a, keepdims=1),
            x,
            {"x": (m, n)},
            when=(a >= 0, a < R(x), D(x, a) == 1),
            domains={"a": (0, 1), "m": (1, 2), "n": (1, 3)},
            generic=True,
            oriented=True,
        ),
        Axiom(
            f"{r}-transpose",
            s(f.tr(x), axis=a, keepdims=1),
            f.tr(s(x, axis=1 - a, keepdims=1)),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains=dom,
        ),
        Axiom(
            f"{r}-transpose-dropped",
            s(f.tr(x), axis=a, keepdims=0),
            s(x, axis=1 - a, keepdims=0),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains=dom,
        ),
        Axiom(
            f"{r}-mm-rows",
            s(f.mm(x, y), axis=0, keepdims=1),
            f.mm(s(x, axis=0, keepdims=1), y),
            {"x": (m, k), "y": (k, p)},
        ),
        Axiom(
            f"{r}-mm-columns",
            s(f.mm(x, y), axis=1, keepdims=1),
            f.mm(x, s(y, axis=1, keepdims=1)),
            {"x": (m, k), "y": (k, p)},
        ),
    ]


def axioms(f):
    x, y, z = tensors("x y z")
    m, n, k, p, a, b, kd = ints("m n k p a b kd")
    return [
        *_linear(f, "rsum"),
        *_linear(f, "rmean"),
        Axiom(
            "rsum-rmean-commute",
            f.rsum(f.rmean(x, axis=a, keepdims=1), axis=b, keepdims=1),
            f.rmean(f.rsum(x, axis=b, keepdims=1), axis=a, keepdims=1),
            {"x": (m, n)},
            when=(a != b,),  # along one axis the mean leaves a single element: the sum of it is the mean
            domains={"a": (0, 1), "b": (0, 1)},
            generic=True,
        ),
        Axiom(  # a mean of ones is one (a matrix's: ``ones2``)
            "rmean-ones",
            f.rmean(f.ones2(shape=(m, n)), axis=a, keepdims=1),
            f.ones2(shape=(If(a == 0, 1, m), If(a == 1, 1, n))),
            {},
            when=(a >= 0, a <= 1, m >= 1, n >= 1),
            domains={"a": (0, 1), "m": (1, 2, 3), "n": (1, 2)},
            oriented=True,
        ),
        Axiom(  # the concat doubles the count and the sum alike
            "rmean-cat-self",
            f.rmean(f.cat(x, x, axis=a), axis=a, keepdims=kd),
            f.rmean(x, axis=a, keepdims=kd),
            {"x": (m, n)},
            domains={"a": (0, 1), "kd": (0, 1)},
            generic=True,
            oriented=True,
        ),
        Axiom(  # a mean does not see the order of what it averages
            "rmean-cat-swap",
            f.rmean(f.cat(x, y, axis=a), axis=a, keepdims=kd),
            f.rmean(f.cat(y, x, axis=a), axis=a, keepdims=kd),
            {"x": (m, n), "y": (m, n)},
            domains={"a": (0, 1), "kd": (0, 1)},
            generic=True,
        ),
        Axiom(  # nor the order within a part of it
            "rmean-cat-inner-swap",
            f.rmean(f.cat(x, f.cat(y, z, axis=a), axis=a), axis=a, keepdims=kd),
            f.rmean(f.cat(x, f.cat(z, y, axis=a), axis=a), axis=a, keepdims=kd),
            {"x": (m, n), "y": (m, n), "z": (m, n)},
            domains={"a": (0, 1), "kd": (0, 1)},
            generic=True,
        ),
        Axiom(  # nor one more element equal to the mean
            "rmean-cat-mean",
            f.rmean(f.cat(f.rmean(x, axis=a, keepdims=1), x, axis=a), axis=a, keepdims=kd),
            f.rmean(x, axis=a, keepdims=kd),
            {"x": (m, n)},
            domains={"a": (0, 1), "kd": (0, 1)},
            generic=True,
            oriented=True,
        ),
        Axiom(  # a row of ones times a matrix sums its rows, a matrix times a column of ones its columns
            "rsum-mm-ones-rows",
            f.mm(f.ones2(shape=(1, k)), y),
            f.rsum(y, axis=0, keepdims=1),
            {"y": (k, p)},
            oriented=True,
        ),
        Axiom(
            "rsum-mm-ones-columns",
            f.mm(y, f.ones2(shape=(k, 1))),
            f.rsum(y, axis=1, keepdims=1),
            {"y": (p, k)},
            oriented=True,
        ),
        Axiom(
            "rsum-cat-own-axis",
            f.rsum(f.cat(x, y, axis=a), axis=a, keepdims=kd),
            f.add(f.rsum(x, axis=a, keepdims=kd), f.rsum(y, axis=a, keepdims=kd)),
            {"x": (m, n), "y": (m, n)},
            domains={"a": (0, 1), "kd": (0, 1)},
            generic=True,
        ),
    ]
