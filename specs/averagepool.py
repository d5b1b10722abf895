"""AveragePool: 2-D average pooling. It is a depthwise conv with a constant 1/(kh*kw) kernel only when every
window divides by kh*kw: count_include_pad=1, or no padding (the hazard: with padding excluded from the count,
border windows divide by fewer)."""

from taso.verify import Axiom, D, Symbol, ints, pool_dims, tensors

SYMBOLS = [
    Symbol(
        "avgpool",
        1,
        dims=pool_dims,
        rank=lambda a, x: 4,
        attrs=("kernel_shape[2]", "strides[2]", "pads[4]", "count_include_pad"),
        op="AveragePool",
    )
]


def axioms(f):
    x, y, s = tensors("x y s")
    b, c, e, h, k, kh, kw, sh, sw, pt, pl, pb, pr, ci, a = ints("b c e h k kh kw sh sw pt pl pb pr ci a")
    win = dict(kernel_shape=(kh, kw), strides=(sh, sw), pads=(pt, pl, pb, pr))
    dom = {"b": (1, 2), "c": (1, 2), "e": (1, 2), "h": (3, 4), "k": (3,), "kh": (1, 3), "kw": (3,), "sh": (1, 2)}
    dom |= {"sw": (1,), "pt": (0, 1), "pl": (1,), "pb": (0,), "pr": (1,), "ci": (0, 1), "a": (0, 1)}
    img = (b, c, h, k)
    return [
        Axiom(
            "avgpool-as-conv",
            f.conv(x, f.poolk(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c),
            f.avgpool(x, **win, count_include_pad=1),
            {"x": img},
            when=(pt < kh, pb < kh, pl < kw, pr < kw),  # ONNX pooling: each pad smaller than the window
            domains=dom,
        ),
        Axiom(
            "avgpool-to-conv",
            f.avgpool(x, **win, count_include_pad=1),
            f.conv(x, f.poolk(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c),
            {"x": img},
            domains=dom,
        ),
        Axiom(
            "avgpool-unpadded-as-conv",
            f.avgpool(x, kernel_shape=(kh, kw), strides=(sh, sw), pads=(0, 0, 0, 0), count_include_pad=ci),
            f.conv(x, f.poolk(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(0, 0, 0, 0), group=c),
            {"x": img},
            domains=dom,
        ),
        Axiom(
            "avgpool-add",
            f.avgpool(f.add(x, y), **win, count_include_pad=ci),
            f.add(f.avgpool(x, **win, count_include_pad=ci), f.avgpool(y, **win, count_include_pad=ci)),
            {"x": img, "y": img},
            domains=dom,
        ),
        Axiom(
            "avgpool-smul",
            f.avgpool(f.smul(x, s), **win, count_include_pad=ci),
            f.smul(f.avgpool(x, **win, count_include_pad=ci), s),
            {"x": img, "s": ()},
            domains=dom,
            generic=True,
        ),
        Axiom(
            "avgpool-cat",
            f.avgpool(f.cat(x, y, axis=a), **win, count_include_pad=ci),
            f.cat(f.avgpool(x, **win, count_include_pad=ci), f.avgpool(y, **win, count_include_pad=ci), axis=a),
            {"x": img, "y": img},
            when=(a <= 1, D(x, 1 - a) == D(y, 1 - a), D(x, 2) == D(y, 2), D(x, 3) == D(y, 3)),
            domains=dom,
            generic=True,
        ),
        # average pooling works per channel and place-independently, a pointwise (1x1) conv per place. The 1x1
        # kernel is a `when`: generic drops the declared shapes inside z3, and without it z3 proved
        # AveragePool(Conv3x3(X)) = Conv3x3(AveragePool(X)) (caught by the spec check's free shapes)
        Axiom(
            "avgpool-pointwise-conv",
            f.avgpool(f.conv(x, y, strides=(1, 1), pads=(0, 0, 0, 0), group=e), **win, count_include_pad=ci),
            f.conv(f.avgpool(x, **win, count_include_pad=ci), y, strides=(1, 1), pads=(0, 0, 0, 0), group=e),
            {"x": img, "y": (c, c, 1, 1)},
            when=(D(y, 2) == 1, D(y, 3) == 1),
            domains=dom,
            generic=True,
        ),
    ]
