"""onnxruntime's fused kernels (taso/ops/fused.py), each lowered onto the symbols of the decomposition its
contrib-op documentation gives, so that a rule "decomposition = fused op" is proved from the existing axioms:

- FastGelu(x[, b]) = ``gelu_tanh`` of x (plus b along the last axis, as Add lowers a bias); BiasGelu(x, b) =
  ``gelu`` (the erf one) of x + b. The two GELUs are two symbols no axiom relates (specs/gelu.py).
- QuickGelu(x, alpha) = ``mul(x, sigmoid(scale(x, alpha)))``, the scale left out at alpha 1 (SiLU), as Gemm's
  alpha is (specs/gemm.py): other alphas are other functions.
- SkipLayerNormalization(x, skip, g[, beta[, bias]]) = LayerNormalization of x + skip (+ bias) over the last axis,
  SkipSimplifiedLayerNormalization(x, skip, g) RMSNorm (SimplifiedLayerNormalization) of x + skip: each norm's
  symbol and scale as specs/layernorm.py lowers the norm itself (`taso.verify.normed`).
- FusedMatMul(a, b, alpha, transA, transB) = ``scale(mm(op(a), op(b)), alpha)`` with ``tr`` for op where a flag is
  set, as Gemm lowers (2-D, or a 3-D activation times a 2-D weight as MatMul's rows, specs/matmul.py).

Epsilons and alphas are integer arguments (the float's bits): a rule is proved for the value it is written at,
or for every value where it says ``free:``. A rule's 0-d constant is the ``num`` term of the number it is read
as (specs/numbers.py), the integer an attribute of that value is: a norm's spelling that adds its epsilon as a
constant is proved (specs/layernorm.py), and so is an alpha spelled as one (Mul(x, 1.702): ``smul-num-scale``).
"""

from taso.verify import D, Unsupported, attr_int, channel_values, normed, per_channel, same_shape


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


def _skip_sum(node, args, types, f, bias):
    """input + skip (+ the bias at position ``bias``), the terms Add's lowering gives."""
    tx = types[node.inputs[0]]
    f.fact(*same_shape(args[0], args[1], tx.rank))
    s = f.add(args[0], args[1])
    if bias is not None and len(args) > bias:
        s = _plus_bias(f, s, tx, args[bias], types[node.inputs[bias]])
    return s


def _lower_skip(name, weights, bias):
    """A skip norm: ``name``'s norm (specs/layernorm.py) of input + skip over the last axis, its scale and shift
    the inputs at the positions ``weights``, as that norm's own op lowers them."""

    def lower(node, args, types, f):
        rank = types[node.inputs[0]].rank
        s = _skip_sum(node, args, types, f, bias)
        norm = getattr(f, name)(s, axis=rank - 1, epsilon=attr_int(node.attr["epsilon"]))
        scales = [(args[k], types[node.inputs[k]]) for k in weights if k < len(args)]
        return [normed(f, norm, s, rank, rank - 1, scales)]

    return lower


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
    "SkipLayerNormalization": _lower_skip("lnorm", (2, 3), 4),
    "SkipSimplifiedLayerNormalization": _lower_skip("rmsnorm", (2,), None),
    "FusedMatMul": _lower_fused_matmul,
}
