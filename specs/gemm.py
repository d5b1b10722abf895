"""Gemm: ``alpha * op(A) @ op(B) + beta * C``, lowered onto the symbols it is made of, so that every mm, tr, add
and bias axiom applies to it and no Gemm axiom is needed: op is ``tr`` where transA/transB is set, a factor other
than 1 is ``scale`` of its float, and C is added as an Add of the product would add it (same shape, one value
per column as a ``bias``, or along size-1 axes as a ``bcast``). Gemm with a bias is what MatMul + Add becomes,
and Gemm(transB=1) what a Transpose of the weight feeding a MatMul becomes."""

import struct

from taso.ir import TensorType
from taso.verify import (
    D,
    R,
    Symbol,
    Unsupported,
    attr_int,
    broadcasts,
    channel_values,
    per_channel,
    same_shape,
    spread,
)


def _scale(attrs, xs):
    """``scale``'s semantics: the tensor times the float whose bits are its attribute."""
    return xs[0] * struct.unpack("<d", struct.pack("<q", attrs["factor"]))[0]


SYMBOLS = [Symbol("scale", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), attrs=("factor",), compute=_scale)]


def _scaled(f, x, factor):
    """``x`` times ``factor``: itself for 1 (Gemm's default), else a ``scale`` of it."""
    return x if float(factor) == 1.0 else f.scale(x, factor=attr_int(float(factor)))


def _flag(node, name):
    v = node.attr[name]
    if v not in (0, 1) or isinstance(v, bool | float):
        raise Unsupported(f"Gemm with {name}={v!r} (only 0 and 1 are modelled)")
    return v


def _lower(node, args, types, f):
    ta, tb = (types[v] for v in node.inputs[:2])  # 2-D: the catalogue refuses others
    trans_a, trans_b = _flag(node, "transA"), _flag(node, "transB")
    a = f.tr(args[0]) if trans_a else args[0]
    b = f.tr(args[1]) if trans_b else args[1]
    f.fact(D(a, 1) == D(b, 0))
    y = _scaled(f, f.mm(a, b), node.attr["alpha"])
    if len(args) == 2:
        return [y]
    ty = TensorType(ta.dtype, (ta.shape[trans_a], tb.shape[1 - trans_b]))
    tc = types[node.inputs[2]]
    c = _scaled(f, args[2], node.attr["beta"])
    if tc.shape == ty.shape:
        f.fact(*same_shape(c, y, 2))
        return [f.add(y, c)]
    if per_channel(ty, tc):
        return [f.add(y, f.bias(channel_values(f, c, tc, y), y))]
    if broadcasts(ty, tc):
        return [f.add(y, spread(f, c, tc, y, ty))]
    raise Unsupported("Gemm whose C broadcasts other than per column or along size-1 axes")


LOWER = {"Gemm": _lower}
