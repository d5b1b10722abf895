"""Reshape to rank 2, 3 or 4: ``reshape2(x, shape)``, ``reshape3(x, shape)`` and ``reshape4(x, shape)``, the
row-major reinterpretation of ``x`` as ``shape`` (the same elements, in the same order); rank 4 is attention's
heads split from the last axis (taso/ops/attention.py). ``bias_last(b, x)`` spreads a vector along the last
axis of ``x`` at any rank (numpy broadcasting of a (N,) bias over (..., N)).

A Reshape node's target is a weight whose values the lowering does not read: its result's sizes are variables,
one set per side of a rule (as a Split's sizes are, `taso.verify.lowering`), tied only by holding as many
elements as its input. So a proof covers every target the matcher binds or the rewrite writes, and a rule
holds for no particular example size. N-D MatMul is lowered onto these (specs/matmul.py): [B, S, K] @ [K, N]
is the 2-D product of its rows, ``reshape3(mm(reshape2(x, (B*S, K)), w), (B, S, N))``."""

import numpy as np
import z3

from taso.verify import Axiom, D, R, Symbol, Unsupported, ints, pick, tensors


def _reshape(attrs, xs):
    """The semantics: numpy's row-major reshape, refused where the sizes do not hold the input's elements."""
    shape = tuple(attrs["shape"])
    if any(d < 1 for d in shape) or int(np.prod(shape)) != xs[0].size:
        raise ValueError(f"cannot reshape {xs[0].shape} to {shape}")
    return xs[0].reshape(shape)


def _bias_last(attrs, xs):
    b, x = xs
    if b.ndim != 1 or x.ndim < 1 or b.shape[0] != x.shape[-1]:
        raise ValueError(f"bias_last of {b.shape} over {x.shape}: one value per element of the last axis")
    return np.broadcast_to(b, x.shape).copy()


def _symbol(rank):
    return Symbol(
        f"reshape{rank}",
        1,
        dims=lambda i, a, x: pick(i, a.shape),
        rank=lambda a, x: rank,
        attrs=(f"shape[{rank}]",),
        compute=_reshape,
    )


SYMBOLS = [
    _symbol(2),
    _symbol(3),
    _symbol(4),
    Symbol("bias_last", 2, dims=lambda i, a, b, x: D(x, i), rank=lambda a, b, x: R(x), compute=_bias_last),
]


def _product(terms):
    out = terms[0]
    for t in terms[1:]:
        out = out * t
    return out


def _lower(node, args, types, f):
    tx, ty = types[node.inputs[0]], types[node.outputs[0]]
    if ty.rank not in (2, 3, 4):
        raise Unsupported("Reshape to a rank other than 2, 3 or 4")
    # one variable per result dim, named by the side being lowered (a name both sides may use is two values)
    (base,) = f.split_sizes(node, 0)
    shape = tuple(z3.Int(f"{base}[{i}]") for i in range(ty.rank))
    f.fact(*(d >= 1 for d in shape), _product(shape) == _product([D(args[0], i) for i in range(tx.rank)]))
    return [getattr(f, f"reshape{ty.rank}")(args[0], shape=shape)]


LOWER = {"Reshape": _lower}


def axioms(f):
    x, y, b, w = tensors("x y b w")
    m, n, p, q, k, a, e, c, d = ints("m n p q k a e c d")
    rows = {"p": (1, 2, 3), "q": (1, 2), "m": (2, 3, 6), "n": (1, 3), "k": (1, 2, 3)}
    to2, to3 = dict(shape=(m, k)), dict(shape=(p, q, n))
    cube, mat = {"x": (p, q, n), "y": (p, q, n)}, {"x": (m, k), "y": (m, k)}
    return [
        # a bias added along the last axis is added before or after regrouping the rows: a Gemm's fused bias
        Axiom(
            "reshape-bias-last",
            f.add(f.reshape3(y, **to3), f.bias_last(b, f.reshape3(y, **to3))),
            f.reshape3(f.add(y, f.bias(b, y)), **to3),
            {"y": (m, n), "b": (n,)},
            when=(p * q == m,),
            domains=rows,
        ),
        # row-major order is kept by every reshape, so only the last one counts, and one back to the shape
        # a tensor had is that tensor
        Axiom(
            "reshape-back-3",
            f.reshape3(f.reshape2(x, **to2), **to3),
            x,
            {"x": (p, q, n)},
            when=(m * k == p * q * n,),
            domains=rows,
        ),
        Axiom(  # attention's heads merged into the last axis and split again (taso/ops/attention.py)
            "reshape-back-4",
            f.reshape4(f.reshape3(w, **to3), shape=(a, e, c, d)),
            w,
            {"w": (a, e, c, d)},
            when=(p * q * n == a * e * c * d,),
            domains={**rows, "a": (1, 2), "e": (1, 3), "c": (1, 2), "d": (1, 2, 3)},
        ),
        Axiom(
            "reshape-back-2",
            f.reshape2(f.reshape3(y, **to3), **to2),
            y,
            {"y": (m, k)},
            when=(m * k == p * q * n,),
            domains=rows,
        ),
        Axiom(
            "reshape-add-2",
            f.reshape2(f.add(x, y), **to2),
            f.add(f.reshape2(x, **to2), f.reshape2(y, **to2)),
            cube,
            when=(m * k == D(x, 0) * D(x, 1) * D(x, 2),),
            domains=rows,
            generic=True,
        ),
        Axiom(
            "reshape-add-3",
            f.reshape3(f.add(x, y), **to3),
            f.add(f.reshape3(x, **to3), f.reshape3(y, **to3)),
            mat,
            when=(p * q * n == D(x, 0) * D(x, 1),),
            domains=rows,
            generic=True,
        ),
    ]
