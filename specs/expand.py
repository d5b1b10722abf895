"""Expand: ``expand2(x, shape)`` and ``expand3(x, shape)``, numpy's ``broadcast_to`` of ``x`` to ``shape`` at one
rank (a size-1 axis of ``x`` spread, every other kept). An input of lower rank is first regrouped with leading
1s (``reshape2``/``reshape3``, specs/reshape.py), as ONNX's broadcasting aligns trailing axes.

The target is a whole shape the rewrite writes at the model's sizes (`OpDef.shape_of`, as a Reshape's); the
lowering gives each spread axis a size variable per side of the rule, states that ``x`` is 1 there, and keeps
``x``'s dim on every other axis, so a proof covers exactly the instances that broadcast as the example does
(`taso.search.rewrite` checks that). An expand to the shape of a tensor is that tensor's ``bcast``
(specs/broadcast.py), which is how Mul and Add lower their own broadcasting."""

import numpy as np
import z3

from taso.verify import Axiom, D, Symbol, Unsupported, ints, pick, tensors


def _expand(attrs, xs):
    """The semantics: ``broadcast_to`` at one rank, refused where ``x`` does not broadcast to the shape."""
    x, shape = xs[0], tuple(attrs["shape"])
    if x.ndim != len(shape) or any(d < 1 or a not in (d, 1) for a, d in zip(x.shape, shape)):
        raise ValueError(f"{x.shape} does not broadcast to {shape} at one rank")
    return np.broadcast_to(x, shape).copy()


def _symbol(rank):
    return Symbol(
        f"expand{rank}",
        1,
        dims=lambda i, a, x: pick(i, a.shape),
        rank=lambda a, x: rank,
        attrs=(f"shape[{rank}]",),
        compute=_expand,
    )


SYMBOLS = [_symbol(2), _symbol(3)]


def _lower(node, args, types, f):
    tx, ty = types[node.inputs[0]], types[node.outputs[0]]
    rank = ty.rank
    if rank not in (2, 3) or tx.shape is None:
        raise Unsupported("Expand to a rank other than 2 or 3")
    lead = rank - tx.rank
    x = args[0]
    if lead:
        x = getattr(f, f"reshape{rank}")(x, shape=(*(1,) * lead, *(D(x, i) for i in range(tx.rank))))
    (base,) = f.split_sizes(node, 0)
    shape = []
    for i, (a, d) in enumerate(zip((1,) * lead + tx.shape, ty.shape)):
        if a == 1 != d:  # spread: the target's size, x's 1
            size = z3.Int(f"{base}[{i}]")
            f.fact(size >= 1, D(x, i) == 1)
            shape.append(size)
        else:
            shape.append(D(x, i))
    return [getattr(f, f"expand{rank}")(x, shape=tuple(shape))]


LOWER = {"Expand": _lower}


def axioms(f):
    x, y, z = tensors("x y z")
    m, n, p, a, b, c = ints("m n p a b c")
    spread = {"a": (1, 2), "b": (1, 3), "c": (1, 2), "m": (1, 2, 3), "n": (1, 2, 3), "p": (1, 2)}
    two = dict(shape=(m, n))
    return [
        # bcast(x, z) is x spread to z's shape
        Axiom(
            "expand-bcast-2",
            f.bcast(x, z),
            f.expand2(x, shape=(m, n)),
            {"x": (a, b), "z": (m, n)},
            when=(z3.Or(a == 1, a == m), z3.Or(b == 1, b == n)),
            domains=spread,
        ),
        Axiom(
            "expand-bcast-3",
            f.bcast(x, z),
            f.expand3(x, shape=(p, m, n)),
            {"x": (a, b, c), "z": (p, m, n)},
            when=(z3.Or(a == 1, a == p), z3.Or(b == 1, b == m), z3.Or(c == 1, c == n)),
            domains=spread,
        ),
        # to the shape x already has, an expand is x
        Axiom("expand-same-2", f.expand2(x, shape=(m, n)), x, {"x": (m, n)}),
        Axiom("expand-same-3", f.expand3(x, shape=(p, m, n)), x, {"x": (p, m, n)}),
        # an element-wise op of operands spread alike is the spread of its result
        Axiom(
            "expand-add-2",
            f.add(f.expand2(x, **two), f.expand2(y, **two)),
            f.expand2(f.add(x, y), **two),
            {"x": (a, b), "y": (a, b)},
            when=(z3.Or(a == 1, a == m), z3.Or(b == 1, b == n)),
            domains=spread,
        ),
        Axiom(
            "expand-mul-2",
            f.mul(f.expand2(x, **two), f.expand2(y, **two)),
            f.expand2(f.mul(x, y), **two),
            {"x": (a, b), "y": (a, b)},
            when=(z3.Or(a == 1, a == m), z3.Or(b == 1, b == n)),
            domains=spread,
        ),
        Axiom(
            "expand-relu-2",
            f.relu(f.expand2(x, **two)),
            f.expand2(f.relu(x), **two),
            {"x": (a, b)},
            when=(z3.Or(a == 1, a == m), z3.Or(b == 1, b == n)),
            domains=spread,
        ),
        # rows spread before a product are the product's rows spread
        Axiom(
            "expand-mm",
            f.mm(f.expand2(x, shape=(m, b)), y),
            f.expand2(f.mm(x, y), shape=(m, n)),
            {"x": (a, b), "y": (b, n)},
            when=(z3.Or(a == 1, a == m),),
            domains=spread,
        ),
        # a transposed spread is the spread of the transpose
        Axiom(
            "expand-transpose",
            f.tr(f.expand2(x, **two)),
            f.expand2(f.tr(x), shape=(n, m)),
            {"x": (a, b)},
            when=(z3.Or(a == 1, a == m), z3.Or(b == 1, b == n)),
            domains=spread,
        ),
    ]
