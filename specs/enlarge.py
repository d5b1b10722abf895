"""Enlarge: zero-pad a kernel, centred, to ``kernel_shape`` (TASO's enlarge); with padding grown to match,
the convolution is unchanged, at any stride and group.

The symbol also carries the kernel's own size, ``from_shape`` (its ``dim`` terms: sizes are symbolic,
`taso.verify.lowering`); a Conv states its weight's spatial dims equal to its ``kernel_shape`` (specs/conv.py), so
z3 settles the padding the axioms compute from numbers rather than by case splits on dims (a merged
sibling-convs rule went from seconds to milliseconds).
"""

from taso.ops import OPS
from taso.verify import Axiom, D, If, R, Symbol, ints, tensors


def _enlarge(attrs, xs):
    if tuple(attrs["from_shape"]) != tuple(xs[0].shape[2:]):
        raise ValueError(f"enlarge from {attrs['from_shape']} of a kernel of {xs[0].shape[2:]}")
    return OPS["Enlarge"].run(list(xs), {"kernel_shape": attrs["kernel_shape"]})[0]


def _lower(node, args, types, f):
    size = (D(args[0], 2), D(args[0], 3))
    return [f.enlarge(args[0], kernel_shape=tuple(node.attr["kernel_shape"]), from_shape=size)]


SYMBOLS = [
    Symbol(
        "enlarge",
        1,
        dims=lambda i, a, w: If(i < 2, D(w, i), If(i == 2, a.kernel_shape[0], a.kernel_shape[1])),
        rank=lambda a, w: R(w),
        attrs=("kernel_shape[2]", "from_shape[2]"),
        op="Enlarge",
        compute=_enlarge,
    )
]
LOWER = {"Enlarge": _lower}


def axioms(f):
    x, w, v, s = tensors("x w v s")
    b, c, h, k, m, n, jh, jw, kh, kw, sh, sw, pt, pl, pb, pr, g, a = ints(
        "b c h k m n jh jw kh kw sh sw pt pl pb pr g a"
    )
    grow = dict(kernel_shape=(kh, kw), from_shape=(jh, jw))
    sized = (D(w, 2) == jh, D(w, 3) == jw)
    dom = {"b": (1,), "c": (1, 2), "m": (1, 2), "n": (1,), "h": (3, 4), "k": (4,), "jh": (1, 3), "jw": (1,)}
    dom |= {"kh": (3, 5), "kw": (3,), "sh": (1, 2), "sw": (1,), "pt": (1, 2), "pl": (1,), "pb": (1, 2)}
    dom |= {"pr": (1,), "g": (1,), "a": (0, 1)}
    eh, ew = (kh - jh) / 2, (kw - jw) / 2
    kernels = {"w": (m, c, jh, jw), "v": (m, c, jh, jw), "s": ()}
    return [
        Axiom(
            "conv-enlarge",
            f.conv(x, f.enlarge(w, **grow), strides=(sh, sw), pads=(pt, pl, pb, pr), group=g),
            f.conv(x, w, strides=(sh, sw), pads=(pt - eh, pl - ew, pb - eh, pr - ew), group=g),
            {"x": (b, c, h, k), "w": (m, c, jh, jw)},
            when=(*sized, kh >= jh, kw >= jw, (kh - jh) % 2 == 0, (kw - jw) % 2 == 0)
            + (pt >= eh, pl >= ew, pb >= eh, pr >= ew),
            domains=dom,
            generic=True,
        ),
        # with less padding than the kernel grew, the enlarged kernel reads a crop of the input: a conv by the
        # identity kernel of the size the kernel grew by, without padding
        Axiom(
            "enlarge-as-crop",
            f.conv(x, f.enlarge(w, **grow), strides=(1, 1), pads=(pt, pl, pb, pr), group=g),
            f.conv(
                f.conv(
                    x, f.convid(shape=(c, 1, kh - jh + 1, kw - jw + 1)), strides=(1, 1), pads=(pt, pl, pb, pr), group=c
                ),
                w,
                strides=(1, 1),
                pads=(0, 0, 0, 0),
                group=g,
            ),
            {"x": (b, c, h, k), "w": (m, n, jh, jw)},
            when=(*sized, kh >= jh, kw >= jw, (kh - jh) % 2 == 0, (kw - jw) % 2 == 0),
            domains={
                **dom,
                "pt": (0, 1),
                "pl": (0,),
                "pb": (0, 1),
                "pr": (0,),
                "h": (4, 5),
                "k": (4,),
                "g": (1, 2),
                "c": (2,),
                "n": (1, 2),
            },
            generic=True,
        ),
        Axiom(
            "enlarge-cat",
            f.enlarge(f.cat(w, v, axis=a), **grow),
            f.cat(f.enlarge(w, **grow), f.enlarge(v, **grow), axis=a),
            {"w": (m, c, jh, jw), "v": (m, c, jh, jw)},
            when=(*sized, a <= 1, D(v, 2) == jh, D(v, 3) == jw),
            domains=dom,
            generic=True,
        ),
        # zero padding survives any element-wise op that maps 0 to 0
        Axiom(
            "enlarge-mul",
            f.enlarge(f.mul(w, v), **grow),
            f.mul(f.enlarge(w, **grow), f.enlarge(v, **grow)),
            kernels,
            domains=dom,
        ),
        Axiom(
            "enlarge-relu",
            f.enlarge(f.relu(w), **grow),
            f.relu(f.enlarge(w, **grow)),
            kernels,
            when=sized,
            domains=dom,
            generic=True,
        ),
        Axiom(
            "enlarge-add",
            f.enlarge(f.add(w, v), **grow),
            f.add(f.enlarge(w, **grow), f.enlarge(v, **grow)),
            kernels,
            domains=dom,
        ),
        Axiom(
            "enlarge-smul",
            f.enlarge(f.smul(w, s), **grow),
            f.smul(f.enlarge(w, **grow), s),
            kernels,
            when=sized,
            domains=dom,
            generic=True,
        ),
    ]
