"""Integer and bool tensors known by their content.

Each integer or bool tensor gets a `Content`: its length along each axis (a constant plus dims, where known) and
its elements as ``offset + sum(coef * index)``, where that holds exactly. A Range seeds it; a splat has no coefs.
transformers' masks as the dynamo exporter writes them are made of such tensors: positions ``arange(seq)``, the
test for packed sequences built on their steps, masks of positions against a bound. What the content says
everywhere (a test that is all-true) is what `taso.optimize.idle` drops ops by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from taso import onnx as onnx_io
from taso.ir import Graph, Node, TensorType
from taso.ops.select import slice_ranges
from taso.optimize.shapefold import Abstract, abstract_values

Length = tuple[int, tuple[tuple[str, int], ...]]
"""A length: a constant plus a sum of dims with their counts, ``seq + 1`` as ``(1, (("seq", 1),))``."""
ONE: Length = (1, ())
INTEGERS = frozenset({"int64", "int32", "bool"})
"""The dtypes followed: exact arithmetic, no rounding."""
SPLAT_ELEMENTS = 2**16
"""The largest initializer read for a splat: a mask's all-true constant is small."""


@dataclass(frozen=True)
class Content:
    """A tensor's lengths (None where not known) and its elements, ``offset + sum(coefs[k] * index[k])``."""

    lengths: tuple[Length | None, ...]
    coefs: tuple[int, ...]
    offset: int
    assumes: frozenset[str] = frozenset()
    """Dims this holds for only at sizes of at least 1 (``x[:1]`` is one long only then): a rewrite may
    use it where an empty tensor is all the dims at 0 could make (`taso.optimize.idle`)."""

    @property
    def splat(self) -> bool:
        return not any(self.coefs)


# --- contents ------------------------------------------------------------------------------------------------


def contents(g: Graph) -> dict[str, Content]:
    """The content of every integer or bool tensor ``g`` holds or computes, where it is known."""
    values = Scalars.of(g)
    known: dict[str, Content] = {}
    for w in g.weights:
        t = g.types.get(w)
        if w in g.data and t is not None and t.dtype in INTEGERS and t.shape is not None:
            array = g.data[w].array
            if 0 < array.size <= SPLAT_ELEMENTS and (array == array.flat[0]).all():
                known[w] = _norm(Content(_type_lengths(t), (0,) * array.ndim, int(array.flat[0])))
    for n in g.nodes:
        rule = _RULES.get(n.op)
        t = g.types.get(n.outputs[0]) if n.outputs else None
        if rule is None or n.domain or len(n.outputs) != 1 or t is None or t.dtype not in INTEGERS or t.shape is None:
            continue
        try:
            c = rule(n, t, [known.get(i) for i in n.inputs], values)
        except (IndexError, ValueError):  # malformed here: onnxruntime will say so, not us
            c = None
        if c is not None and len(c.coefs) == len(t.shape):
            lengths = tuple(a if a is not None else b for a, b in zip(c.lengths, _type_lengths(t)))
            assumes = c.assumes.union(*(known[i].assumes for i in n.inputs if i in known))
            known[n.outputs[0]] = _norm(replace(c, lengths=lengths, assumes=assumes))
    return known


def _type_lengths(t: TensorType) -> tuple[Length | None, ...]:
    return tuple(_length(d) for d in t.shape)  # type: ignore[union-attr]


def _length(d: int | str | None) -> Length | None:
    if isinstance(d, int):
        return (d, ())
    return (0, ((d, 1),)) if isinstance(d, str) else None


def _norm(c: Content) -> Content:
    """Coefs of unit axes are 0: their only index is 0."""
    return replace(c, coefs=tuple(0 if n == ONE else k for n, k in zip(c.lengths, c.coefs)))


def _plus(a: Length | None, b: Length | None, sign: int = 1) -> Length | None:
    if a is None or b is None:
        return None
    terms = dict(a[1])
    for d, k in b[1]:
        terms[d] = terms.get(d, 0) + sign * k
    return (a[0] + sign * b[0], tuple(sorted((d, k) for d, k in terms.items() if k)))


def _le(a: Length | None, b: Length | None) -> frozenset[str] | None:
    """The dims that must be at least 1 for ``a <= b`` at every size (none where it holds at 0 too); None
    where it may fail."""
    diff = _plus(b, a, -1)
    if diff is None or any(k < 0 for _, k in diff[1]):
        return None
    if diff[0] >= 0:
        return frozenset()
    return frozenset(d for d, _ in diff[1]) if diff[0] + sum(k for _, k in diff[1]) >= 0 else None


@dataclass(frozen=True)
class Scalars:
    """The small integer values the rules read: shape arithmetic's abstract values (`abstract_values`), and
    the one-element ones as lengths (a Slice's end at ``seq + 1``), which that arithmetic cannot hold."""

    values: Mapping[str, Abstract]
    lengths: Mapping[str, Length]

    @classmethod
    def of(cls, g: Graph) -> Scalars:
        values = abstract_values(g)
        lengths = {v: n for v, (_, elems) in values.items() if len(elems) == 1 and (n := _length(elems[0]))}
        for n in g.nodes:
            t = g.types.get(n.outputs[0]) if len(n.outputs) == 1 else None
            if n.domain or t is None or t.dtype not in INTEGERS or n.outputs[0] in lengths:
                continue
            ins = [lengths.get(i) for i in n.inputs]
            if n.op in ("Add", "Sub") and len(ins) == 2:
                found = _plus(ins[0], ins[1], 1 if n.op == "Add" else -1)
            else:  # one element, handed on
                found = ins[0] if n.op in ("Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast") and ins else None
            if found is not None:
                lengths[n.outputs[0]] = found
        return cls(values, lengths)

    def scalar(self, name: str) -> int | str | None:
        v = self.values.get(name)
        return v[1][0] if v is not None and len(v[1]) == 1 else None

    def ints(self, name: str) -> list[int] | None:
        v = self.values.get(name)
        return list(v[1]) if v is not None and all(isinstance(e, int) for e in v[1]) else None  # type: ignore[arg-type]

    def ends(self, name: str, count: int) -> list[int | Length | None] | None:
        """A Slice's ends: ints where known (huge or negative ones the rule reads itself), else lengths."""
        if count == 1 and name in self.lengths and self.scalar(name) is None:
            return [self.lengths[name]]
        v = self.values.get(name)
        if v is None or len(v[1]) != count:
            return None
        return [e if isinstance(e, int) else _length(e) for e in v[1]]


def _aligned(c: Content, lengths: tuple[Length | None, ...]) -> tuple[int, ...] | None:
    """``c``'s coefs as it is read broadcast to ``lengths``: a unit axis reads index 0, so its coef is 0;
    an axis of unknown relation to the output's keeps no coef it has."""
    rank = len(lengths)
    pad = rank - len(c.coefs)
    if pad < 0:
        return None
    coefs = []
    for k in range(rank):
        if k < pad:
            coefs.append(0)
            continue
        own, coef = c.lengths[k - pad], c.coefs[k - pad]
        if own == ONE or coef == 0:
            coefs.append(0)
        elif own is not None and own == lengths[k]:
            coefs.append(coef)
        else:
            return None
    return tuple(coefs)


def _wide(t: TensorType, ins: list[Content | None]) -> tuple[Length | None, ...]:
    """A broadcast's lengths: along each axis the one every input not of unit length has (unit where all
    are), else the output type's."""
    out = list(_type_lengths(t))
    rank = len(out)
    for k in range(rank):
        seen = {
            c.lengths[k - rank + len(c.lengths)] if c else None for c in ins if not c or k - rank + len(c.lengths) >= 0
        }
        wide = seen - {ONE}
        if None not in wide and len(wide) <= 1:
            out[k] = wide.pop() if wide else ONE
    return tuple(out)


# --- how each op computes its content from its inputs' --------------------------------------------------------

Rule = Callable[[Node, TensorType, list[Content | None], Scalars], Content | None]


def _range(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    start, delta = values.scalar(n.inputs[0]), values.scalar(n.inputs[2])
    if not isinstance(start, int) or not isinstance(delta, int):
        return None
    return Content(_type_lengths(t), (delta,), start)


def _same(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    """Identity, and a Cast between integers and bools: a bool is known only from a splat, and an int32 only from
    a splat it holds (elsewhere the index could reach past what it holds, and wrap)."""
    c = ins[0]
    if c is None or t.dtype == "int64":
        return c
    if t.dtype == "int32":
        return c if c.splat and -(2**31) <= c.offset < 2**31 else None
    return replace(c, offset=int(c.offset != 0)) if c.splat else None


def _unsqueeze(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    c = ins[0]
    axes = values.ints(n.inputs[1]) if len(n.inputs) > 1 else list(onnx_io.int_attrs(n).get("axes", ()))  # type: ignore[call-overload]
    if c is None or axes is None:
        return None
    rank = len(c.coefs) + len(axes)
    added = {a % rank for a in axes}
    lengths, coefs, k = [], [], 0
    for axis in range(rank):
        if axis in added:
            lengths.append(ONE)
            coefs.append(0)
        else:
            lengths.append(c.lengths[k])
            coefs.append(c.coefs[k])
            k += 1
    return Content(tuple(lengths), tuple(coefs), c.offset)


def _reshape(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    """A Reshape that only adds or drops unit axes: the other axes keep their order and their coefs. A vector
    made a column (``[1, 1, -1, 1]``, a length the type leaves unknown) keeps its length: it holds every
    element."""
    c = ins[0]
    out = list(_type_lengths(t))
    if c is None or None in c.lengths:
        return None
    kept_in = [(n_, k) for n_, k in zip(c.lengths, c.coefs) if n_ != ONE]
    kept_out = [k for k, n_ in enumerate(out) if n_ != ONE]
    if len(kept_in) != len(kept_out) or (None in out and len(kept_out) != 1):
        return None
    if any(out[k] not in (None, n_) for (n_, _), k in zip(kept_in, kept_out)):
        return None
    coefs = [0] * len(out)
    for (n_, coef), k in zip(kept_in, kept_out):
        out[k], coefs[k] = n_, coef
    return Content(tuple(out), tuple(coefs), c.offset)


def _expand(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    c = ins[0]
    lengths = _wide(t, [c, None])  # the target's lengths are the type's to say
    coefs = None if c is None else _aligned(c, lengths)
    return None if coefs is None else Content(lengths, coefs, c.offset)  # type: ignore[union-attr]


def _slice(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    """Forward steps from a known start: each element is the one ``start`` further on."""
    c = ins[0]
    if not n.is_opaque:  # the catalogue's, its ranges attributes
        starts, ends, axes, steps = slice_ranges(n.attr)
    elif (starts := values.ints(n.inputs[1])) is not None:
        axes = values.ints(n.inputs[3]) if len(n.inputs) > 3 and n.inputs[3] else list(range(len(starts)))
        steps = values.ints(n.inputs[4]) if len(n.inputs) > 4 and n.inputs[4] else [1] * len(starts)
        ends = values.ends(n.inputs[2], len(starts)) or [None] * len(starts)
    if c is None or starts is None or axes is None or steps is None:
        return None
    lengths, coefs, offset, assumes = list(c.lengths), list(c.coefs), c.offset, c.assumes
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= len(coefs)
        if start < 0 or step < 1:
            return None
        offset += coefs[axis] * start
        coefs[axis] *= step
        lengths[axis], assumed = _sliced(lengths[axis], start, end) if step == 1 else (None, frozenset())
        assumes |= assumed
    return Content(tuple(lengths), tuple(coefs), offset, assumes)


def _sliced(length: Length | None, start: int, end: int | Length | None) -> tuple[Length | None, frozenset[str]]:
    """``length[start:end]``'s length where the clamps can be told apart (else None: the type's), and the dims
    that takes to be at least 1."""
    if isinstance(end, int):
        stop = length if end >= 2**62 else (None if end < 0 else (end, ()))
    else:
        stop = end
    inside, beyond = _le(stop, length), _le(length, stop)
    stop, assumed = (stop, inside) if inside is not None else ((length, beyond) if beyond is not None else (None, None))
    after = _le((start, ()), stop)
    if stop is None or after is None:
        return None, frozenset()
    return _plus(stop, (start, ()), -1), assumed | after  # type: ignore[operator]


def _concat(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    """Pieces that continue one another: each piece's elements are the whole's, counted from where it starts."""
    if any(c is None for c in ins) or not ins:
        return None
    rank = len(t.shape)  # type: ignore[arg-type]
    axis = int(onnx_io.int_attrs(n).get("axis", 0)) % rank  # type: ignore[call-overload]
    pieces: list[Content] = ins  # type: ignore[assignment]
    steps = {c.coefs[axis] for c in pieces if c.lengths[axis] != ONE}
    coef = steps.pop() if len(steps) == 1 else (0 if not steps else None)
    if coef is None:
        return None
    others = {tuple(k for j, k in enumerate(c.coefs) if j != axis) for c in pieces}
    if len(others) != 1:
        return None
    at: Length | None = (0, ())
    base = None
    for c in pieces:
        if at is None or at[1]:
            return None  # where a piece starts must be a constant
        here = c.offset - coef * at[0]
        if base is not None and here != base:
            return None
        base = here
        at = _plus(at, c.lengths[axis])
    coefs = list(pieces[0].coefs)
    coefs[axis] = coef
    lengths = list(_wide(t, pieces))
    lengths[axis] = at
    return Content(tuple(lengths), tuple(coefs), base)  # type: ignore[arg-type]


def _binary(op: Callable[[int, int], int], kind: str) -> Rule:
    """An op on two aligned contents: ``linear`` ones (Add, Sub) combine coefs; ``shifts`` ones (Max, And) commute
    with adding the same coefs to both, so they need equal coefs; ``compares`` ones (`_compared`) are splats
    where they hold everywhere or nowhere."""

    def rule(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
        if len(ins) != 2 or ins[0] is None or ins[1] is None:
            return None
        lengths = _wide(t, ins)
        a, b = _aligned(ins[0], lengths), _aligned(ins[1], lengths)
        if a is None or b is None:
            return None
        offset = int(op(ins[0].offset, ins[1].offset))
        if kind == "linear":
            return Content(lengths, tuple(op(x, y) for x, y in zip(a, b)), offset)
        if kind == "compares":
            known = _compared(op, tuple(x - y for x, y in zip(a, b)), ins[0].offset - ins[1].offset)
            return None if known is None else Content(lengths, (0,) * len(a), known)
        return Content(lengths, a, offset) if a == b else None

    return rule


def _compared(op: Callable[[int, int], int], coefs: tuple[int, ...], offset: int) -> int | None:
    """``op(x, y)`` where ``x - y`` is ``offset + sum(coefs * index)``, if it is the same everywhere. That
    difference is ``offset`` at index 0 and only grows (all coefs at least 0) or only falls from there; a
    comparison true at ``offset`` stays true as it grows if it is Greater or GreaterOrEqual (``op(1, 0)``), and
    false as it falls; Less and LessOrEqual the other way round; Equal only where nothing moves, or where it
    moves away from 0."""
    here = bool(op(offset, 0))
    if not any(coefs):
        return int(here)
    rises = all(k >= 0 for k in coefs)
    if not rises and not all(k <= 0 for k in coefs):
        return None
    if op(0, 0) and not op(1, 0) and not op(-1, 0):  # Equal: true at 0 only
        return 0 if (offset > 0 if rises else offset < 0) else None
    grows_true = bool(op(1, 0))  # Greater, GreaterOrEqual: false below, true above
    return int(here) if here == (grows_true == rises) else None


def _mul(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    if len(ins) != 2 or ins[0] is None or ins[1] is None or not (ins[0].splat or ins[1].splat):
        return None
    lengths = _wide(t, ins)
    a, b = _aligned(ins[0], lengths), _aligned(ins[1], lengths)
    if a is None or b is None:
        return None
    k, coefs = (ins[0].offset, b) if ins[0].splat else (ins[1].offset, a)
    return Content(lengths, tuple(k * x for x in coefs), ins[0].offset * ins[1].offset)


def _not(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    c = ins[0]
    return None if c is None or not c.splat else replace(c, offset=int(not c.offset))


def _cumsum(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    """A running sum of a splat ``k`` along an axis: ``k * (index + 1)``, or ``k * index`` when exclusive."""
    c, axis = ins[0], values.scalar(n.inputs[1])
    attrs = onnx_io.int_attrs(n)
    if c is None or not c.splat or not isinstance(axis, int) or attrs.get("reverse", 0):
        return None
    coefs = [0] * len(c.coefs)
    coefs[axis % len(coefs)] = c.offset
    return Content(c.lengths, tuple(coefs), 0 if attrs.get("exclusive", 0) else c.offset)


def _picked(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    """Gathers from a splat: every element picked is the splat's value."""
    c = ins[0]
    return None if c is None or not c.splat else Content(_type_lengths(t), (0,) * len(t.shape), c.offset)  # type: ignore[arg-type]


def _where(n: Node, t: TensorType, ins: list[Content | None], values: Scalars) -> Content | None:
    cond = ins[0]
    if cond is None or not cond.splat or len(ins) != 3:
        return None
    c = ins[1] if cond.offset else ins[2]
    if c is None:
        return None
    lengths = _wide(t, ins)
    coefs = _aligned(c, lengths)
    return None if coefs is None else Content(lengths, coefs, c.offset)


_RULES: dict[str, Rule] = {
    "Range": _range,
    "Identity": _same,
    "Cast": _same,
    "Unsqueeze": _unsqueeze,
    "Reshape": _reshape,
    "Expand": _expand,
    "Slice": _slice,
    "Concat": _concat,
    "Add": _binary(int.__add__, "linear"),
    "Sub": _binary(int.__sub__, "linear"),
    "Mul": _mul,
    "Equal": _binary(int.__eq__, "compares"),
    "Less": _binary(int.__lt__, "compares"),
    "LessOrEqual": _binary(int.__le__, "compares"),
    "Greater": _binary(int.__gt__, "compares"),
    "GreaterOrEqual": _binary(int.__ge__, "compares"),
    "And": _binary(lambda a, b: a and b, "shifts"),
    "Or": _binary(lambda a, b: a or b, "shifts"),
    "Xor": _binary(int.__xor__, "shifts"),
    "Max": _binary(max, "shifts"),
    "Min": _binary(min, "shifts"),
    "Not": _not,
    "CumSum": _cumsum,
    "Gather": _picked,
    "GatherND": _picked,
    "GatherElements": _picked,
    "Where": _where,
}
"""How each op computes its content from its inputs'; an op not here gives none."""
