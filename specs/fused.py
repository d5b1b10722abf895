"""onnxruntime's fused kernels (taso/ops/fused.py), each lowered onto the symbols of the decomposition its
contrib-op documentation gives, so that a rule "decomposition = fused op" is proved from the existing axioms:

- FastGelu(x[, b]) = ``gelu_tanh`` of x (plus b along the last axis, as Add lowers a bias); BiasGelu(x, b) =
  ``gelu`` (the erf one) of x + b. The two GELUs are two symbols no axiom relates (specs/gelu.py).
- QuickGelu(x, alpha) = ``mul(x, sigmoid(scale(x, alpha)))``, the scale left out at alpha 1 (SiLU), as Gemm's
  alpha is (specs/gemm.py): other alphas are other functions.
- SkipLayerNormalization(x, skip, g[, beta[, bias]]) = LayerNormalization of x + skip (+ bias) over the last axis,
  as specs/layernorm.py lowers it; SkipSimplifiedLayerNormalization likewise over SimplifiedLayerNormalization.
- SimplifiedLayerNormalization(x, g) = ``rmsnorm(x, axis, epsilon) * trail(g, x)``: ``rmsnorm`` is a symbol of
  its own, never ``lnorm`` (RMSNorm does not centre). Its epsilon is an argument, as LayerNorm's; its one axiom is
  lnorm's concat axiom.
- FusedMatMul(a, b, alpha, transA, transB) = ``scale(mm(op(a), op(b)), alpha)`` with ``tr`` for op where a flag is
  set, as Gemm lowers (2-D, or a 3-D activation times a 2-D weight as MatMul's rows, specs/matmul.py).

Epsilons and alphas are integer arguments (the float's bits): a rule is proved for the value it is written at,
or for every value where it says ``free:``. A decomposition into primitives that spells epsilon or alpha as a
constant tensor (Add(mean, 1e-5), Mul(x, 1.702)) is not provable here: a rule's weights are free tensors.
"""

import numpy as np

from taso.ops import OPS
from taso.verify import (
    Axiom,
    D,
    R,
    Symbol,
    Unsupported,
    attr_int,
    channel_values,
    ints,
    per_channel,
    same_shape,
    tensors,
)


def _rmsnorm(attrs, xs):
    """The catalogue's SimplifiedLayerNormalization with a scale of ones."""
    x, axis = xs[0], attrs["axis"]
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} of a rank-{x.ndim} tensor")
    eps = float(np.int64(attrs["epsilon"]).view(np.float64))
    ones = np.ones(x.shape[axis:], x.dtype)
    return OPS["SimplifiedLayerNormalization"].run([x, ones], {"axis": axis, "epsilon": eps})[0]


SYMBOLS = [
    Symbol(
        "rmsnorm",
        1,
        dims=lambda i, a, x: D(x, i),
        rank=lambda a, x: R(x),
        attrs=("axis", "epsilon"),
        compute=_rmsnorm,
    )
]


def _plus_bias(f, x, tx, b, tb):
    """``x`` plus the vector ``b`` along its last axis, the terms Add's lowering gives (specs/add.py)."""
    if tx.rank >= 3:
        f.fact(D(b, 0) == D(x, tx.rank - 1))
        return f.add(x, f.bias_last(b, x))
    if per_channel(tx, tb):
        return f.add(x, f.bias(channel_values(f, b, tb, x), x))
    raise Unsupported("a bias over other than a matrix's columns or a tensor's last axis")


def _biased(node, args, types, f):
    """The first input, plus the second as a bias where there is one."""
    if len(args) < 2:
        return args[0]
    return _plus_bias(f, args[0], types[node.inputs[0]], args[1], types[node.inputs[1]])


def _lower_fast_gelu(node, args, types, f):
    return [f.gelu_tanh(_biased(node, args, types, f))]


def _lower_bias_gelu(node, args, types, f):
    return [f.gelu(_biased(node, args, types, f))]


def _scaled(f, x, factor):
    """``x`` times ``factor``: itself for 1, else a ``scale`` of it (free factors included)."""
    return x if isinstance(factor, float) and factor == 1.0 else f.scale(x, factor=attr_int(factor))


def _lower_quick_gelu(node, args, types, f):
    x = args[0]
    return [f.mul(x, f.sigmoid(_scaled(f, x, node.attr["alpha"])))]


def _weighted(f, norm, weights, x):
    """``norm * trail(g, x) [+ trail(beta, x)]``, LayerNormalization's form (specs/layernorm.py)."""
    out = f.mul(norm, f.trail(weights[0], x))
    return f.add(out, f.trail(weights[1], x)) if len(weights) > 1 else out


def _weights_fit(f, weights, names, types, x, axis, rank, op):
    for w, v in zip(weights, names):
        if types[v].rank != rank - axis:
            raise Unsupported(f"{op} with a scale or shift of other than the normalised shape")
        f.fact(*(D(w, j) == D(x, axis + j) for j in range(rank - axis)))


def _skip_sum(node, args, types, f, bias):
    """input + skip (+ the bias at position ``bias``), the terms Add's lowering gives."""
    tx = types[node.inputs[0]]
    f.fact(*same_shape(args[0], args[1], tx.rank))
    s = f.add(args[0], args[1])
    if bias is not None and len(args) > bias:
        s = _plus_bias(f, s, tx, args[bias], types[node.inputs[bias]])
    return s


def _lower_skip_layernorm(node, args, types, f):
    rank = types[node.inputs[0]].rank
    s = _skip_sum(node, args, types, f, 4)
    weights, names = args[2:4], node.inputs[2:4]
    _weights_fit(f, weights, names, types, s, rank - 1, rank, node.op)
    eps = attr_int(node.attr["epsilon"])
    return [_weighted(f, f.lnorm(s, axis=rank - 1, epsilon=eps), weights, s)]


def _lower_rmsnorm(node, args, types, f):
    rank = types[node.inputs[0]].rank
    axis = int(node.attr["axis"]) % rank
    _weights_fit(f, args[1:], node.inputs[1:], types, args[0], axis, rank, node.op)
    norm = f.rmsnorm(args[0], axis=axis, epsilon=attr_int(node.attr["epsilon"]))
    return [_weighted(f, norm, args[1:], args[0])]


def _lower_skip_rmsnorm(node, args, types, f):
    rank = types[node.inputs[0]].rank
    s = _skip_sum(node, args, types, f, None)
    _weights_fit(f, args[2:], node.inputs[2:], types, s, rank - 1, rank, node.op)
    norm = f.rmsnorm(s, axis=rank - 1, epsilon=attr_int(node.attr["epsilon"]))
    return [_weighted(f, norm, args[2:], s)]


def _flag(node, name):
    v = node.attr[name]
    if v not in (0, 1) or isinstance(v, bool | float):
        raise Unsupported(f"FusedMatMul with {name}={v!r} (only 0 and 1 are modelled)")
    return v


def _lower_fused_matmul(node, args, types, f):
    ra, rb = (types[v].rank for v in node.inputs)
    trans_a, trans_b = _flag(node, "transA"), _flag(node, "transB")
    b = f.tr(args[1]) if trans_b else args[1]
    if ra == 3 and rb == 2 and not trans_a:  # [B, S, K] @ [K, N]: the product of the stacked rows, regrouped
        x = args[0]
        f.fact(D(x, 2) == D(b, 0))
        rows = f.mm(f.reshape2(x, shape=(D(x, 0) * D(x, 1), D(x, 2))), b)
        y = f.reshape3(rows, shape=(D(x, 0), D(x, 1), D(b, 1)))
    elif ra == 2 and rb == 2:
        a = f.tr(args[0]) if trans_a else args[0]
        f.fact(D(a, 1) == D(b, 0))
        y = f.mm(a, b)
    else:
        raise Unsupported("FusedMatMul of operands other than 2-D, or a 3-D one times a matrix")
    return [_scaled(f, y, node.attr["alpha"])]


LOWER = {
    "FastGelu": _lower_fast_gelu,
    "BiasGelu": _lower_bias_gelu,
    "QuickGelu": _lower_quick_gelu,
    "SkipLayerNormalization": _lower_skip_layernorm,
    "SimplifiedLayerNormalization": _lower_rmsnorm,
    "SkipSimplifiedLayerNormalization": _lower_skip_rmsnorm,
    "FusedMatMul": _lower_fused_matmul,
}


def axioms(f):
    x, y = tensors("x y")
    m, n, a, b, e = ints("m n a b e")
    same = {"x": (m, n), "y": (m, n)}
    dom = {"a": (0, 1), "b": (0, 1), "e": tuple(attr_int(eps) for eps in (1e-5, 1e-6, 0.5))}
    return [
        Axiom(
            "rmsnorm-cat",
            f.rmsnorm(f.cat(x, y, axis=b), axis=a, epsilon=e),
            f.cat(f.rmsnorm(x, axis=a, epsilon=e), f.rmsnorm(y, axis=a, epsilon=e), axis=b),
            same,
            when=(b < a, D(x, a) == D(y, a)),
            domains=dom,
            generic=True,
        ),
    ]
