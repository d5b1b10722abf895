"""Neg: -x, element-wise and linear: it moves through transposes, concats and slices, into sums, products,
matrix products, convolutions and average pools, and undoes itself; a sum with a negated term cancels it."""

from taso.verify import Axiom, D, R, Symbol, elementwise_axioms, ints, tensors

SYMBOLS = [Symbol("neg", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Neg")]


def _windows(f, x, w):
    """Conv and average pool over a negated input (or kernel ``w``, named y): the negated result (both linear)."""
    b, c, d, h, k, m, kh, kw, sh, sw, pt, pl, pb, pr, g, ci = ints("b c d h k m kh kw sh sw pt pl pb pr g ci")
    cv = dict(strides=(sh, sw), pads=(pt, pl, pb, pr), group=g)
    pool = dict(kernel_shape=(kh, kw), strides=(sh, sw), pads=(pt, pl, pb, pr), count_include_pad=ci)
    dom = {"b": (1, 2), "c": (2, 4), "d": (1, 2), "m": (2, 4), "h": (3, 4), "k": (3, 4), "g": (1, 2), "ci": (0, 1)}
    dom |= {"kh": (1, 3), "kw": (1, 2), "sh": (1, 2), "sw": (1,), "pt": (0, 1), "pl": (0,), "pb": (0, 1), "pr": (1,)}
    img, kernel = (b, c, h, k), (m, d, kh, kw)
    return [
        Axiom(
            "conv-neg-input",
            f.conv(f.neg(x), w, **cv),
            f.neg(f.conv(x, w, **cv)),
            {"x": img, "y": kernel},
            domains=dom,
            generic=True,
        ),
        Axiom(
            "conv-neg-kernel",
            f.conv(x, f.neg(w), **cv),
            f.neg(f.conv(x, w, **cv)),
            {"x": img, "y": kernel},
            domains=dom,
            generic=True,
        ),
        Axiom("avgpool-neg", f.avgpool(f.neg(x), **pool), f.neg(f.avgpool(x, **pool)), {"x": img}, domains=dom),
    ]


def axioms(f):
    x, y, s = tensors("x y s")
    m, n, k = ints("m n k")
    same = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("neg-neg", f.neg(f.neg(x)), x, same, generic=True),
        # its matches feed add-comm and add-assoc without end where no proof exists (x - x against y - y):
        # tried last, only on rules with a Neg the others leave open (a Sub alone does not make it relevant:
        # as sub(add(x, y), y) = x it spent the budget on each x - x rule the generator finds)
        Axiom("add-neg-cancel", f.add(f.add(x, y), f.neg(y)), x, same, generic=True, last_resort=True),
        Axiom("neg-add", f.neg(f.add(x, y)), f.add(f.neg(x), f.neg(y)), same, generic=True),
        Axiom("neg-mul", f.mul(f.neg(x), y), f.neg(f.mul(x, y)), same, generic=True),
        Axiom("neg-smul", f.smul(f.neg(x), s), f.neg(f.smul(x, s)), {"x": (m, n), "s": ()}, generic=True),
        Axiom("neg-mm-left", f.mm(f.neg(x), y), f.neg(f.mm(x, y)), {"x": (m, k), "y": (k, n)}, generic=True),
        Axiom("neg-mm-right", f.mm(x, f.neg(y)), f.neg(f.mm(x, y)), {"x": (m, k), "y": (k, n)}, generic=True),
        *elementwise_axioms(f, f.neg),
        *_windows(f, x, y),
    ]
