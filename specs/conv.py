"""Conv: 2-D convolution ``conv(x, w, strides, pads, group)`` over NCHW, no dilation; a bias is an add of
``bias(b, y)``, the per-channel values ``b`` spread over the shape of the conv's output ``y``.

Linear in the input and in the kernel; concatenating kernels is concatenating outputs only for group 1. A
grouped conv is a plain one over its kernel made block-diagonal (``blockdiag``, the op ``BlockDiagonal``).
"""

from dataclasses import replace

import numpy as np

from taso.verify import Axiom, D, R, Symbol, attr_ints, ints, lower_plain, nchw, tensors, window


def _dims(i, a, x, w):
    oh = window(D(x, 2), a.pads[0] + a.pads[2], D(w, 2), a.strides[0])
    ow = window(D(x, 3), a.pads[1] + a.pads[3], D(w, 3), a.strides[1])
    return nchw(i, D(x, 0), D(w, 0), oh, ow)


SYMBOLS = [
    Symbol(
        "conv",
        2,
        dims=_dims,
        rank=lambda a, x, w: 4,
        attrs=("strides[2]", "pads[4]", "group"),
        op="Conv",
        fixed={"dilations": (1, 1)},
        derived={"kernel_shape": lambda xs: tuple(xs[1].shape[2:])},
        requires=lambda a, x, w: D(x, 1) == D(w, 1) * a.group,
    ),
    Symbol(
        "blockdiag",
        1,
        dims=lambda i, a, w: nchw(i, D(w, 0), D(w, 1) * a.group, D(w, 2), D(w, 3)),
        rank=lambda a, w: 4,
        attrs=("group",),
        op="BlockDiagonal",
    ),
    Symbol("bias", 2, dims=lambda i, a, b, y: D(y, i), rank=lambda a, b, y: R(y), compute=lambda a, xs: _bias(*xs)),
]


def _bias(b, y):
    if b.ndim != 1 or y.ndim < 2 or b.shape[0] != y.shape[1]:
        raise ValueError("bias needs one value per channel of the tensor it spreads over")
    return np.broadcast_to(b.reshape(1, -1, *(1,) * (y.ndim - 2)), y.shape).copy()


def _lower(node, args, types, f):
    y = lower_plain(f.conv, replace(node, inputs=node.inputs[:2]), args[:2])
    kernel = attr_ints(node.attr["kernel_shape"], 2)  # the catalogue holds it to the weight's spatial dims
    f.fact(D(args[1], 2) == kernel[0], D(args[1], 3) == kernel[1])
    if len(args) == 3:
        f.fact(D(args[2], 0) == D(args[1], 0))
    return [y if len(args) == 2 else f.add(y, f.bias(args[2], y))]


LOWER = {"Conv": _lower}


def axioms(f):
    x, y, w, v, s = tensors("x y w v s")
    b, c, d, e, h, k, m, n, q, kh, kw, sh, sw, pt, pl, pb, pr, g = ints("b c d e h k m n q kh kw sh sw pt pl pb pr g")
    cv = dict(strides=(sh, sw), pads=(pt, pl, pb, pr), group=g)
    one = dict(strides=(sh, sw), pads=(pt, pl, pb, pr), group=1)
    # d is a kernel's input channels per group: c = d * g, checked by the semantics, not assumed here
    small = {"b": (1, 2), "c": (2, 4), "d": (1, 2), "e": (1, 2), "m": (2, 4), "n": (1, 2), "h": (3, 4), "k": (3, 4)}
    win = {"kh": (1, 3), "kw": (1, 2), "sh": (1, 2), "sw": (1,), "pt": (0, 1), "pl": (0,), "pb": (0, 1), "pr": (1,)}
    dom = {**small, **win, "g": (1, 2)}
    img = (b, c, h, k)
    return [
        Axiom(
            "conv-add-input",
            f.conv(f.add(x, y), w, **cv),
            f.add(f.conv(x, w, **cv), f.conv(y, w, **cv)),
            {"x": img, "y": img, "w": (m, d, kh, kw)},
            domains=dom,
        ),
        Axiom(
            "conv-add-kernel",
            f.conv(x, f.add(w, v), **cv),
            f.add(f.conv(x, w, **cv), f.conv(x, v, **cv)),
            {"x": img, "w": (m, d, kh, kw), "v": (m, d, kh, kw)},
            domains=dom,
        ),
        Axiom(
            "conv-smul-input",
            f.conv(f.smul(x, s), w, **cv),
            f.smul(f.conv(x, w, **cv), s),
            {"x": img, "w": (m, d, kh, kw), "s": ()},
            domains=dom,
            generic=True,
        ),
        Axiom(
            "conv-smul-kernel",
            f.conv(x, f.smul(w, s), **cv),
            f.smul(f.conv(x, w, **cv), s),
            {"x": img, "w": (m, d, kh, kw), "s": ()},
            domains=dom,
            generic=True,
        ),
        # sibling convs over one input = one conv over concatenated kernels; false for grouped convs
        Axiom(
            "conv-cat-kernels",
            f.cat(f.conv(x, w, **one), f.conv(x, v, **one), axis=1),
            f.conv(x, f.cat(w, v, axis=0), **one),
            {"x": img, "w": (m, c, kh, kw), "v": (n, c, kh, kw)},
            domains={**dom, "c": (1, 2)},
        ),
        # the split of a merged conv gives back each sibling (derivable, but the prover finds it faster direct)
        Axiom(
            "conv-cat-kernels-first",
            f.slice(f.conv(x, f.cat(w, v, axis=0), **one), axis=1, start=0, size=m),
            f.conv(x, w, **one),
            {"x": img, "w": (m, c, kh, kw), "v": (n, c, kh, kw)},
            domains={**dom, "c": (1, 2)},
        ),
        Axiom(
            "conv-cat-kernels-second",
            f.slice(f.conv(x, f.cat(w, v, axis=0), **one), axis=1, start=m, size=n),
            f.conv(x, v, **one),
            {"x": img, "w": (m, c, kh, kw), "v": (n, c, kh, kw)},
            domains={**dom, "c": (1, 2)},
        ),
        Axiom(
            "conv-cat-batch",
            f.cat(f.conv(x, w, **cv), f.conv(y, w, **cv), axis=0),
            f.conv(f.cat(x, y, axis=0), w, **cv),
            {"x": img, "y": (e, c, h, k), "w": (m, d, kh, kw)},
            domains=dom,
        ),
        Axiom(
            "conv-sum-cat-channels",
            f.add(f.conv(x, w, **one), f.conv(y, v, **one)),
            f.conv(f.cat(x, y, axis=1), f.cat(w, v, axis=1), **one),
            {"x": img, "y": (b, e, h, k), "w": (m, c, kh, kw), "v": (m, e, kh, kw)},
            domains={**dom, "c": (1, 2)},
        ),
        Axiom(
            "conv-slice-batch",
            f.slice(f.conv(x, w, **cv), axis=0, start=0, size=n),
            f.conv(f.slice(x, axis=0, start=0, size=n), w, **cv),
            {"x": img, "w": (m, d, kh, kw)},
            when=(n <= b,),
            domains={**dom, "n": (1,)},
            oriented=True,
        ),
        Axiom(
            "conv-slice-kernel",
            f.slice(f.conv(x, w, **one), axis=1, start=e, size=n),
            f.conv(x, f.slice(w, axis=0, start=e, size=n), **one),
            {"x": img, "w": (m, c, kh, kw)},
            when=(e + n <= m,),
            domains={**dom, "c": (1, 2), "e": (0, 1), "m": (2, 3)},
            oriented=True,
        ),
        # a single window along an axis: the stride along it does not matter (also derivable through subsample,
        # but direct, it spares the prover a detour)
        Axiom(
            "conv-stride-single-row",
            f.conv(x, w, **cv),
            f.conv(x, w, strides=(1, sw), pads=(pt, pl, pb, pr), group=g),
            {"x": img, "w": (m, d, kh, kw)},
            when=(D(x, 2) + pt + pb == D(w, 2),),
            domains={**dom, "kh": (3,), "h": (1, 2, 3), "sh": (2, 3)},
            generic=True,
        ),
        Axiom(
            "conv-stride-single-column",
            f.conv(x, w, **cv),
            f.conv(x, w, strides=(sh, 1), pads=(pt, pl, pb, pr), group=g),
            {"x": img, "w": (m, d, kh, kw)},
            when=(D(x, 3) + pl + pr == D(w, 3),),
            domains={**dom, "kw": (3,), "k": (1, 2), "sw": (2, 3)},
            generic=True,
        ),
        # a bias follows its conv's output through concat, split and striding, channel by channel
        Axiom(
            "bias-cat-channels",
            f.cat(f.bias(s, x), f.bias(v, y), axis=1),
            f.bias(f.cat(s, v, axis=0), f.cat(x, y, axis=1)),
            {"s": (c,), "x": img, "v": (e,), "y": (b, e, h, k)},
            domains=dom,
        ),
        Axiom(
            "bias-cat-batch",
            f.cat(f.bias(s, x), f.bias(s, y), axis=0),
            f.bias(s, f.cat(x, y, axis=0)),
            {"s": (c,), "x": img, "y": (e, c, h, k)},
            domains=dom,
        ),
        Axiom(
            "bias-slice-channels",
            f.slice(f.bias(s, x), axis=1, start=e, size=n),
            f.bias(f.slice(s, axis=0, start=e, size=n), f.slice(x, axis=1, start=e, size=n)),
            {"s": (c,), "x": img},
            when=(e + n <= c,),
            domains={**dom, "e": (0, 1), "n": (1, 2)},
            oriented=True,
        ),
        Axiom(
            "bias-slice-batch",
            f.slice(f.bias(s, x), axis=0, start=e, size=n),
            f.bias(s, f.slice(x, axis=0, start=e, size=n)),
            {"s": (c,), "x": img},
            when=(e + n <= b,),
            domains={**dom, "e": (0, 1), "n": (1,)},
            oriented=True,
        ),
        # biases spread over tensors of one shape add and scale as the values they spread
        Axiom(
            "bias-add",
            f.add(f.bias(s, x), f.bias(v, y)),
            f.bias(f.add(s, v), x),
            {"s": (c,), "v": (c,), "x": img, "y": img},
            domains=dom,
        ),
        Axiom(
            "bias-smul",
            f.smul(f.bias(s, x), w),
            f.bias(f.smul(s, w), x),
            {"s": (c,), "x": img, "w": ()},
            domains=dom,
        ),
        # a bias reads only the shape of the tensor it spreads over: each is spread over ones of that shape, so
        # biases over different tensors of one shape (a scaled conv, a conv padded otherwise) are one term
        *(
            Axiom(
                f"bias-shape{len(sh_)}",
                f.bias(s, y),
                f.bias(s, getattr(f, f"ones{len(sh_)}")(shape=sh_)),
                {"s": (c,), "y": sh_},
                domains=dom,
                oriented=True,
            )
            for sh_ in ((b, c), (b, c, h), img)
        ),
        # a valid depthwise conv whose kernel sums to 1 per channel (the identity's centred 1, pooling's
        # average) keeps a per-channel constant
        *(
            Axiom(
                f"{k_}-bias",
                f.conv(
                    f.bias(s, y), getattr(f, k_)(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(0, 0, 0, 0), group=c
                ),
                f.bias(
                    s, f.conv(y, getattr(f, k_)(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(0, 0, 0, 0), group=c)
                ),
                {"s": (c,), "y": img},
                when=(kh <= h, kw <= k),
                domains={**dom, "c": (1, 2), "kw": (1, 3), "k": (3, 4)},
                oriented=True,
            )
            for k_ in ("convid", "poolk")
        ),
        Axiom(
            "bias-subsample",
            f.subsample(f.bias(s, x), strides=(sh, sw)),
            f.bias(s, f.subsample(x, strides=(sh, sw))),
            {"s": (c,), "x": img},
            domains=dom,
        ),
        # a (N,) bias over a matrix spreads one value per column (a transformer's projection bias, specs/add.py):
        # the columns are its channels, and a split along them splits the bias too. Last resort: the sibling
        # merges of biased convs mention bias and slice as well, and never need it
        Axiom(
            "bias-slice-columns",
            f.slice(f.bias(s, x), axis=1, start=e, size=n),
            f.bias(f.slice(s, axis=0, start=e, size=n), f.slice(x, axis=1, start=e, size=n)),
            {"s": (c,), "x": (b, c)},
            when=(e + n <= c,),
            domains={**dom, "e": (0, 1), "n": (1, 2)},
            oriented=True,
            last_resort=True,
        ),
        # output channel o of group k reads input channels of group k only: the kernel's other columns are zeros.
        # Triggered by the block-diagonal side alone: from a grouped conv's side, every conv would spawn a plain
        # one, which matches again (a loop that made every rule with a conv spend its budget)
        Axiom(
            "conv-blockdiag",
            f.conv(x, f.blockdiag(w, group=g), **one),
            f.conv(x, w, **cv),
            {"x": img, "w": (m, d, kh, kw)},
            when=(D(x, 1) == d * g,),
            domains=dom,
            generic=True,
            oriented=True,
        ),
        # grouped convs side by side are one grouped conv over both inputs, when the groups have one size (for
        # two plain convs it holds too, but would let every pair of convs spawn a grouped one)
        Axiom(
            "conv-cat-groups",
            f.cat(f.conv(x, w, **cv), f.conv(y, v, strides=(sh, sw), pads=(pt, pl, pb, pr), group=e), axis=1),
            f.conv(f.cat(x, y, axis=1), f.cat(w, v, axis=0), strides=(sh, sw), pads=(pt, pl, pb, pr), group=g + e),
            {"x": img, "y": (b, n, h, k), "w": (m, d, kh, kw), "v": (q, d, kh, kw)},
            when=(g > 1, e > 1, D(x, 1) == d * g, D(y, 1) == d * e, D(w, 0) * e == D(v, 0) * g),
            domains={**dom, "c": (2, 4), "n": (2, 4), "q": (2, 4), "e": (1, 2, 4), "g": (1, 2, 4)},
            generic=True,
        ),
    ]
