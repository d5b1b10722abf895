"""onnxruntime's MultiHeadAttention (com.microsoft, issue 48): softmax(Q K^T * scale) V per head, the attention
every transformer spells out in 10-12 ops, which onnxruntime's transformers optimizer fuses and subst did not.

What is modelled, as onnxruntime 1.31's ContribOperators.md defines it: a query (B, S, N*H) whose heads are split
from its last axis (`num_heads` of them), and a key and value either of the same form, (B, L, N*H) and
(B, L, N*Hv), or already split into heads, both (B, N, L, H) ("BNSH", its cross-attention form,
which its CPU and CUDA kernels both take); the output (B, S, N*Hv), the heads merged back. ``scale`` 0 is its
default, 1/sqrt(H). ``num_heads`` 0 is the split key's N: import writes a split key's count so, and export writes
it back, so a rewrite that hands onnxruntime split heads holds for any number of them. The additive attention
bias (an encoder's mask added to the scores, T5's position bias) is modelled: onnxruntime's input 5,
(B or 1, N or 1, S, L), the IR's input 3 (`OpDef.onnx_inputs`). Left opaque: the packed QKV and KV forms, the
projection bias, the key padding mask, past and present key/value, and the causal (``unidirectional``) form.

Why the BNSH key is modelled: exporters transpose K per head before the product (Transpose(0, 2, 3, 1) of the
split key), so the key a rewrite hands onnxruntime is one per-head transpose of a value the model already has.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import TensorType
from taso.ops import field as ff
from taso.ops import normalisation
from taso.ops.fused import CONTRIB, floats_only
from taso.ops.opdef import Arrays, Attrs, Export, OpDef, OpError, register
from taso.ops.shapes import same_dtype
from taso.ops.traits import ORT_ONLY


def _head_count(attrs: Attrs, key: TensorType | np.ndarray) -> int:
    """N: the attribute, or the split key's axis 1 where it is 0."""
    given = int(attrs["num_heads"])  # type: ignore[arg-type]
    return given or int(key.shape[1])  # type: ignore[index, arg-type]


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    """(B, L, N*H) split into (B, N, L, H); a 4-D input is in that form already."""
    if x.ndim == 4:
        return x
    b, length, width = x.shape
    return x.reshape(b, length, n, width // n).transpose(0, 2, 1, 3)


def _merged(x: np.ndarray) -> np.ndarray:
    """(B, N, S, Hv) back to (B, S, N*Hv)."""
    b, n, s, h = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, n * h)


def _root(attrs: Attrs, head: int) -> float:
    """r with r * r the scale: the kernel's scale is a float32 s (the attribute, or 1/sqrt(H) where it is 0, its
    default), which exporters apply as a constant c = 64^-1/4 to Q and to K each, and s = float32(c * c) would
    differ from c * c in its last bit. Taken as r = float32(sqrt(s)), which is c again, the op, the spelled-out
    attention and the spec (specs/attention.py) compute one number in float64 and over Z_p; onnxruntime's own
    float32 product by s differs from it within float32's rounding."""
    given = float(attrs["scale"])  # type: ignore[arg-type]
    return float(np.float32(np.sqrt(given if given else 1 / np.sqrt(head))))


def _attention(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    heads = _head_count(attrs, xs[1])
    q, k, v = (_heads(x.astype(np.float64), heads) for x in xs[:3])
    r = _root(attrs, q.shape[-1])
    scores = (q * r) @ (k * r).transpose(0, 1, 3, 2) + (xs[3] if len(xs) > 3 else 0)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (_merged(e / e.sum(axis=-1, keepdims=True) @ v).astype(xs[0].dtype),)


def _scores(q: np.ndarray, k: np.ndarray, bias: Sequence[np.ndarray], attrs: Attrs, z: ff.Ring) -> np.ndarray:
    """Q K^T exactly, times the residue of r twice (`_root`: as a spelled-out attention's constant applied to Q
    and to K is read), plus the bias where there is one, in ``z``'s ring."""
    r = z.constant(_root(attrs, q.shape[-1]))
    scores = np.matmul(q, k.transpose(0, 1, 3, 2)) % z.m * r % z.m * r % z.m
    return (scores + bias[0]) % z.m if bias else scores


def _attention_field(xs: Arrays, attrs: Attrs, n: int, z: ff.Ring) -> tuple[np.ndarray, ...]:
    """The decomposition's fingerprint: the scaled scores (`_scores`), Softmax's own field rule over the last axis
    (its Z_p call reads the scores' Z_q component, made from the inputs' as the decomposition makes it), the
    product with V exactly."""
    heads = _head_count(attrs, xs[1])
    q, k, v = (_heads(x, heads) for x in xs[:3])
    ring = z
    if z.partner is not None:
        pq, pk, _ = (_heads(x, heads) for x in z.partner[:3])
        ring = ff.Ring(int(z), z.m, (_scores(pq, pk, z.partner[3:], attrs, ff.Ring(int(z), ff.Q)),))
    assert normalisation.SOFTMAX.field is not None
    (p,) = normalisation.SOFTMAX.field([_scores(q, k, xs[3:], attrs, z)], {"axis": 3}, 1, ring)  # type: ignore[arg-type]
    return (_merged(np.matmul(p, v) % z.m),)


def _attention_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    """Query (B, S, N*H); key and value (B, L, N*H) and (B, L, N*Hv), or both (B, N, L, H); the bias
    (B or 1, N or 1, S, L)."""
    q, k, v = types[:3]
    dtype = same_dtype(types)
    if q.shape is None or k.shape is None or v.shape is None:
        raise OpError("MultiHeadAttention of an input of unknown rank")
    if q.rank != 3 or k.rank not in (3, 4) or v.rank != k.rank:
        raise OpError(f"MultiHeadAttention needs a 3-D query and 3-D or 4-D key and value, got {q}, {k}, {v}")
    if not attrs["num_heads"] and (k.rank != 4 or not isinstance(k.shape[1], int)):
        raise OpError("MultiHeadAttention with num_heads 0 needs a key split into a known number of heads")
    heads = _head_count(attrs, k)
    if heads < 1 or (isinstance(q.shape[2], int) and q.shape[2] % heads):
        raise OpError(f"MultiHeadAttention's {heads} heads do not divide the query's width {q.shape[2]}")
    head = q.shape[2] // heads if isinstance(q.shape[2], int) else None
    if k.rank == 4:
        fits = [((k.shape[1], k.shape[3]), (heads, head)), (v.shape, k.shape)]  # onnxruntime: one shape
        width = heads * v.shape[3] if isinstance(v.shape[3], int) else None
    else:
        fits = [((k.shape[2],), (q.shape[2],)), (v.shape[:2], k.shape[:2])]
        width = v.shape[2]
    fits.append(((k.shape[0],), (q.shape[0],)))
    if len(types) > 3:
        length = k.shape[2] if k.rank == 4 else k.shape[1]
        bias = types[3].shape
        if bias is None or len(bias) != 4:
            raise OpError(f"MultiHeadAttention's bias must be (B or 1, N or 1, S, L), got {types[3]}")
        fits.append((bias[2:], (q.shape[1], length)))
        fits += [((got,), (want,)) for got, want in zip(bias[:2], (q.shape[0], heads)) if got != 1]
    if any(isinstance(a, int) and isinstance(b, int) and a != b for got, want in fits for a, b in zip(got, want)):
        raise OpError(f"MultiHeadAttention with {heads} heads of query {q}, key {k}, value {v}")
    if isinstance(width, int) and width % heads:
        raise OpError(f"MultiHeadAttention's {heads} heads do not divide the value's width {width}")
    return (TensorType(dtype, (q.shape[0], q.shape[1], width)),)


def _attention_normalize(attrs: dict, types: Sequence[TensorType | None], opset: int) -> dict | str:
    """A split key's head count as 0 (one IR node whatever the count); the causal form is not modelled; the
    mask's fill value says nothing without a mask (none is modelled)."""
    if attrs.pop("unidirectional", 0):
        return "MultiHeadAttention with unidirectional=1 (causal)"
    attrs.pop("mask_filter_value", None)
    key = types[1] if len(types) > 1 else None
    split = key is not None and key.rank == 4 and key.shape is not None and isinstance(key.shape[1], int)
    if split and attrs.get("num_heads", 0) in (0, key.shape[1]):  # type: ignore[union-attr]
        attrs["num_heads"] = 0
    elif not attrs.get("num_heads"):
        return "MultiHeadAttention without num_heads (and a key not split into a known number of heads)"
    return floats_only(attrs, types, opset)


def _attention_export(attrs: Attrs, in_types: Sequence[TensorType]) -> Export:
    """onnxruntime's node: num_heads always written (its schema requires it), scale where it is not 0."""
    written = {"num_heads": _head_count(attrs, in_types[1])}
    return Export("MultiHeadAttention", written | ({"scale": attrs["scale"]} if attrs["scale"] else {}))


MULTI_HEAD_ATTENTION = register(
    OpDef(
        "MultiHeadAttention",
        (3, 4),
        {"num_heads": 0, "scale": 0.0},
        _attention_shape,
        _attention,
        "softmax(Q K^T * scale + bias) V per head, the heads split from the query's last axis (num_heads of them) "
        "and merged back; key and value as (B, L, N*H) or both split, (B, N, L, H). scale 0 is 1/sqrt(H), "
        "num_heads 0 the split key's N.",
        domain=CONTRIB,
        min_opset=1,
        normalize=_attention_normalize,
        export=_attention_export,
        onnx_inputs=(0, 1, 2, 5),
        field=_attention_field,
        tags=frozenset({ORT_ONLY, ff.EXPONENTIAL}),
    )
)
