"""Planted false variants of the axioms that close the shipped store's unknowns (tests/test_reduction_axioms.py
copies this file into a copy of specs/): each drops the one thing that makes its true version hold, and each
must fail `subst verify --check-specs`."""

from taso.verify import Axiom, D, If, ints, tensors


def axioms(f):
    x, y, s, w = tensors("x y s w")
    m, n, a, b, c, h, k = ints("m n a b c h k")
    dom = {"a": (0, 1), "m": (1, 2), "n": (1, 3)}
    img = (b, c, h, k)
    return [
        # a bias over a scaled tensor taken for the scaled bias: the scalar reaches the values after all
        Axiom(
            "planted-bias-over-smul-scales",
            f.bias(s, f.smul(x, w)),
            f.smul(f.bias(s, x), w),
            {"s": (c,), "x": img, "w": ()},
            domains={"b": (1,), "c": (1, 2), "h": (1, 2), "k": (1, 2)},
        ),
        # a bias taken for invisible to a softmax along the columns, where it varies: only down them is it constant
        Axiom(
            "planted-softmax-bias-columns",
            f.softmax(f.add(x, f.bias(s, y)), axis=1),
            f.softmax(x, axis=1),
            {"x": (m, n), "y": (m, n), "s": (n,)},
            oriented=True,
        ),
        # the order within a part taken for invisible where that part is joined along another axis than the mean's
        Axiom(
            "planted-rmean-cat-inner-swap-across",
            f.rmean(f.cat(x, f.cat(y, w, axis=1), axis=0), axis=0, keepdims=1),
            f.rmean(f.cat(x, f.cat(w, y, axis=1), axis=0), axis=0, keepdims=1),
            {"x": (m, 2), "y": (m, 1), "w": (m, 1)},
        ),
        # a reduction dropped along an axis of any size, not only of size 1
        Axiom("planted-rsum-any", f.rsum(x, axis=a, keepdims=1), x, {"x": (m, n)}, domains=dom, generic=True),
        # a sum of x concatenated with itself is twice its sum, not its sum (only the mean keeps it)
        Axiom(
            "planted-rsum-cat-self",
            f.rsum(f.cat(x, x, axis=a), axis=a, keepdims=1),
            f.rsum(x, axis=a, keepdims=1),
            {"x": (m, n)},
            domains=dom,
            generic=True,
        ),
        # softmax rows summed along the other axis
        Axiom(
            "planted-softmax-sum-other-axis",
            f.rsum(f.softmax(x, axis=a), axis=b, keepdims=1),
            f.ones2(shape=(If(b == 0, 1, m), If(b == 1, 1, n))),
            {"x": (m, n)},
            when=(a >= 0, a <= 1, b >= 0, b <= 1, a != b),
            domains={**dom, "b": (0, 1)},
        ),
        # a softmax taken for 1 along an axis of any size
        Axiom(
            "planted-softmax-any",
            f.softmax(x, axis=a),
            f.ones2(shape=(m, n)),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains=dom,
        ),
        # a sum of ones taken for 1, as a mean of them is
        Axiom(
            "planted-rsum-ones",
            f.rsum(f.ones2(shape=(m, n)), axis=a, keepdims=1),
            f.ones2(shape=(If(a == 0, 1, m), If(a == 1, 1, n))),
            {},
            when=(a >= 0, a <= 1, m >= 1, n >= 1),
            domains=dom,
        ),
        # a row vector taken for its own transpose
        Axiom("planted-transpose-row", f.tr(x), x, {"x": (1, n)}, domains={"n": (1, 2)}),
        # a softmax over a size-1 axis of a shape the example fixes: its dims as the ones' shape, swapped
        Axiom(
            "planted-softmax-single-swapped",
            f.softmax(x, axis=a),
            f.ones2(shape=(n, m)),
            {"x": (m, n)},
            when=(a >= 0, a <= 1, D(x, a) == 1),
            domains=dom,
        ),
        # a bias spread over ones of its tensor's shape with two axes swapped
        Axiom(
            "planted-bias-shape-swapped",
            f.bias(s, x),
            f.bias(s, f.ones4(shape=(b, c, k, h))),
            {"s": (c,), "x": img},
            domains={"b": (1,), "c": (1, 2), "h": (1, 2), "k": (1, 3)},
        ),
        # a unit-sum kernel keeping a per-channel constant where the conv pads: the border sees zeros
        Axiom(
            "planted-poolk-bias-padded",
            f.conv(f.bias(s, x), f.poolk(shape=(c, 1, 3, 3)), strides=(1, 1), pads=(1, 1, 1, 1), group=c),
            f.bias(s, f.conv(x, f.poolk(shape=(c, 1, 3, 3)), strides=(1, 1), pads=(1, 1, 1, 1), group=c)),
            {"s": (c,), "x": img},
            domains={"b": (1,), "c": (1, 2), "h": (3,), "k": (3,)},
        ),
        # a softmax row's mean taken for that of ones (1, not 1 over the count)
        Axiom(
            "planted-softmax-mean-ones",
            f.rmean(f.softmax(x, axis=a), axis=a, keepdims=1),
            f.rmean(f.ones2(shape=(m, n)), axis=a, keepdims=1),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains={**dom, "m": (2, 3), "n": (2, 3)},
        ),
        # a sum's order ignored in a concat that is not reduced along its own axis
        Axiom(
            "planted-rmean-cat-swap-other-axis",
            f.rmean(f.cat(x, y, axis=a), axis=b, keepdims=1),
            f.rmean(f.cat(y, x, axis=a), axis=b, keepdims=1),
            {"x": (m, n), "y": (m, n)},
            when=(a != b,),
            domains={"a": (0, 1), "b": (0, 1), "m": (1, 2), "n": (1, 2)},
            generic=True,
        ),
        # one more element equal to the sum, not the mean
        Axiom(
            "planted-rmean-cat-sum",
            f.rmean(f.cat(f.rsum(x, axis=a, keepdims=1), x, axis=a), axis=a, keepdims=1),
            f.rmean(x, axis=a, keepdims=1),
            {"x": (m, n)},
            domains={"a": (0, 1), "m": (2, 3), "n": (1, 2)},
            generic=True,
        ),
        # a row of ones times a matrix taken for its mean
        Axiom(
            "planted-rmean-mm-ones",
            f.mm(f.ones2(shape=(1, k)), y),
            f.rmean(y, axis=0, keepdims=1),
            {"y": (k, n)},
            domains={"k": (2, 3), "n": (1, 2)},
        ),
    ]
