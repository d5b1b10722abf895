"""subsample(x, strides): every stride-th row and column of an NCHW tensor. No IR op lowers to it; it is a
helper symbol that lets the axioms say "a strided window op is the stride-1 op subsampled", and then move the
subsampling through element-wise ops, concat and pointwise (1x1) convs."""

from taso.verify import Axiom, D, R, Symbol, ints, nchw, tensors, window


def _subsample(attrs, xs):
    sh, sw = attrs["strides"]
    if sh < 1 or sw < 1 or xs[0].ndim != 4:
        raise ValueError("subsample needs positive strides and a 4-D tensor")
    return xs[0][:, :, ::sh, ::sw]


SYMBOLS = [
    Symbol(
        "subsample",
        1,
        dims=lambda i, a, x: nchw(
            i, D(x, 0), D(x, 1), window(D(x, 2), 0, 1, a.strides[0]), window(D(x, 3), 0, 1, a.strides[1])
        ),
        rank=lambda a, x: R(x),
        attrs=("strides[2]",),
        compute=_subsample,
    )
]


def axioms(f):
    x, y, v, s = tensors("x y v s")
    b, c, e, h, k, m, d, kh, kw, sh, sw, pt, pl, pb, pr, g, ci, a = ints("b c e h k m d kh kw sh sw pt pl pb pr g ci a")
    st = dict(strides=(sh, sw))
    pads = (pt, pl, pb, pr)
    img = (b, c, h, k)
    dom = {"b": (1, 2), "c": (2,), "d": (1, 2), "m": (2,), "h": (3, 4, 5), "k": (3, 4), "kh": (1, 3), "kw": (1, 2)}
    dom |= {"sh": (1, 2), "sw": (2, 3), "pt": (0, 1), "pl": (0, 1), "pb": (1,), "pr": (0,), "g": (1, 2)}
    dom |= {"ci": (0, 1), "a": (0, 1), "e": (1, 2)}
    same = (D(x, 0) == D(y, 0), D(x, 1) == D(y, 1), D(x, 2) == D(y, 2), D(x, 3) == D(y, 3))
    win = dict(kernel_shape=(kh, kw), pads=pads)
    # the stride-1 pooling must not have windows of padding only (ONNX requires pads < kernel anyway)
    real_windows = (sh * sw > 1, pt < kh, pb < kh, pl < kw, pr < kw)
    return [
        Axiom(
            "conv-as-subsample",
            f.conv(x, v, strides=(sh, sw), pads=pads, group=g),
            f.subsample(f.conv(x, v, strides=(1, 1), pads=pads, group=g), **st),
            {"x": img, "v": (m, d, kh, kw)},
            when=(sh * sw > 1,),
            domains=dom,
            generic=True,
        ),
        Axiom(
            "avgpool-as-subsample",
            f.avgpool(x, **win, strides=(sh, sw), count_include_pad=ci),
            f.subsample(f.avgpool(x, **win, strides=(1, 1), count_include_pad=ci), **st),
            {"x": img},
            when=real_windows,
            domains=dom,
            generic=True,
        ),
        Axiom(
            "maxpool-as-subsample",
            f.maxpool(x, **win, strides=(sh, sw)),
            f.subsample(f.maxpool(x, **win, strides=(1, 1)), **st),
            {"x": img},
            when=real_windows,
            domains=dom,
            generic=True,
        ),
        Axiom("subsample-unit", f.subsample(x, strides=(1, 1)), x, {"x": img}, domains=dom),
        Axiom(
            "subsample-single-row",
            f.subsample(x, **st),
            f.subsample(x, strides=(1, sw)),
            {"x": img},
            when=(D(x, 2) == 1,),
            domains={**dom, "h": (1,)},
            generic=True,
        ),
        Axiom(
            "subsample-single-column",
            f.subsample(x, **st),
            f.subsample(x, strides=(sh, 1)),
            {"x": img},
            when=(D(x, 3) == 1,),
            domains={**dom, "k": (1,)},
            generic=True,
        ),
        Axiom(
            "subsample-relu",
            f.relu(f.subsample(x, **st)),
            f.subsample(f.relu(x), **st),
            {"x": img},
            domains=dom,
            generic=True,
        ),
        Axiom(
            "subsample-add",
            f.subsample(f.add(x, y), **st),
            f.add(f.subsample(x, **st), f.subsample(y, **st)),
            {"x": img, "y": img},
            when=same,
            domains=dom,
            generic=True,
        ),
        Axiom(
            "subsample-mul",
            f.subsample(f.mul(x, y), **st),
            f.mul(f.subsample(x, **st), f.subsample(y, **st)),
            {"x": img, "y": img},
            when=same,
            domains=dom,
            generic=True,
        ),
        Axiom(
            "subsample-smul",
            f.subsample(f.smul(x, s), **st),
            f.smul(f.subsample(x, **st), s),
            {"x": img, "s": ()},
            domains=dom,
            generic=True,
        ),
        Axiom(
            "subsample-cat",
            f.cat(f.subsample(x, **st), f.subsample(y, **st), axis=a),
            f.subsample(f.cat(x, y, axis=a), **st),
            {"x": img, "y": (b, e, h, k)},
            when=(a <= 1, D(x, 1 - a) == D(y, 1 - a), D(x, 2) == D(y, 2), D(x, 3) == D(y, 3)),
            domains=dom,
            generic=True,
        ),
        Axiom(
            "subsample-split",
            f.subsample(x, **st),
            f.subsample(f.subsample(x, strides=(sh, 1)), strides=(1, sw)),
            {"x": img},
            when=(sh > 1, sw > 1),
            domains=dom,
            generic=True,
        ),
        # a conv one row high, unpadded in height, works row by row: which rows are kept does not matter
        Axiom(
            "subsample-rows-through-conv",
            f.conv(f.subsample(x, strides=(sh, 1)), v, strides=(1, sw), pads=(0, pl, 0, pr), group=g),
            f.subsample(f.conv(x, v, strides=(1, sw), pads=(0, pl, 0, pr), group=g), strides=(sh, 1)),
            {"x": img, "v": (m, d, 1, kw)},
            when=(D(v, 2) == 1,),
            domains=dom,
            generic=True,
        ),
        Axiom(
            "subsample-columns-through-conv",
            f.conv(f.subsample(x, strides=(1, sw)), v, strides=(sh, 1), pads=(pt, 0, pb, 0), group=g),
            f.subsample(f.conv(x, v, strides=(sh, 1), pads=(pt, 0, pb, 0), group=g), strides=(1, sw)),
            {"x": img, "v": (m, d, kh, 1)},
            when=(D(v, 3) == 1,),
            domains=dom,
            generic=True,
        ),
    ]
