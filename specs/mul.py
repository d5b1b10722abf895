"""Mul: element-wise product of one shape (``mul``), by a 0-d tensor or a (1,) known number (TASO's scalar mul,
``smul(x, s)``; TorchScript writes attention's scale as a (1,) tensor), by
a per-channel tensor (C, 1, 1) over NCHW (``chmul``, specs/batchnorm.py, of its ``channels`` vector), or by a
tensor of the same rank with size-1 axes (``mul`` of its ``bcast``, specs/broadcast.py)."""

import z3

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


def _mul(attrs, xs):
    """``mul``'s semantics: two tensors of one shape (numpy's broadcasting is outside the symbol, as for add)."""
    if xs[0].shape != xs[1].shape:
        raise ValueError(f"mul of shapes {xs[0].shape} and {xs[1].shape}: broadcasting is not modelled")
    return xs[0] * xs[1]


def _smul(attrs, xs):
    """``smul``'s semantics: by a 0-d tensor only (by a vector it would broadcast along the last axis, which
    neither the lowering nor the smul axioms mean)."""
    if xs[1].ndim != 0:
        raise ValueError(f"smul by a tensor of shape {xs[1].shape}: only a 0-d scalar is modelled")
    return xs[0] * xs[1]


SYMBOLS = [
    Symbol("mul", 2, dims=lambda i, a, x, y: D(x, i), rank=lambda a, x, y: R(x), op="Mul", compute=_mul),
    Symbol("smul", 2, dims=lambda i, a, x, s: D(x, i), rank=lambda a, x, s: R(x), op="Mul", compute=_smul),
]


def _number(term):
    """Whether ``term`` is a known number (``num``, specs/numbers.py): what a rule's (1,) constant lowers to."""
    return z3.is_app(term) and term.decl().name() == "num"


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    sx, sy = tx.shape, ty.shape
    if per_channel(tx, ty):
        return [f.chmul(args[0], channel_values(f, args[1], ty, args[0]))]
    if per_channel(ty, tx):
        return [f.chmul(args[1], channel_values(f, args[0], tx, args[1]))]
    if sx == sy:
        f.fact(*same_shape(args[0], args[1], tx.rank))
        return [f.mul(*args)]
    if sy == () or (sy == (1,) and _number(args[1])):  # a (1,) number scales as a 0-d one: a known scalar
        return [f.smul(args[0], args[1])]
    if sx == () or (sx == (1,) and _number(args[0])):
        return [f.smul(args[1], args[0])]
    if broadcasts(tx, ty):
        return [f.mul(args[0], spread(f, args[1], ty, args[0], tx))]
    if broadcasts(ty, tx):
        return [f.mul(args[1], spread(f, args[0], tx, args[1], ty))]
    raise Unsupported("Mul with broadcasting other than by a 0-d scalar, per channel or along size-1 axes")


LOWER = {"Mul": _lower}


def axioms(f):
    x, y, z, w, s, t = tensors("x y z w s t")
    m, n, k, a, b, ln = ints("m n k a b l")
    same = {"x": (m, n), "y": (m, n), "z": (m, n), "w": (m, n), "s": (), "t": ()}
    axis = {"a": (0, 1), "b": (0, 1), "l": (1, 2)}
    return [
        Axiom("mul-comm", f.mul(x, y), f.mul(y, x), same, generic=True),
        # grouped to the right only, as add-assoc: with add-assoc one way and this both ways, f47b239dcb (a
        # spelled-out SkipLayerNorm) spent its 20 M units where it had been proved
        Axiom("mul-assoc", f.mul(f.mul(x, y), z), f.mul(x, f.mul(y, z)), same, generic=True, oriented=True),
        Axiom("mul-add", f.mul(x, f.add(y, z)), f.add(f.mul(x, y), f.mul(x, z)), same, generic=True),
        Axiom("smul-assoc", f.smul(f.smul(x, s), t), f.smul(x, f.mul(s, t)), same, generic=True),
        Axiom("smul-add", f.smul(f.add(x, y), s), f.add(f.smul(x, s), f.smul(y, s)), same, generic=True),
        Axiom("smul-mul", f.mul(f.smul(x, s), y), f.smul(f.mul(x, y), s), same, generic=True),
        Axiom(
            "smul-mm-left",
            f.mm(f.smul(x, s), y),
            f.smul(f.mm(x, y), s),
            {"x": (m, k), "y": (k, n), "s": ()},
            generic=True,
        ),
        Axiom(
            "smul-mm-right",
            f.mm(x, f.smul(y, s)),
            f.smul(f.mm(x, y), s),
            {"x": (m, k), "y": (k, n), "s": ()},
            generic=True,
        ),
        Axiom("smul-transpose", f.tr(f.smul(x, s)), f.smul(f.tr(x), s), same, generic=True),
        Axiom(
            "mul-cat",
            f.cat(f.mul(x, y), f.mul(z, w), axis=a),
            f.mul(f.cat(x, z, axis=a), f.cat(y, w, axis=a)),
            same,
            when=(D(x, a) == D(y, a),),
            domains=axis,
            generic=True,
        ),
        Axiom(
            "smul-cat",
            f.cat(f.smul(x, s), f.smul(y, s), axis=a),
            f.smul(f.cat(x, y, axis=a), s),
            same,
            domains=axis,
            generic=True,
        ),
        Axiom(
            "mul-slice",
            f.slice(f.mul(x, y), axis=a, start=b, size=ln),
            f.mul(f.slice(x, axis=a, start=b, size=ln), f.slice(y, axis=a, start=b, size=ln)),
            same,
            domains=axis,
            generic=True,
            oriented=True,
        ),
        Axiom(
            "smul-slice",
            f.slice(f.smul(x, s), axis=a, start=b, size=ln),
            f.smul(f.slice(x, axis=a, start=b, size=ln), s),
            same,
            domains=axis,
            generic=True,
            oriented=True,
        ),
    ]
