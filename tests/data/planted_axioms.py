"""Planted false axioms (tests/test_planted.py, bench/bench_planted.py copy this file into a copy of specs/):
each must fail `subst verify --check-specs`. Two are generic and true at their declared shapes, false only at
the shapes z3 also applies them to; two are true only in the narrow domains their author gave, which the check
widens to its floors (a product commuted at 1x1, a 1x1 max pool as an average pool); the last two mistake what
Expand does (a spread not transposed with its input, a spread taken for a tile)."""

from taso.verify import Axiom, D, ints, tensors


def axioms(f):
    x, y, w = tensors("x y w")
    m, n, a, b, c, sh, sw, h, k = ints("m n a b c sh sw h k")
    two = {"x": (m, n), "y": (m, n)}
    conv = dict(pads=(0, 0, 0, 0), group=1)
    window = dict(strides=(1, 1), pads=(0, 0, 0, 0))
    return [
        Axiom("planted-relu-add", f.relu(f.add(x, y)), f.add(f.relu(x), f.relu(y)), two, generic=True),
        Axiom("planted-mm-comm", f.mm(x, y), f.mm(y, x), {"x": (m, m), "y": (m, m)}),
        Axiom("planted-cat-comm", f.cat(x, y, axis=a), f.cat(y, x, axis=a), two, domains={"a": (0, 1)}),
        # forgets that the slice must start where x ends
        Axiom(
            "planted-slice-cat-second",
            f.slice(f.cat(x, y, axis=a), axis=a, start=0, size=n),
            y,
            two,
            when=(D(y, a) == n,),
            domains={"a": (0, 1)},
            generic=True,
        ),
        # a 1x1 matrix is its own transpose; generic, z3 would say it of every matrix
        Axiom("planted-transpose-identity", f.tr(x), x, {"x": (1, 1)}, generic=True),
        # over a 1x1 image a conv's stride does not matter; generic, z3 would say it of every image
        Axiom(
            "planted-conv-stride-free",
            f.conv(x, w, strides=(sh, sw), **conv),
            f.conv(x, w, strides=(1, 1), **conv),
            {"x": (b, c, 1, 1), "w": (m, c, 1, 1)},
            domains={"sh": (1, 2), "sw": (1, 2)},
            generic=True,
        ),
        Axiom("planted-mm-comm-1x1", f.mm(x, y), f.mm(y, x), {"x": (m, m), "y": (m, m)}, domains={"m": (1,)}),
        Axiom(
            "planted-maxpool-is-avgpool-1x1",
            f.maxpool(x, kernel_shape=(k, k), **window),
            f.avgpool(x, kernel_shape=(k, k), count_include_pad=0, **window),
            {"x": (b, c, h, h)},
            domains={"k": (1,)},
        ),
        # a spread moved through a transpose without swapping its shape
        Axiom(
            "planted-expand-transpose-unswapped",
            f.tr(f.expand2(x, shape=(m, n))),
            f.expand2(f.tr(x), shape=(m, n)),
            {"x": (1, n)},
            domains={"m": (1, 2), "n": (1, 2, 3)},
        ),
        # a column spread to two columns taken as the column tiled (stacked twice, regrouped)
        Axiom(
            "planted-expand-is-tile",
            f.expand2(x, shape=(n, 2)),
            f.reshape2(f.cat(x, x, axis=0), shape=(n, 2)),
            {"x": (n, 1)},
            domains={"n": (1, 2, 3)},
        ),
    ]
