"""Softmax along one axis, ``softmax(x, axis)``, the axis numbered from 0 (the lowering resolves -1).

Its definition, exp(x) / sum(exp(x)) along the axis (``softmax-def``), proves a spelled-out softmax equal to it
(`subst generate --target Softmax`); the other axioms hold for any function of each element and the elements
along its axis. So softmax moves through a 2-D transpose to the
other axis, and through a concat or a slice along another axis (each row is normalised on its own). A row sums to
1, so its mean is that of a softmax of ones, and a row of one element is 1 (``ones2``); a bias, constant down
each column, is invisible to a softmax along the rows. Over the
field it is a keyed function of (element, its row) (`taso.ops.normalisation`), which keeps the same identities.
"""

from taso.verify import Axiom, D, If, R, Symbol, ints, tensors

SYMBOLS = [Symbol("softmax", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), attrs=("axis",), op="Softmax")]


def _lower(node, args, types, f):
    rank = types[node.inputs[0]].rank
    return [f.softmax(args[0], axis=int(node.attr["axis"]) % rank)]


LOWER = {"Softmax": _lower}


def axioms(f):
    x, y, g = tensors("x y g")
    m, n, a, b, s, k = ints("m n a b s k")
    same = {"x": (m, n), "y": (m, n)}
    dom = {"a": (0, 1), "b": (0, 1), "s": (0, 1), "k": (1, 2)}
    e = f.exp(x)
    return [
        Axiom(  # its definition (ONNX's): what a spelled-out softmax is proved equal to it from
            "softmax-def",
            f.softmax(x, axis=a),
            f.div(e, f.bcast(f.rsum(e, axis=a, keepdims=1), e)),
            {"x": (m, n)},
            when=(a >= 0, a < R(x)),
            domains=dom,
            generic=True,  # at every rank: attention's softmax is over the last axis of [batch, heads, seq, seq]
        ),
        # each row (along the axis) sums to 1, and a row of one element is that 1 (a matrix's: ``ones2``)
        Axiom(
            "softmax-sum",
            f.rsum(f.softmax(x, axis=a), axis=a, keepdims=1),
            f.ones2(shape=(If(a == 0, 1, m), If(a == 1, 1, n))),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains={**dom, "m": (1, 2, 3), "n": (1, 2, 3)},
            oriented=True,
        ),
        # so a row's mean is 1 over its count, whatever the row: that of a softmax of ones of the same shape
        Axiom(
            "softmax-mean",
            f.rmean(f.softmax(x, axis=a), axis=a, keepdims=1),
            f.rmean(f.softmax(f.ones2(shape=(m, n)), axis=a), axis=a, keepdims=1),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains={**dom, "m": (1, 2, 3), "n": (1, 2, 3)},
            oriented=True,
        ),
        Axiom(
            "softmax-single",
            f.softmax(x, axis=a),
            f.ones2(shape=(m, n)),
            {"x": (m, n)},
            when=(a >= 0, a <= 1, D(x, a) == 1),
            domains={**dom, "m": (1, 2), "n": (1, 3)},
            oriented=True,
        ),
        # a bias (a value per column) is constant down each column: a softmax along the rows does not see it
        # (LayerNorm's shift under a softmax over the tokens)
        Axiom(
            "softmax-bias-rows",
            f.softmax(f.add(x, f.bias(g, y)), axis=0),
            f.softmax(x, axis=0),
            {"x": (m, n), "y": (m, n), "g": (n,)},
            oriented=True,
        ),
        Axiom(
            "softmax-transpose",
            f.softmax(f.tr(x), axis=a),
            f.tr(f.softmax(x, axis=1 - a)),
            {"x": (m, n)},
            when=(a >= 0, a <= 1),
            domains=dom,
        ),
        Axiom(
            "softmax-cat",
            f.softmax(f.cat(x, y, axis=b), axis=a),
            f.cat(f.softmax(x, axis=a), f.softmax(y, axis=a), axis=b),
            same,
            when=(a != b, D(x, a) == D(y, a)),
            domains=dom,
            generic=True,
        ),
        Axiom(
            "softmax-slice",
            f.slice(f.softmax(x, axis=a), axis=b, start=s, size=k),
            f.softmax(f.slice(x, axis=b, start=s, size=k), axis=a),
            {"x": (m, n)},
            when=(a != b,),
            domains=dom,
            generic=True,
            oriented=True,
        ),
    ]
