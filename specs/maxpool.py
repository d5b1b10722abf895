"""MaxPool: 2-D max pooling (padding is -inf). Commutes with relu (monotone) while every window holds a real
element, and with batch or channel concat."""

import z3

from taso.verify import Axiom, D, Symbol, ints, pool_dims, tensors

SYMBOLS = [
    Symbol(
        "maxpool",
        1,
        dims=pool_dims,
        rank=lambda a, x: 4,
        attrs=("kernel_shape[2]", "strides[2]", "pads[4]"),
        op="MaxPool",
        # ONNX's rule: a pad shorter than the window, so every window holds a real element (maxpool-relu's case)
        requires=lambda a, x: z3.And(*(p < a.kernel_shape[i % 2] for i, p in enumerate(a.pads))),
    )
]


def axioms(f):
    x, y = tensors("x y")
    b, c, h, k, kh, kw, sh, sw, pt, pl, pb, pr, a = ints("b c h k kh kw sh sw pt pl pb pr a")
    win = dict(kernel_shape=(kh, kw), strides=(sh, sw), pads=(pt, pl, pb, pr))
    dom = {"b": (1, 2), "c": (1, 2), "h": (3, 4), "k": (3,), "kh": (1, 3), "kw": (3,), "sh": (1, 2), "sw": (1,)}
    dom |= {"pt": (0, 1), "pl": (1,), "pb": (0,), "pr": (1,), "a": (0, 1)}
    img = (b, c, h, k)
    return [
        Axiom(
            "maxpool-relu",
            f.relu(f.maxpool(x, **win)),
            f.maxpool(f.relu(x), **win),
            {"x": img},
            when=(pt < kh, pb < kh, pl < kw, pr < kw),
            domains=dom,
            generic=True,
        ),
        Axiom(
            "maxpool-cat",
            f.maxpool(f.cat(x, y, axis=a), **win),
            f.cat(f.maxpool(x, **win), f.maxpool(y, **win), axis=a),
            {"x": img, "y": img},
            when=(a <= 1, D(x, 1 - a) == D(y, 1 - a), D(x, 2) == D(y, 2), D(x, 3) == D(y, 3)),
            domains=dom,
            generic=True,
        ),
    ]
