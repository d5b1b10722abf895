"""Div and Reciprocal, of floats (integer Div stays opaque): ``div(x, y)`` is ``x`` times ``recip(y)``, over
the reals where ``y`` is not zero. Both are element-wise, so a reciprocal moves through a broadcast, a transpose,
a concat and a slice. ``sdiv(x, s)`` divides by a 0-d scalar (GELU's x / sqrt 2; specs/numbers.py makes it the
product by the reciprocal where ``s`` is a known number). Where neither operand has the quotient's shape (a norm's
scale [D] over its per-row root [N, 1], as the fusion targets spell it), both are spread over a tensor of that
shape (`taso.verify.spread_both`); the quotient is still ``div``, so the same axioms hold.

Why they are modelled: the dynamo exporter writes RMSNorm's rsqrt as ``Mul(x, Reciprocal(Sqrt(v)))``, a form
onnxruntime's SimplifiedLayerNormFusion does not match, where it fuses ``Div(x, Sqrt(v))`` (and the TorchScript
exporter's form) into one SimplifiedLayerNormalization; specs/rules/reciprocal.rules is the rewrite."""

import numpy as np

from taso.verify import (
    Axiom,
    D,
    R,
    Symbol,
    broadcasts,
    elementwise_axioms,
    ints,
    same_shape,
    spread,
    spread_both,
    tensors,
)


def _recip(attrs, xs):
    """The spec check's semantics: 1/x, and 0 at 0 as over Z_p (`taso.ops.field.inverse`): the check's small
    integers include 0, where 1/x is infinite, and a slice of the reciprocals that skips it would not equal the
    reciprocals sliced. An axiom wrong at some x other than 0 still fails."""
    x = xs[0]
    return np.divide(1, x, out=np.zeros_like(x, dtype=np.float64), where=x != 0)


def _div(attrs, xs):
    """The symbol's semantics: two tensors of one shape (broadcasting is `bcast`'s, specs/broadcast.py), and 0
    where the divisor is 0, as ``recip``'s."""
    if xs[0].shape != xs[1].shape:
        raise ValueError(f"div of shapes {xs[0].shape} and {xs[1].shape}: broadcasting is bcast's")
    return xs[0] * _recip({}, xs[1:])


def _sdiv(attrs, xs):
    """``sdiv``'s semantics: by a 0-d scalar, 0 where it is 0 (as ``recip``'s)."""
    if xs[1].ndim != 0:
        raise ValueError(f"sdiv by a tensor of shape {xs[1].shape}: only a 0-d scalar is modelled")
    return xs[0] * _recip({}, xs[1:])


SYMBOLS = [
    Symbol("div", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Div", compute=_div),
    Symbol("sdiv", 2, dims=lambda i, a, x, s: D(x, i), rank=lambda a, x, s: R(x), op="Div", compute=_sdiv),
    Symbol("recip", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Reciprocal", compute=_recip),
]


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    if tx.shape == ty.shape:
        f.fact(*same_shape(args[0], args[1], tx.rank))
        return [f.div(*args)]
    if broadcasts(tx, ty):
        return [f.div(args[0], spread(f, args[1], ty, args[0], tx))]
    if ty.shape == ():
        return [f.sdiv(*args)]
    return [f.div(*spread_both(f, node, args, types))]


LOWER = {"Div": _lower}


def axioms(f):
    x, y = tensors("x y")
    m, n = ints("m n")
    return [
        Axiom("div-recip", f.div(x, y), f.mul(x, f.recip(y)), {"x": (m, n), "y": (m, n)}, generic=True),
        Axiom("recip-bcast", f.recip(f.bcast(y, x)), f.bcast(f.recip(y), x), {"x": (m, n), "y": (m, 1)}),
        *elementwise_axioms(f, f.recip),
    ]
