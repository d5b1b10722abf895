"""LayerNormalization as ``lnorm(x, axis, epsilon)``, the plain normalisation over the axes from ``axis`` on,
times its scale and plus its bias, each spread over ``x`` along those trailing axes (``trail(g, x)``):
``LayerNormalization(x, g, b) = lnorm(x) * trail(g, x) + trail(b, x)``, so the scale and bias meet the Mul and
Add axioms. ``epsilon`` is an integer argument (a float by its bits): a norm with another epsilon, or none, is
another function, and no axiom relates two. Neither is a norm of a scaled input the norm itself (the epsilon
makes it false), nor is anything said of the mean and variance inside.

Axioms: the norm, and a spread scale or bias, move through a concat along an axis before the normalised ones;
spreading is linear (a sum of scales, a scalar factor), so a scalar Mul or an Add of two norms' weights folds.
Over the field the norm is a keyed function of (element, its group, epsilon) (`taso.ops.normalisation`).
"""

import numpy as np

from taso.ops import OPS
from taso.verify import Axiom, D, R, Symbol, Unsupported, attr_int, ints, tensors


def _lnorm(attrs, xs):
    """The catalogue's LayerNormalization with a scale of ones."""
    x, axis = xs[0], attrs["axis"]
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} of a rank-{x.ndim} tensor")
    eps = float(np.int64(attrs["epsilon"]).view(np.float64))
    return OPS["LayerNormalization"].run([x, np.ones(x.shape[axis:], x.dtype)], {"axis": axis, "epsilon": eps})[0]


def _trail(attrs, xs):
    g, x = xs
    if g.ndim == 0 or g.ndim > x.ndim or g.shape != x.shape[x.ndim - g.ndim :]:
        raise ValueError(f"{g.shape} is not the trailing shape of {x.shape}")
    return np.broadcast_to(g, x.shape).copy()


SYMBOLS = [
    Symbol(
        "lnorm",
        1,
        dims=lambda i, a, x: D(x, i),
        rank=lambda a, x: R(x),
        attrs=("axis", "epsilon"),
        compute=_lnorm,
    ),
    Symbol("trail", 2, dims=lambda i, a, g, x: D(x, i), rank=lambda a, g, x: R(x), compute=_trail),
]


def _lower(node, args, types, f):
    rank = types[node.inputs[0]].rank
    axis = int(node.attr["axis"]) % rank
    x, *weights = args
    for w, v in zip(weights, node.inputs[1:]):
        if types[v].rank != rank - axis:
            raise Unsupported("LayerNormalization with a scale or bias of other than the normalised shape")
        f.fact(*(D(w, j) == D(x, axis + j) for j in range(rank - axis)))
    out = f.mul(f.lnorm(x, axis=axis, epsilon=attr_int(node.attr["epsilon"])), f.trail(weights[0], x))
    return [f.add(out, f.trail(weights[1], x)) if len(weights) > 1 else out]


LOWER = {"LayerNormalization": _lower}


def axioms(f):
    x, y, g, h, c = tensors("x y g h c")
    m, n, a, b, e = ints("m n a b e")
    same = {"x": (m, n), "y": (m, n), "g": (n,), "h": (n,), "c": ()}
    dom = {"a": (0, 1), "b": (0, 1), "e": tuple(attr_int(eps) for eps in (1e-5, 1e-12, 0.5))}
    return [
        Axiom(
            "lnorm-cat",
            f.lnorm(f.cat(x, y, axis=b), axis=a, epsilon=e),
            f.cat(f.lnorm(x, axis=a, epsilon=e), f.lnorm(y, axis=a, epsilon=e), axis=b),
            same,
            when=(b < a, D(x, a) == D(y, a)),
            domains=dom,
            generic=True,
        ),
        Axiom(
            "trail-add",
            f.trail(f.add(g, h), x),
            f.add(f.trail(g, x), f.trail(h, x)),
            same,
            when=(R(g) == R(h),),  # the right side alone lets one be spread from fewer axes than the other
            generic=True,
        ),
        Axiom("trail-smul", f.trail(f.smul(g, c), x), f.smul(f.trail(g, x), c), same, generic=True),
        Axiom(
            "trail-cat",
            f.trail(g, f.cat(x, y, axis=b)),
            f.cat(f.trail(g, x), f.trail(g, y), axis=b),
            same,
            when=(b < R(x) - R(g), R(x) == R(y)),
            domains=dom,
            generic=True,
        ),
    ]
