"""MultiHeadAttention (taso/ops/attention.py) lowered onto the symbols of its decomposition, as an exporter spells
it, so that a rule "spelled-out attention = MultiHeadAttention" is proved from the axioms of those symbols:

    heads(x)  = tp4(reshape4(x, (B, S, N, H)), perm=(0, 2, 1, 3))     the query's heads split from its last axis
    scores    = bmm(smul(heads(q), r), smul(tp4(k, perm=(0, 1, 3, 2)), r))    k split already: (B, N, L, H)
    biased    = add(scores, bias)                                       the bias spread as Add spreads it
    out       = reshape3(tp4(bmm(softmax(biased, axis=3), v), perm=(0, 2, 1, 3)), (B, S, N*H))

where r = ``num`` of sqrt(scale) rounded to float32, each factor left out where scale is 1: the scale as
PyTorch's scaled_dot_product_attention applies it, to Q and K each (the form of every export in the corpus that
scales at all). The attribute is a float32, as ONNX stores it, so a rule writes the exporter's constant c as
float32(c * c), whose root rounds back to c: r * r is the scale to within float32's rounding, and the op's numpy
and field semantics take it as r * r too (taso/ops/attention.py), so the float64 check and the fingerprint agree
with the proof (onnxruntime's float32 kernel differs within its rounding; each application is checked). Only a
positive, explicit scale is lowered: the default 1/sqrt(H) is a number of a symbolic size, which no term names.
Only the split key and value are lowered (the form a rewrite hands onnxruntime; N is then the key's axis 1,
num_heads 0 or equal to it).

What each application states of its operands is what onnxruntime's kernel checks (the target is type-checked
when it is built): one batch, the key and value of one shape, the query's width N*H.
"""

import math

import numpy as np

from taso.ir import TensorType
from taso.verify import D, Unsupported, attr_int, broadcasts, same_shape, spread


def _biased(f, scores, ts, bias, tb):
    """``scores`` (of type ``ts``) plus ``bias`` (of type ``tb``) as Add lowers them (specs/add.py)."""
    if tb.shape == ts.shape:
        f.fact(*same_shape(scores, bias, 4))
        return f.add(scores, bias)
    if broadcasts(ts, tb):
        return f.add(scores, spread(f, bias, tb, scores, ts))
    raise Unsupported("MultiHeadAttention's bias broadcast otherwise than along size-1 axes")


def _lower_attention(node, args, types, f):
    q, k, v = args[:3]
    tq, tk, tv = (types[x] for x in node.inputs[:3])
    if tk.rank != 4 or tv.rank != 4:
        raise Unsupported("MultiHeadAttention with a key and value not split into heads")
    scale = float(node.attr["scale"])
    if not scale > 0.0:
        raise Unsupported("MultiHeadAttention's default scale 1/sqrt(H), or a negative one (a rule writes its own)")
    heads, head = D(k, 1), D(k, 3)
    f.fact(*(D(v, i) == D(k, i) for i in range(4)), D(k, 0) == D(q, 0), D(q, 2) == heads * head)
    if node.attr["num_heads"]:
        f.fact(heads == int(node.attr["num_heads"]))
    split = f.reshape4(q, shape=(D(q, 0), D(q, 1), heads, head))
    qh, kt = f.tp4(split, perm=(0, 2, 1, 3)), f.tp4(k, perm=(0, 1, 3, 2))
    if scale != 1.0:
        root = f.num(value=attr_int(float(np.float32(math.sqrt(scale)))))
        qh, kt = f.smul(qh, root), f.smul(kt, root)
    scores = f.bmm(qh, kt)
    if len(args) > 3:
        ts = TensorType(tq.dtype, (tq.shape[0], tk.shape[1], tq.shape[1], tk.shape[2]))
        scores = _biased(f, scores, ts, args[3], types[node.inputs[3]])
    out = f.bmm(f.softmax(scores, axis=3), v)
    return [f.reshape3(f.tp4(out, perm=(0, 2, 1, 3)), shape=(D(q, 0), D(q, 1), heads * D(v, 3)))]


LOWER = {"MultiHeadAttention": _lower_attention}
