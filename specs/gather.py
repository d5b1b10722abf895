"""Gather by constant indices, lowered onto slices (specs/split.py): a tuple of indices is the concat of its
runs of consecutive indices, each a ``slice`` of the axis, and a single index is the one-wide slice at it with
the axis dropped, ``drop(slice(x, axis, i, 1), axis)``. A negative index counts from the end of the axis.

``drop`` removes an axis of size 1 (numpy's squeeze of one axis); its axioms move it through the element-wise
ops whose operands share its shape, a concat along another axis and a 2-D transpose.
"""

from functools import reduce

import numpy as np

from taso.verify import Axiom, D, If, R, Symbol, Unsupported, ints, tensors


def _drop(attrs, xs):
    x, axis = xs[0], attrs["axis"]
    if not 0 <= axis < x.ndim or x.shape[axis] != 1:
        raise ValueError(f"drop of axis {axis} of a tensor of shape {x.shape}: it must have size 1")
    return np.squeeze(x, axis=axis)


SYMBOLS = [
    Symbol(
        "drop",
        1,
        dims=lambda i, a, x: If(i < a.axis, D(x, i), D(x, i + 1)),
        rank=lambda a, x: R(x) - 1,
        attrs=("axis",),
        compute=_drop,
        requires=lambda a, x: D(x, a.axis) == 1,
    )
]


def _runs(indices):
    """(first, length) of each run of consecutive indices, in order."""
    out = []
    for i in indices:
        if out and i == out[-1][0] + out[-1][1] and (i < 0) == (out[-1][0] < 0):
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


def _lower(node, args, types, f):
    axis, indices = int(node.attr["axis"]), node.attr["indices"]
    if not isinstance(indices, int | tuple):
        raise Unsupported("Gather with free indices")
    x, d = args[0], D(args[0], int(node.attr["axis"]))
    parts = []
    for first, n in _runs(indices if isinstance(indices, tuple) else (indices,)):
        start = d + first if first < 0 else first
        f.fact(start >= 0, start + n <= d)  # indices out of range make the model fail
        parts.append(f.slice(x, axis=axis, start=start, size=n))
    if isinstance(indices, int):
        return [f.drop(parts[0], axis=axis)]
    return [reduce(lambda p, q: f.cat(p, q, axis=axis), parts)]


LOWER = {"Gather": _lower}


def axioms(f):
    x, y = tensors("x y")
    m, n, a, b = ints("m n a b")
    same = {"x": (m, n), "y": (m, n)}
    axes = {"a": (0, 1), "b": (0, 1)}
    return [
        *(
            Axiom(
                f"drop-{g.name}",
                f.drop(g(x, y), axis=a),
                g(f.drop(x, axis=a), f.drop(y, axis=a)),
                same,
                when=(D(x, a) == 1,),
                domains=axes,
                generic=True,
            )
            for g in (f.add, f.mul)
        ),
        Axiom(
            "drop-relu",
            f.drop(f.relu(x), axis=a),
            f.relu(f.drop(x, axis=a)),
            same,
            when=(D(x, a) == 1,),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "drop-cat",
            f.drop(f.cat(x, y, axis=b), axis=a),
            f.cat(f.drop(x, axis=a), f.drop(y, axis=a), axis=If(b < a, b, b - 1)),
            same,
            when=(a != b, D(x, a) == 1, D(y, a) == 1),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "drop-transpose",
            f.drop(f.tr(x), axis=a),
            f.drop(x, axis=1 - a),
            {"x": (m, n)},
            when=(a >= 0, a <= 1, D(x, 1 - a) == 1),
            domains={"a": (0, 1)},
        ),
    ]
