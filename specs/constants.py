"""The generator's constants: Ones (the mul identity), Eye (the matmul identity), ConvIdentity (the conv
identity) and PoolKernel (average pooling as a conv, see averagepool.py). Their attributes are their shapes."""

from taso.ops import OPS
from taso.verify import Axiom, D, Symbol, ints, pick, tensors


def _fixed(name, op, rank):
    return Symbol(
        name,
        0,
        dims=lambda i, a: pick(i, a.shape),
        rank=lambda a: rank,
        attrs=(f"shape[{rank}]",),
        op=op,
        fixed={"dtype": "float32"},
    )


def _eye(attrs, xs):
    return OPS["Eye"].run([], {"shape": (attrs["n"], attrs["n"]), "dtype": "float32"})[0]


def _lower_ones(node, args, types, f):
    shape = tuple(node.attr["shape"])
    return [getattr(f, f"ones{len(shape)}")(shape=shape)]


def _lower_eye(node, args, types, f):
    return [f.eye(n=node.attr["shape"][0])]


SYMBOLS = [
    *(_fixed(f"ones{r}", "Ones", r) for r in (1, 2, 3, 4)),
    Symbol("eye", 0, dims=lambda i, a: a.n, rank=lambda a: 2, attrs=("n",), op="Eye", compute=_eye),
    _fixed("convid", "ConvIdentity", 4),
    _fixed("poolk", "PoolKernel", 4),
]
LOWER = {"Ones": _lower_ones, "Eye": _lower_eye}


def axioms(f):
    x, w = tensors("x w")
    b, c, d, h, k, kh, kw, jh, jw, ph, pw, m, n, g = ints("b c d h k kh kw jh jw ph pw m n g")
    pt, pl, pb, pr = ints("pt pl pb pr")
    shapes = [(m,), (m, n), (m, n, k), (b, c, h, k)]
    kernel = (c, 1, kh, kw)
    sh, sw = ints("sh sw")
    conv_dom = {"b": (1,), "c": (1, 2), "h": (3, 4), "k": (3,), "kh": (1, 3), "kw": (3,), "sh": (1, 2), "sw": (1,)}
    conv_dom |= {"pt": (0, 1), "pl": (1,), "pb": (0, 1), "pr": (0,)}

    def ones(shape):
        return getattr(f, f"ones{len(shape)}")(shape=shape)

    return [
        *(Axiom(f"mul-ones{len(s)}", f.mul(x, ones(s)), x, {"x": s}) for s in shapes),
        # the constants' own facts: 0/1 entries are fixed by mul and relu, the identity is symmetric
        Axiom("eye-mul", f.mul(f.eye(n=n), f.eye(n=n)), f.eye(n=n), {}),
        Axiom("eye-relu", f.relu(f.eye(n=n)), f.eye(n=n), {}),
        Axiom("eye-transpose", f.tr(f.eye(n=n)), f.eye(n=n), {}),
        Axiom("convid-mul", f.mul(f.convid(shape=kernel), f.convid(shape=kernel)), f.convid(shape=kernel), {}),
        Axiom("convid-relu", f.relu(f.convid(shape=kernel)), f.convid(shape=kernel), {}),
        Axiom("poolk-relu", f.relu(f.poolk(shape=kernel)), f.poolk(shape=kernel), {}),
        *(Axiom(f"ones{len(s)}-relu", f.relu(ones(s)), ones(s), {}) for s in shapes),
        Axiom("eye-mul-transpose", f.mul(f.tr(x), f.eye(n=n)), f.mul(x, f.eye(n=n)), {"x": (n, n)}),
        Axiom("ones-transpose", f.tr(f.ones2(shape=(m, n))), f.ones2(shape=(n, m)), {}),
        Axiom("ones-cat0", f.cat(f.ones2(shape=(m, n)), f.ones2(shape=(k, n)), axis=0), f.ones2(shape=(m + k, n)), {}),
        Axiom("ones-cat1", f.cat(f.ones2(shape=(m, n)), f.ones2(shape=(m, k)), axis=1), f.ones2(shape=(m, n + k)), {}),
        Axiom("mm-eye-right", f.mm(x, f.eye(n=n)), x, {"x": (m, n)}),
        Axiom("mm-eye-left", f.mm(f.eye(n=m), x), x, {"x": (m, n)}),
        # a SAME-padded, stride-1 depthwise conv by a centred 1 is the identity
        Axiom(
            "conv-identity",
            f.conv(x, f.convid(shape=(c, 1, kh, kw)), strides=(1, 1), pads=(ph, pw, ph, pw), group=c),
            x,
            {"x": (b, c, h, k)},
            when=(2 * ph + 1 == kh, 2 * pw + 1 == kw),
            domains={
                "b": (1,),
                "c": (1, 2),
                "h": (3, 4),
                "k": (3,),
                "kh": (1, 3),
                "kw": (1, 3),
                "ph": (0, 1),
                "pw": (0, 1),
            },
        ),
        # an identity-kernel conv only moves elements or pads zeros: it commutes with ops that keep 0 at 0
        Axiom(
            "convid-relu-commute",
            f.conv(f.relu(x), f.convid(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c),
            f.relu(f.conv(x, f.convid(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c)),
            {"x": (b, c, h, k)},
            domains=conv_dom,
            generic=True,
        ),
        Axiom(
            "convid-mul-commute",
            f.conv(f.mul(x, w), f.convid(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c),
            f.mul(
                f.conv(x, f.convid(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c),
                f.conv(w, f.convid(shape=(c, 1, kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), group=c),
            ),
            {"x": (b, c, h, k), "w": (b, c, h, k)},
            domains=conv_dom,
        ),
        # along an axis padded SAME, the identity kernel is the identity: only the other axis is cropped
        Axiom(
            "convid-same-width",
            f.conv(x, f.convid(shape=(c, 1, kh, kw)), strides=(1, 1), pads=(pt, pw, pb, pw), group=c),
            f.conv(x, f.convid(shape=(c, 1, kh, 1)), strides=(1, 1), pads=(pt, 0, pb, 0), group=c),
            {"x": (b, c, h, k)},
            when=(2 * pw + 1 == kw, kw > 1),
            domains={"b": (1,), "c": (1, 2), "h": (3, 4), "k": (3, 4), "kh": (1, 3), "kw": (1, 3, 5)}
            | {"pt": (0, 1), "pb": (0, 1), "pw": (0, 1, 2)},
        ),
        Axiom(
            "convid-same-height",
            f.conv(x, f.convid(shape=(c, 1, kh, kw)), strides=(1, 1), pads=(ph, pl, ph, pr), group=c),
            f.conv(x, f.convid(shape=(c, 1, 1, kw)), strides=(1, 1), pads=(0, pl, 0, pr), group=c),
            {"x": (b, c, h, k)},
            when=(2 * ph + 1 == kh, kh > 1),
            domains={"b": (1,), "c": (1, 2), "h": (3, 4), "k": (3, 4), "kh": (1, 3, 5), "kw": (1, 3)}
            | {"pl": (0, 1), "pr": (0, 1), "ph": (0, 1, 2)},
        ),
        # a depthwise kernel that is the same for every channel commutes with any stride-1 conv (both are
        # convolutions); the padding stays with whichever runs first
        *(
            Axiom(
                f"{u}-commutes-with-conv",
                f.conv(
                    f.conv(x, w, strides=(1, 1), pads=(pt, pl, pb, pr), group=g),
                    getattr(f, u)(shape=(m, 1, kh, kw)),
                    strides=(1, 1),
                    pads=(0, 0, 0, 0),
                    group=m,
                ),
                f.conv(
                    f.conv(x, getattr(f, u)(shape=(c, 1, kh, kw)), strides=(1, 1), pads=(pt, pl, pb, pr), group=c),
                    w,
                    strides=(1, 1),
                    pads=(0, 0, 0, 0),
                    group=g,
                ),
                {"x": (b, c, h, k), "w": (m, d, jh, jw)},
                when=(D(w, 0) == m,),
                domains={"b": (1,), "c": (2,), "d": (1, 2), "m": (2, 4), "h": (4, 5), "k": (4,), "kh": (1, 3)}
                | {
                    "kw": (3,),
                    "jh": (1, 3),
                    "jw": (1,),
                    "g": (1, 2),
                    "pt": (0, 1),
                    "pl": (1,),
                    "pb": (0, 1),
                    "pr": (0,),
                },
                generic=True,
            )
            for u in ("convid", "poolk")
        ),
    ]
