"""BatchNormalization (inference) as a per-channel affine map, and the folded conv weights it leaves.

``BatchNormalization(y, scale, bias, mean, var)`` lowers to ``c + bias(bnshift(bias, mean, inv), c)`` where
``c = chmul(y, inv)`` and ``inv = bninv(scale, var)``: each channel of ``y`` multiplied by its ``inv`` and shifted.
``bninv`` and ``bnshift`` stay uninterpreted (what they compute never matters to a proof, only that both sides
compute the same ones); ``epsilon`` is their integer argument (a float by its bits, or a free attribute's
variable). The weight-only ops a fold leaves lower to the same vocabulary: ``BnKernel`` scales a kernel's
output channels (``kscale``), ``BnBias`` is ``b * inv + shift``.

A Mul or Add by a per-channel tensor (C, 1, 1) after a BatchNormalization (Caffe2's exporters put one after
every BN) lowers through ``channels``, that tensor as the (C,) vector ``ChannelVector`` folds it to (specs/mul.py,
specs/add.py), so the rules that fold them into the BN's scale and bias are proved here too.

Axioms: a per-channel scale distributes over an add, scales a conv's kernel instead of its output (any group,
stride or padding: output channel o reads only kernel slice o), scales a bias by its values, and two in a row
are one; a bias depends only on the shape it spreads over; ``bninv`` is linear in the scale, and ``bnshift``
(``bias - mean * inv``) scales and shifts with the bias it starts from.
"""

import numpy as np

from taso.verify import Axiom, D, R, Symbol, attr_int, ints, tensors


def _channels(c, y, axis):
    if c.ndim != 1 or y.ndim <= axis or c.shape[0] != y.shape[axis]:
        raise ValueError("a per-channel vector needs one value per channel")
    return c.reshape((1,) * axis + (-1,) + (1,) * (y.ndim - axis - 1))


def _bninv(attrs, xs):
    eps = np.int64(attrs["epsilon"]).view(np.float64)
    return xs[0] / np.sqrt(xs[1] + eps)


SYMBOLS = [
    Symbol(
        "chmul",
        2,
        dims=lambda i, a, y, c: D(y, i),
        rank=lambda a, y, c: R(y),
        compute=lambda a, xs: xs[0] * _channels(xs[1], xs[0], 1),
    ),
    Symbol(
        "kscale",
        2,
        dims=lambda i, a, w, c: D(w, i),
        rank=lambda a, w, c: R(w),
        compute=lambda a, xs: xs[0] * _channels(xs[1], xs[0], 0),
    ),
    Symbol(
        "channels",
        1,
        dims=lambda i, a, c: D(c, 0),
        rank=lambda a, c: 1,
        op="ChannelVector",
    ),
    Symbol("bninv", 2, dims=lambda i, a, s, v: D(s, i), rank=lambda a, s, v: R(s), attrs=("epsilon",), compute=_bninv),
    Symbol(
        "bnshift",
        3,
        dims=lambda i, a, t, m, c: D(t, i),
        rank=lambda a, t, m, c: R(t),
        compute=lambda a, xs: xs[0] - xs[1] * xs[2],
    ),
]


def _inverse(node, scale, var, f):
    return f.bninv(scale, var, epsilon=attr_int(node.attr["epsilon"]))


def _lower_bn(node, args, types, f):
    y, scale, bias, mean, var = args
    f.fact(*(D(v, 0) == D(y, 1) for v in (scale, bias, mean, var)))
    inv = _inverse(node, scale, var, f)
    c = f.chmul(y, inv)
    return [f.add(c, f.bias(f.bnshift(bias, mean, inv), c))]


def _lower_kernel(node, args, types, f):
    w, scale, var = args
    f.fact(D(scale, 0) == D(w, 0), D(var, 0) == D(w, 0))
    return [f.kscale(w, _inverse(node, scale, var, f))]


def _lower_bias(node, args, types, f):
    scale, bias, mean, var = args[:4]
    f.fact(*(D(v, 0) == D(scale, 0) for v in args[1:]))
    inv = _inverse(node, scale, var, f)
    shift = f.bnshift(bias, mean, inv)
    return [shift if len(args) == 4 else f.add(f.mul(args[4], inv), shift)]


LOWER = {"BatchNormalization": _lower_bn, "BnKernel": _lower_kernel, "BnBias": _lower_bias}


def axioms(f):
    x, y, w, s, v, t, u = tensors("x y w s v t u")
    b, c, h, k, m, d, kh, kw, sh, sw, pt, pl, pb, pr, g, e = ints("b c h k m d kh kw sh sw pt pl pb pr g e")
    cv = dict(strides=(sh, sw), pads=(pt, pl, pb, pr), group=g)
    # the spec check tries grouped convs too (c = d * g holds only where the semantics accepts the instance)
    dom = {"b": (1, 2), "c": (2, 4), "d": (1, 2), "m": (2, 4), "h": (3, 4), "k": (3,), "kh": (1, 3), "kw": (1, 2)}
    dom |= {"sh": (1, 2), "sw": (1,), "pt": (0, 1), "pl": (0,), "pb": (0, 1), "pr": (1,), "g": (1, 2)}
    img = (b, c, h, k)
    return [
        Axiom(
            "chmul-add",
            f.chmul(f.add(x, y), s),
            f.add(f.chmul(x, s), f.chmul(y, s)),
            {"x": img, "y": img, "s": (c,)},
            domains=dom,
        ),
        Axiom(
            "conv-chmul",
            f.chmul(f.conv(x, w, **cv), s),
            f.conv(x, f.kscale(w, s), **cv),
            {"x": img, "w": (m, d, kh, kw), "s": (m,)},
            domains=dom,
        ),
        Axiom(
            "bias-chmul",
            f.chmul(f.bias(s, x), v),
            f.bias(f.mul(s, v), f.chmul(x, v)),
            {"s": (c,), "v": (c,), "x": img},
            domains=dom,
        ),
        Axiom(
            "bias-add-carrier",
            f.bias(s, f.add(x, y)),
            f.bias(s, x),
            {"s": (c,), "x": img, "y": img},
            domains=dom,
            oriented=True,
        ),
        Axiom(
            "chmul-chmul",
            f.chmul(f.chmul(x, s), v),
            f.chmul(x, f.mul(s, v)),
            {"x": img, "s": (c,), "v": (c,)},
            domains=dom,
        ),
        Axiom(
            "bninv-scale",
            f.bninv(f.mul(s, v), w, epsilon=e),
            f.mul(f.bninv(s, w, epsilon=e), v),
            {"s": (c,), "v": (c,), "w": (c,)},
            # a negative var + eps has no inverse (no instance): many epsilons and few channels find enough
            domains={**dom, "c": (1, 2, 3), "e": tuple(attr_int(eps) for eps in (1e-5, 1e-3, 0.5, 1.0, 2.0))},
        ),
        Axiom(
            "bnshift-scale",
            f.bnshift(f.mul(t, v), u, f.mul(s, v)),
            f.mul(f.bnshift(t, u, s), v),
            {"t": (c,), "u": (c,), "s": (c,), "v": (c,)},
            domains=dom,
        ),
        Axiom(
            "bnshift-add",
            f.bnshift(f.add(t, v), u, s),
            f.add(f.bnshift(t, u, s), v),
            {"t": (c,), "u": (c,), "s": (c,), "v": (c,)},
            domains=dom,
        ),
    ]
