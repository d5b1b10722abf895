"""Split: each output is ``slice(x, axis, start, size)``, so sizes are part of the term and must match a concat's.

The sizes are variables in a rule's source and the sizes of the outputs it reproduces in its target
(`taso.verify.lowering`), so a split that cuts a concat elsewhere than its seam is a different term unless a condition
on the sizes says otherwise.
"""

import numpy as np

from taso.verify import Axiom, D, If, R, Symbol, ints, tensors


def _slice(attrs, xs):
    x, axis, start, size = xs[0], attrs["axis"], attrs["start"], attrs["size"]
    if start < 0 or size <= 0 or start + size > x.shape[axis]:
        raise ValueError(f"slice [{start}, {start + size}) out of a dimension of {x.shape[axis]}")
    return np.take(x, range(start, start + size), axis=axis)


SYMBOLS = [
    Symbol(
        "slice",
        1,
        dims=lambda i, a, x: If(i == a.axis, a.size, D(x, i)),
        rank=lambda a, x: R(x),
        attrs=("axis", "start", "size"),
        op="Split",
        compute=_slice,
    )
]


def _lower(node, args, types, f):
    rank = types[node.inputs[0]].rank
    axis = int(node.attr.get("axis", 0)) % rank
    sizes = f.split_sizes(node, axis)
    f.fact(sum(sizes) == D(args[0], axis), *(s >= 1 for s in sizes))
    if len(node.inputs) < 2:  # no sizes given: equal parts
        f.fact(*(s == sizes[0] for s in sizes[1:]))
    out, start = [], 0
    for size in sizes:
        out.append(f.slice(args[0], axis=axis, start=start, size=size))
        start = start + size
    return out


LOWER = {"Split": _lower}


def axioms(f):
    x, y = tensors("x y")
    m, n, k, a, b, s, ln, t, u = ints("m n k a b s l t u")
    two = {"x": (m, n), "y": (k, n)}
    axes = {"a": (0, 1), "b": (0, 1), "s": (0, 1, 2), "l": (1, 2, 3), "t": (0, 1, 2, 3), "u": (1, 2)}
    return [
        Axiom(
            "slice-cat-first",
            f.slice(f.cat(x, y, axis=a), axis=a, start=0, size=ln),
            x,
            two,
            when=(D(x, a) == ln,),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "slice-cat-second",
            f.slice(f.cat(x, y, axis=a), axis=a, start=s, size=ln),
            y,
            two,
            when=(D(x, a) == s, D(y, a) == ln),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "slice-cat-within-first",
            f.slice(f.cat(x, y, axis=a), axis=a, start=s, size=ln),
            f.slice(x, axis=a, start=s, size=ln),
            two,
            when=(s + ln <= D(x, a),),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "slice-cat-within-second",
            f.slice(f.cat(x, y, axis=a), axis=a, start=s, size=ln),
            f.slice(y, axis=a, start=s - D(x, a), size=ln),
            two,
            when=(s >= D(x, a),),
            domains=axes,
            generic=True,
        ),
        # D(x, b) == D(y, b): read right to left (the right side triggers it too), the slices' cat is well-typed
        # where x and y differ along b, the cat sliced is not (caught by the spec check's free shapes)
        Axiom(
            "slice-cat-across",
            f.slice(f.cat(x, y, axis=a), axis=b, start=s, size=ln),
            f.cat(f.slice(x, axis=b, start=s, size=ln), f.slice(y, axis=b, start=s, size=ln), axis=a),
            {"x": (m, n), "y": (m, n)},
            when=(a != b, D(x, b) == D(y, b)),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "slice-of-slice",
            f.slice(f.slice(x, axis=a, start=s, size=ln), axis=a, start=t, size=u),
            f.slice(x, axis=a, start=s + t, size=u),
            two,
            when=(t + u <= ln,),
            domains=axes,
            generic=True,
            oriented=True,
            last_resort=True,
        ),
        Axiom(
            "slice-whole",
            f.slice(x, axis=a, start=0, size=ln),
            x,
            two,
            when=(D(x, a) == ln,),
            domains=axes,
            generic=True,
        ),
        Axiom(
            "cat-adjacent-slices",
            f.cat(f.slice(x, axis=a, start=s, size=ln), f.slice(x, axis=a, start=t, size=u), axis=a),
            f.slice(x, axis=a, start=s, size=ln + u),
            two,
            when=(t == s + ln,),
            domains=axes,
            generic=True,
        ),
    ]
