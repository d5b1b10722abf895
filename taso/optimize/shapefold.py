"""Shape arithmetic folded over partly static shapes.

TorchScript exports compute every Reshape target at run time: ``x.view(B, H // 7, 7, W // 7, 7, C)`` becomes
Shape, Gather, Div, Cast, Unsqueeze and Concat nodes (Swin-T: 2,600 of the 3,165 nodes left after
`precompute`). With the batch dim dynamic no tensor has a static shape, so `precompute.fold_static_shapes` folds
none of them, and onnxruntime's ReshapeFusion only targets made of Shape-Gather-Unsqueeze pieces and constants;
but H, W and C are static, and only the entries that read B need the run. Each small integer tensor here gets
an abstract value, one element per entry: a known int, a dim param (symbolic: the same size wherever it
appears), or unknown. A value whose elements are all known becomes an initializer; a Reshape target left with
dims it can copy (0) or infer (-1) becomes a constant; the weight-only subgraphs that leaves (a Range or
ConstantOfShape of folded sizes) are computed by `precompute`; shapes are re-inferred, which makes more dims
static, and the next round folds what that makes known. An element is known only where the IR's type says an
int, never a dim param, so the folded model computes the same at every size of its dynamic dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from taso import onnx as onnx_io
from taso.execute.precompute import precompute
from taso.ir import Graph, Kind, Node, TensorType, WeightData, eliminate_dead, fresh_names, lint
from taso.ops.select import gather_indices, slice_ranges
from taso.optimize.nops import drop_nops

Elem = int | str | None
"""One entry of a shape value: a known size, a dim param, or unknown."""
Abstract = tuple[tuple[int, ...], tuple[Elem, ...]]
"""A value's shape (rank 0 or 1) and its elements."""

MAX_ELEMENTS = 64
"""The longest value followed: shape arithmetic is short; longer integer tensors are data."""
ROUNDS = 8
"""Fold-and-re-infer rounds at most; each costs a shape inference of the whole model (Swin-T's settles in 4)."""
INTEGER = frozenset({"int64", "int32", "bool"})
"""The dtypes followed; a bool element is 0 or 1 (torch's ``expand(-1)`` tests each entry against -1)."""


def fold_shapes(g: Graph) -> tuple[Graph, int]:
    """``g`` with its shape arithmetic folded wherever the dims it reads are static, the nodes that then
    hand on their input dropped (`taso.nops`), and the types the values name (`_named_types`); returns
    the graph and how many nodes that removed (``g`` itself where it changed nothing). Repeats to a fixpoint:
    each round's folds make more shapes static."""
    g0 = g
    for _ in range(ROUNDS):
        values = abstract_values(g)
        folded = _constant_targets(_fold_known(g, values), values)
        folded = drop_nops(precompute(folded)[0])  # zero pads and whole crops, once their sizes are folded
        named = _named_types(folded, values)  # all of them: inference would forget an earlier round's
        if folded is g and all(g.types.get(v) == t for v, t in named.items()):
            break
        g = onnx_io.reinfer(folded, known=named)
    return (g0, 0) if g is g0 else (_own_dims(g, g0), len(g0.nodes) - len(g.nodes))


def _named_types(g: Graph, values: Mapping[str, Abstract]) -> dict[str, TensorType]:
    """The types inference left unnamed that the abstract values name: a ``Range(0, d, 1)`` over a dim ``d``
    is ``[d]``, and an Expand to a computed shape is the broadcast of its input to that shape's value. onnx
    sizes a Range or Expand only from constants, so GPT-2's positions were ``[unk__0]``, and T5's attention
    mask (TorchScript) ``[unk__0, unk__1, unk__2, unk__3]``, and so was every tensor they reach: the sequence
    dims of the activations they meet could not be told equal, nor the reshapes of those folded."""
    named = {}
    for n in g.nodes:
        t = g.types.get(n.outputs[0]) if n.outputs else None
        if n.domain or t is None:
            continue
        shape = None
        if n.op == "Range" and len(n.inputs) == 3:
            start, limit, delta = (values.get(i) for i in n.inputs)
            if start and delta and limit and start[1] == (0,) and delta[1] == (1,) and len(limit[1]) == 1:
                shape = (limit[1][0],) if isinstance(limit[1][0], str) else None
        elif n.op == "Expand" and len(n.inputs) == 2:
            source, target = g.types.get(n.inputs[0]), values.get(n.inputs[1])
            if source is not None and source.shape is not None and target is not None and None not in target[1]:
                shape = _expanded(source.shape, target[1])
        if shape is not None:
            named[n.outputs[0]] = TensorType(t.dtype, shape)
    return named


def _expanded(shape: tuple, target: tuple[int | str, ...]) -> tuple | None:
    """Expand's output shape, ``shape`` broadcast with ``target``, where the dims decide it at every size: a
    dim broadcast against 1 is itself, and two that are not 1 must be equal (a size beside a dim param is that
    size wherever the Expand runs); two different dim params may be 1 either of them, and decide nothing."""
    rank = max(len(shape), len(target))
    a = (1,) * (rank - len(shape)) + tuple(shape)
    b = (1,) * (rank - len(target)) + tuple(target)
    out: list[int | str] = []
    for x, y in zip(a, b):
        if x == 1 or x == y:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, str) or isinstance(x, str) and isinstance(y, int):
            out.append(x if isinstance(x, int) else y)
        else:
            return None
    return None if None in out else tuple(out)


def _own_dims(g: Graph, before: Graph) -> Graph:
    """``g`` with the dims shape inference named afresh (``unk__6``) renamed apart from ``before``'s: inference
    numbers them anew, so ``unk__6`` of the folded graph is another dim than the original's, and a cost model
    that sized the original's dims by name costs the folded graph at other dims' sizes (Swin-T's MatMuls at
    2.8 ms where the same MatMuls cost 1.75 ms in the original). Dims the model declares on its inputs and
    outputs keep their names."""
    declared = {d for v in (*before.inputs, *before.outputs) for d in _params(before.types.get(v))}
    taken = {d for t in (*before.types.values(), *g.types.values()) for d in _params(t)}
    fresh = fresh_names(taken, "folded__")
    names: dict[str, str] = {}
    types = {}
    for v, t in g.types.items():
        if any(d not in declared for d in _params(t)):
            shape = tuple(
                names.setdefault(d, next(fresh)) if isinstance(d, str) and d not in declared else d for d in t.shape
            )  # type: ignore[union-attr]
            t = TensorType(t.dtype, shape)
        types[v] = t
    return replace(g, types=types)


def _params(t: TensorType | None) -> list[str]:
    return [d for d in t.shape if isinstance(d, str)] if t is not None and t.shape is not None else []


def _fold_known(g: Graph, values: Mapping[str, Abstract]) -> Graph:
    """``g`` with each node whose outputs are all known replaced by initializers."""
    kinds = g.kinds
    data, types, folded = dict(g.data), dict(g.types), []
    drop: set[int] = set()
    for n in g.nodes:
        outs = [o for o in n.outputs if o]
        if not outs or any(kinds.get(o) is not Kind.ACTIVATION for o in outs):
            continue  # weight-only nodes are precompute's
        known = [values.get(o) for o in outs]
        if not all(v is not None and all(isinstance(e, int) for e in v[1]) for v in known):
            continue
        for o, (shape, elems) in zip(outs, known):  # type: ignore[misc]
            value = np.array(elems, np.dtype(g.types[o].dtype)).reshape(shape)
            data[o] = WeightData(value)
            types[o] = TensorType(value.dtype.name, value.shape)
            folded.append(o)
        drop.add(id(n))
    if not drop:
        return g
    nodes = tuple(n for n in g.nodes if id(n) not in drop)
    return lint(eliminate_dead(replace(g, nodes=nodes, weights=(*g.weights, *folded), data=data, types=types)))


def _constant_targets(g: Graph, values: Mapping[str, Abstract]) -> Graph:
    """``g`` with each Reshape target that is still computed replaced by a constant where its unknown entries
    can be spelled: a dim param equal to the input's dim at that index as 0 (copy it), and one other unknown as
    -1 (inferred from the size) where every other entry is a known nonzero size. The -1 is what the computed
    entry was wherever the original reshape succeeds, except on an empty tensor: beside a 0 onnxruntime cannot
    infer it (batch 0: [0, -1, 3] fails where [0, 2, 3] ran), so a copied or zero entry rules -1 out. The
    computation of the target is then dead (Swin-T's window reshapes all read the batch). A Reshape with
    ``allowzero`` (the dynamo exporter's) is written without it where its target has no 0 size, the one entry
    whose meaning the flag changes."""
    fresh = fresh_names(g.values(), "shapefold_")
    nodes, data, types, weights = [], dict(g.data), dict(g.types), list(g.weights)
    for n in g.nodes:
        target = _target(n, g, values)
        if target is not None:
            name = next(fresh)
            data[name] = WeightData(np.array(target, np.int64))
            types[name] = TensorType("int64", (len(target),))
            weights.append(name)
            n = replace(n, inputs=(n.inputs[0], name), attrs=n.attrs if n.is_opaque else (("allowzero", 0),))
        nodes.append(n)
    if len(weights) == len(g.weights):
        return g
    return lint(eliminate_dead(replace(g, nodes=tuple(nodes), weights=tuple(weights), data=data, types=types)))


def _target(n: Node, g: Graph, values: Mapping[str, Abstract]) -> list[int] | None:
    """The constant that `_constant_targets` puts in for Reshape ``n``'s computed target, if there is one."""
    if n.op != "Reshape" or n.domain or len(n.inputs) != 2 or n.inputs[1] in g.data:
        return None
    value = values.get(n.inputs[1])
    if value is None or len(value[0]) != 1 or g.types[n.inputs[1]].dtype != "int64":
        return None
    if onnx_io.int_attrs(n).get("allowzero") and (n.is_opaque or 0 in value[1]):
        return None  # its 0 is a size, which the constant's 0 would not be
    dims = (g.types[n.inputs[0]].shape if n.inputs[0] in g.types else None) or ()
    target: list[int | None] = []
    for k, e in enumerate(value[1]):
        if isinstance(e, int):
            target.append(e)
        else:
            target.append(0 if isinstance(e, str) and k < len(dims) and dims[k] == e else None)
    if target.count(None) > 1 or (None in target and (0 in target or -1 in target)):
        return None  # a -1 the original has is its own: beside a 0 it fails on an empty tensor there too
    if 0 in target and -1 in target:  # the original's -1 beside a size (allowzero) ran on an empty tensor
        return _sized(target, dims)
    return [-1 if e is None else e for e in target]  # type: ignore[misc]


def _sized(target: list[int | None], dims: tuple) -> list[int] | None:
    """``target`` with its -1 spelt as the size it stands for, where the dims it does not copy are static:
    beside a copied 0, onnxruntime cannot infer a -1 on an empty tensor (GPT-2's ``[0, 0, -1, 64]`` failed at
    batch 0, where the exporter's ``[batch, seq, -1, 64]`` with ``allowzero`` ran). None where the -1 stands for
    0: written as 0 it would copy its input's dim (an input ``[N, 3, 0]`` to ``[N, -1]`` came out ``[0, 0]``)."""
    copied = {k for k, e in enumerate(target) if e == 0}
    rest = [d for k, d in enumerate(dims) if k not in copied]
    sizes = [e for e in target if e not in (0, -1)]
    if copied - set(range(len(dims))) or not all(isinstance(d, int) for d in rest) or 0 in sizes:
        return None
    whole, part = math.prod(rest), math.prod(sizes)  # type: ignore[arg-type]
    if whole % part or not whole:
        return None
    return [whole // part if e == -1 else e for e in target]  # type: ignore[misc]


def abstract_values(g: Graph) -> dict[str, Abstract]:
    """The abstract value of every small integer tensor of rank 0 or 1 that ``g`` holds or computes."""
    values: dict[str, Abstract] = {}
    for w in g.weights:
        t = g.types.get(w)
        if w in g.data and t is not None and t.dtype in INTEGER and t.is_static and len(t.shape) <= 1:  # type: ignore[arg-type]
            array = g.data[w].array
            if array.size <= MAX_ELEMENTS:
                values[w] = (array.shape, tuple(int(e) for e in array.ravel()))
    for n in g.nodes:
        rule = _RULES.get(n.op)
        if rule is None or n.domain or n.implicit or len(n.outputs) != 1:
            continue
        out = n.outputs[0]
        t = g.types.get(out)
        if t is None or t.dtype not in INTEGER:
            continue
        try:
            value = rule(n, g, values)
        except (IndexError, ValueError, ZeroDivisionError):  # malformed here: onnxruntime will say so, not us
            value = None
        if value is not None and len(value[1]) <= MAX_ELEMENTS and _fits(value, t):
            values[out] = value
    return values


def _fits(value: Abstract, t: TensorType) -> bool:
    """Whether ``value``'s shape agrees with the IR's type: a disagreement means a rule misread the node."""
    return t.shape is None or (
        len(t.shape) == len(value[0]) and all(not isinstance(d, int) or d == s for d, s in zip(t.shape, value[0]))
    )


def _input(n: Node, i: int, values: Mapping[str, Abstract]) -> Abstract | None:
    return values.get(n.inputs[i]) if i < len(n.inputs) and n.inputs[i] else None


def _known(n: Node, i: int, values: Mapping[str, Abstract]) -> list[int] | None:
    """Input ``i``'s elements if all are known ints."""
    v = _input(n, i, values)
    if v is None or not all(isinstance(e, int) for e in v[1]):
        return None
    return list(v[1])  # type: ignore[arg-type]


def _shape(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    t = g.types.get(n.inputs[0])
    if t is None or t.shape is None:
        return None
    attrs, rank = onnx_io.int_attrs(n), len(t.shape)
    start, end = int(attrs.get("start", 0)), int(attrs.get("end", rank))  # type: ignore[call-overload]
    dims = [d if isinstance(d, int | str) else None for d in t.shape][slice(*_clamp(start, end, rank))]
    return (len(dims),), tuple(dims)


def _clamp(start: int, end: int, rank: int) -> tuple[int, int]:
    """Shape's start and end as the spec clamps them."""
    start, end = start + rank if start < 0 else start, end + rank if end < 0 else end
    return min(max(start, 0), rank), min(max(end, 0), rank)


def _size(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    t = g.types.get(n.inputs[0])
    if t is None or not t.is_static:
        return None
    return (), (math.prod(t.shape),)  # type: ignore[arg-type]


def _same(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    """Identity, and a Cast between integer types (shape values are small: no wrap-around); a Cast to bool
    is whether an entry is nonzero (a dim param may be 0: unknown)."""
    v = _input(n, 0, values)
    if v is None or n.op != "Cast" or g.types[n.outputs[0]].dtype != "bool":
        return v
    return v[0], tuple(int(e != 0) if isinstance(e, int) else None for e in v[1])


def _gather(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    data, indices = _input(n, 0, values), _input(n, 1, values)
    idx = _known(n, 1, values)
    if not n.is_opaque:  # the catalogue's, its indices an attribute
        shape, idx = gather_indices(n.attr)
        indices = (shape, tuple(idx))
    if (
        data is None
        or indices is None
        or idx is None
        or len(data[0]) != 1
        or int(onnx_io.int_attrs(n).get("axis", 0)) not in (0, -1)
    ):  # type: ignore[call-overload]
        return None
    size = data[0][0]
    if not all(-size <= i < size for i in idx):
        return None
    return indices[0], tuple(data[1][i] for i in idx)


def _slice(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    data, starts, ends = _input(n, 0, values), _known(n, 1, values), _known(n, 2, values)
    axes = _known(n, 3, values) if len(n.inputs) > 3 and n.inputs[3] else [0]
    steps = _known(n, 4, values) if len(n.inputs) > 4 and n.inputs[4] else [1]
    if not n.is_opaque:  # the catalogue's, its ranges attributes
        starts, ends, axes, steps = slice_ranges(n.attr)
    if data is None or len(data[0]) != 1 or None in (starts, ends, axes, steps):
        return None
    if len(starts) != 1 or len(ends) != 1 or axes not in ([0], [-1]) or steps == [0] or len(steps) != 1:  # type: ignore[arg-type]
        return None
    elems = data[1][slice(starts[0], ends[0], steps[0])]  # type: ignore[index]  # Python clamps as the spec does
    return (len(elems),), elems


def _concat(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    parts = [values.get(i) for i in n.inputs]
    if any(p is None or len(p[0]) != 1 for p in parts):
        return None
    elems = tuple(e for p in parts for e in p[1])  # type: ignore[index]
    return (len(elems),), elems


def _unsqueeze(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    data = _input(n, 0, values)
    axes = _known(n, 1, values) if len(n.inputs) > 1 else list(onnx_io.int_attrs(n).get("axes", ()))  # type: ignore[call-overload]
    if data is None or data[0] != () or axes not in ([0], [-1]):
        return None
    return (1,), data[1]


def _squeeze(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    data = _input(n, 0, values)
    axes = _known(n, 1, values) if len(n.inputs) > 1 and n.inputs[1] else [0]
    if data is None or data[0] != (1,) or axes not in ([0], [-1]):
        return None
    return (), data[1]


def _trunc_div(a: int, b: int) -> int:
    """ONNX's Div on integers truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _mod(fmod: bool) -> Callable[[int, int], int]:
    """Mod's result takes the divisor's sign (Python's %), or the dividend's with ``fmod``."""
    return (lambda a, b: int(math.fmod(a, b))) if fmod else (lambda a, b: a % b)


def _arithmetic(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    if n.op == "Mod":
        op = _mod(bool(onnx_io.int_attrs(n).get("fmod", 0)))
    else:
        op = {"Add": int.__add__, "Sub": int.__sub__, "Mul": int.__mul__, "Div": _trunc_div}[n.op]
    divides = n.op in ("Div", "Mod")
    return _elementwise(
        n, values, lambda x, y: op(x, y) if isinstance(x, int) and isinstance(y, int) and (y or not divides) else None
    )


def _equal(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    """Equal as 0 or 1 where the entries decide it: a dim param equals itself, and never a negative int (a
    size is at least 0), which is how torch's ``expand(-1)`` keeps a dim."""

    def eq(x: Elem, y: Elem) -> Elem:
        if isinstance(x, int) and isinstance(y, int) or x == y and x is not None:
            return int(x == y)
        size = (
            x if isinstance(x, int) and isinstance(y, str) else y if isinstance(y, int) and isinstance(x, str) else None
        )
        return 0 if size is not None and size < 0 else None

    return _elementwise(n, values, eq)


def _where(n: Node, g: Graph, values: Mapping[str, Abstract]) -> Abstract | None:
    return _elementwise(n, values, lambda c, x, y: None if not isinstance(c, int) else x if c else y)


def _elementwise(n: Node, values: Mapping[str, Abstract], op: Callable[..., Elem]) -> Abstract | None:
    """``op`` on each entry of the inputs, where they broadcast as shape values do: all of one shape, or of
    one element against the rest."""
    parts = [values.get(i) if i else None for i in n.inputs]
    if not parts or any(p is None for p in parts):
        return None
    many = {p[0] for p in parts if len(p[1]) != 1}  # type: ignore[index]
    if len(many) > 1:
        return None
    shape = many.pop() if many else max((p[0] for p in parts), key=len)  # type: ignore[index]
    if any(len(p[0]) > len(shape) for p in parts):  # type: ignore[index]
        return None
    count = math.prod(shape)
    columns = [p[1] * count if len(p[1]) == 1 else p[1] for p in parts]  # type: ignore[index]
    return shape, tuple(op(*entries) for entries in zip(*columns))


_RULES: dict[str, Callable[[Node, Graph, Mapping[str, Abstract]], Abstract | None]] = {
    "Shape": _shape,
    "Size": _size,
    "Identity": _same,
    "Cast": _same,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Add": _arithmetic,
    "Sub": _arithmetic,
    "Mul": _arithmetic,
    "Div": _arithmetic,
    "Mod": _arithmetic,
    "Equal": _equal,
    "Where": _where,
}
"""How each op computes its abstract value from its inputs'; an op not here gives no value."""
