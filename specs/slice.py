"""Slice: lowered onto Split's ``slice(x, axis, start, size)`` (specs/split.py), one per sliced axis in turn, so
every axiom about slices (of a concat, of a slice, through an element-wise op or a matmul) covers it.

A node's starts and ends are constants, but the sizes they clamp against are variables: each bound is ONNX's
clamping of it to [0, D] (a negative one counted from the end) as a z3 term, so a proof holds at every size the
matcher binds. Only step 1 is modelled; a strided slice stays unknown. Slices along two axes commute, so
the order a node lists its axes in (or a rewrite moves them to) does not matter.
"""

import z3

from taso.verify import Axiom, D, Unsupported, ints, tensors

FAR = 2**62
"""No dimension reaches this: a bound past it is an exporter's "to the end" (``INT64_MAX``, ``INT64_MIN``)."""


def _clamp(v, d):
    """ONNX's clamping of the constant bound ``v`` into [0, d]."""
    if isinstance(v, z3.ExprRef):
        raise Unsupported("Slice with a free bound")
    if v >= FAR:
        return d
    if v <= -FAR:
        return 0
    if v == 0:
        return 0
    if v > 0:
        return z3.If(d < v, d, v)
    return z3.If(d + v < 0, 0, d + v)


def _lower(node, args, types, f):
    a = node.attr
    if any(int(k) != 1 for k in a["steps"]):
        raise Unsupported("Slice with a step other than 1")
    t = args[0]
    for axis, s, e in zip(a["axes"], a["starts"], a["ends"]):
        start, end = _clamp(int(s), D(args[0], int(axis))), _clamp(int(e), D(args[0], int(axis)))
        f.fact(end - start >= 1)  # import keeps an empty slice opaque
        t = f.slice(t, axis=int(axis), start=start, size=end - start)
    return [t]


LOWER = {"Slice": _lower}


def axioms(f):
    x = tensors("x")[0]
    m, n, a, b, s, k, t, u = ints("m n a b s k t u")
    return [
        Axiom(
            "slice-commute",
            f.slice(f.slice(x, axis=a, start=s, size=k), axis=b, start=t, size=u),
            f.slice(f.slice(x, axis=b, start=t, size=u), axis=a, start=s, size=k),
            {"x": (m, n)},
            when=(a != b,),
            domains={"a": (0, 1), "b": (0, 1), "s": (0, 1), "k": (1, 2), "t": (0, 1), "u": (1, 2)},
            generic=True,
        )
    ]
