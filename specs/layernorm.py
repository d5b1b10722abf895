"""The two normalisations: LayerNormalization as ``lnorm(x, axis, epsilon)`` and onnxruntime's RMSNorm
(SimplifiedLayerNormalization) as ``rmsnorm(x, axis, epsilon)``, each the plain norm over the axes from ``axis``
on, times its scale (and LayerNorm plus its bias), each spread over ``x`` along those trailing axes
(``trail(g, x)``): ``LayerNormalization(x, g, b) = lnorm(x) * trail(g, x) + trail(b, x)``, so the scale and bias
meet the Mul and Add axioms. ``rmsnorm`` is never ``lnorm`` (RMSNorm does not centre). ``epsilon`` is an integer
argument (a float by its bits): a norm with another epsilon, or none, is another function. Neither is a norm of
a scaled input the norm itself (the epsilon makes it false).

A rule's 0-d float constant is ``num(value)``, named by the bits of the number it is read as (specs/numbers.py,
`taso.verify.lowering`), the integer `attr_int` makes of an epsilon attribute: the 1e-5 an exported spelling adds
(``sadd``) is then the very term the norm's epsilon argument names, and each norm's definition over a matrix's
last axis (``lnorm-def``, ``rmsnorm-def``; a Pow by 0.5 is the root, specs/numbers.py) proves the spellings
``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + 1e-5)`` and ``x / sqrt(mean(x**2) + 1e-5)`` (specs/targets.toml)
equal to the fused ops, at that epsilon only.

Axioms: the definitions; the norm, and a spread scale or bias, move through a concat along an axis before the
normalised ones; spreading is linear (a sum of scales, a scalar factor), so a scalar Mul or an Add of two norms'
weights folds; over a matrix a spread vector is the per-column scale or bias Mul and Add lower one to.
Over the field each norm is a keyed function of (element, its group, epsilon) (`taso.ops.normalisation`).
"""

import numpy as np

from taso.ops import OPS
from taso.verify import Axiom, D, R, Symbol, attr_int, ints, normed, tensors


def _unit_scale(attrs, xs):
    """A norm's inputs and attributes with a scale of ones (and no bias), at the epsilon the bits say."""
    x, axis = xs[0], attrs["axis"]
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} of a rank-{x.ndim} tensor")
    return [x, np.ones(x.shape[axis:], x.dtype)], {
        "axis": axis,
        "epsilon": float(np.int64(attrs["epsilon"]).view(np.float64)),
    }


# Each reads its catalogue entry by a constant key, so its digest covers that entry alone (`taso.verify.content`):
# a key chosen at run time would make it cover the whole registry, and any op added would untrust its proofs.
def _lnorm(attrs, xs):
    return OPS["LayerNormalization"].run(*_unit_scale(attrs, xs))[0]


def _rmsnorm(attrs, xs):
    return OPS["SimplifiedLayerNormalization"].run(*_unit_scale(attrs, xs))[0]


def _trail(attrs, xs):
    g, x = xs
    if g.ndim == 0 or g.ndim > x.ndim or g.shape != x.shape[x.ndim - g.ndim :]:
        raise ValueError(f"{g.shape} is not the trailing shape of {x.shape}")
    return np.broadcast_to(g, x.shape).copy()


_NORMS = {"lnorm": _lnorm, "rmsnorm": _rmsnorm}
SYMBOLS = [
    *(
        Symbol(
            name,
            1,
            dims=lambda i, a, x: D(x, i),
            rank=lambda a, x: R(x),
            attrs=("axis", "epsilon"),
            compute=compute,
        )
        for name, compute in _NORMS.items()
    ),
    Symbol("trail", 2, dims=lambda i, a, g, x: D(x, i), rank=lambda a, g, x: R(x), compute=_trail),
]


def _lower(name):
    def lower(node, args, types, f):
        rank = types[node.inputs[0]].rank
        axis = int(node.attr["axis"]) % rank
        norm = getattr(f, name)(args[0], axis=axis, epsilon=attr_int(node.attr["epsilon"]))
        return [normed(f, norm, args[0], rank, axis, [(w, types[v]) for w, v in zip(args[1:], node.inputs[1:])])]

    return lower


LOWER = {"LayerNormalization": _lower("lnorm"), "SimplifiedLayerNormalization": _lower("rmsnorm")}


def _normalised(f, d, e):
    """``d`` over the root of its mean square along the last axis plus the constant ``e`` (by its bits): a
    matrix's LayerNorm where ``d`` is the matrix centred, its RMSNorm where ``d`` is the matrix itself."""
    v = f.rmean(f.mul(d, d), axis=1, keepdims=1)
    return f.div(d, f.bcast(f.sqrt(f.sadd(v, f.num(value=e))), d))


def _centred(f, x):
    """``x`` less its mean along the last axis, spread back over it."""
    return f.sub(x, f.bcast(f.rmean(x, axis=1, keepdims=1), x))


def axioms(f):
    x, y, g, h, c = tensors("x y g h c")
    m, n, a, b, e = ints("m n a b e")
    same = {"x": (m, n), "y": (m, n), "g": (n,), "h": (n,), "c": ()}
    dom = {"a": (0, 1), "b": (0, 1), "e": tuple(attr_int(eps) for eps in (1e-5, 1e-6, 1e-12, 0.5))}
    return [
        # the definitions over a matrix's last axis (a rule's [tokens, hidden] example); a root spelled as a Pow
        # by 0.5, a square as one by 2, meet them through specs/numbers.py's eager spow axioms
        *(
            Axiom(
                f"{norm.name}-def",
                norm(x, axis=1, epsilon=e),
                _normalised(f, centre(f, x) if centre else x, e),
                {"x": (m, n)},
                domains=dom,
                oriented=True,
            )
            for norm, centre in ((f.lnorm, _centred), (f.rmsnorm, None))
        ),
        # over a matrix a spread vector scales or shifts each column, as Mul and Add lower one (per channel); a
        # column spread over x is spread over anything of x's shape
        Axiom("trail-chmul", f.mul(x, f.trail(g, y)), f.chmul(x, g), same, oriented=True),
        Axiom("trail-bias", f.add(x, f.trail(g, y)), f.add(x, f.bias(g, x)), same, oriented=True),
        Axiom(
            "chmul-div",
            f.div(f.chmul(x, g), f.bcast(h, y)),
            f.chmul(f.div(x, f.bcast(h, x)), g),
            {"x": (m, n), "y": (m, n), "g": (n,), "h": (m, 1)},
            oriented=True,
        ),
        *(
            Axiom(
                f"{norm.name}-cat",
                norm(f.cat(x, y, axis=b), axis=a, epsilon=e),
                f.cat(norm(x, axis=a, epsilon=e), norm(y, axis=a, epsilon=e), axis=b),
                same,
                when=(b < a, D(x, a) == D(y, a)),
                domains=dom,
                generic=True,
            )
            for norm in (f.lnorm, f.rmsnorm)
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
