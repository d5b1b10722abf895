"""An IR rule as z3 terms over the specs' uninterpreted functions, over symbolic sizes.

Every input and weight becomes a tensor constant of its own name (the two sides of a rule share them), but for
a 0-d float constant, which becomes the ``num`` term of the number it is read as (`_number`: the epsilon a norm's
spelling adds is the very term its fused op's epsilon attribute names, and the matcher binds it only to that
number); every node becomes an application of its op's symbol, with the node's attributes as integer arguments.
Ops whose mapping is not one to one (Split into one ``slice`` per output, Mul by a 0-d scalar, n-ary Concat) have
a lowering function in their spec.

The matcher binds a rule at any sizes and, for its free attributes (`taso.rules.Rule.free_attrs`), at any value,
so a proof must hold for all of them, not only for the example the rule is written at. Sizes are therefore
variables: each input's dims, constrained only by its rank, by being at least 1, and by what makes each node
well-typed (`Symbol.requires`, and the facts a spec's lowering states, such as a MatMul's inner dims being
equal: the model is well-typed, and the target is type-checked when it is built); free attributes are
variables too, shared by both sides. What the example has beyond that - two sizes that happen to be equal, a
size, a free attribute's value - is a *tracked* fact (`Tracked`): a proof may assume one, and then carries it
as a condition (`taso.rules.Condition`) that `taso.rewrite` enforces, never silently. Sizes a rule carries as
data follow the rewrite: a Split's sizes are variables on either side (the model's where the side is matched,
where it is built those of the outputs it reproduces), tied to the other side by the rule's output types,
which the rewrite checks; a target constant's shape is the source's dims of the same example size, a source
constant's the literal the matcher binds (so a rule with a constant generator is proved one way only).
"""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass, replace
from types import SimpleNamespace

import z3

from taso import ops
from taso.ir import AttrValue, Graph, Node, TensorType
from taso.ops import numbers
from taso.rules import OUTPUT, AttrIs, Condition, Rule, SameSize, Size, SizeIs
from taso.verify.spec import D, IntExpr, R, Specs, Symbol, T, Unsupported


@dataclass(frozen=True)
class Tracked:
    """A fact of the rule's example a proof may assume; the condition the rule then carries."""

    fact: z3.BoolRef
    condition: Condition
    general: bool
    """An equality of two sizes (tried first) rather than a size or attribute value of the example."""


@dataclass
class Lowered:
    """Both sides of a rule as terms, with what the proof may assume."""

    src: list[z3.ExprRef]
    dst: list[z3.ExprRef]
    facts: list[z3.BoolRef]
    """Hold wherever the matcher binds the rule and the target type-checks."""
    tracked: list[Tracked]
    """The example's coincidences: assumed only with the condition they give."""
    used: set[str]
    reversible: bool
    """Whether the proof covers the rule read backwards too: not where a constant generator's shape is read
    literally on one side and recomputed on the other."""


def lower_rule(rule: Rule, specs: Specs) -> Lowered:
    """``rule``'s sides as terms over symbolic sizes (see the module docstring)."""
    env: dict[str, z3.ExprRef] = {}
    facts: list[z3.BoolRef] = []
    used: set[str] = set()
    dims: dict[int, list[z3.ArithRef]] = {}
    handles: list[tuple[Size, z3.ArithRef, int]] = []
    for name, t in _inputs(rule):
        number = _number(rule, name, specs)
        if number is not None:  # a constant the matcher binds by its value: that value's term
            env[name] = number
            used.add("num")
            continue
        c = env[name] = z3.Const(name, T)
        assert t.shape is not None
        facts.append(R(c) == len(t.shape))
        if name in rule.src.data or name in rule.dst.data:  # a Split's sizes: read off types, never a term's size
            continue
        for i, d in enumerate(t.shape):
            facts.append(D(c, i) >= 1)
            handles.append((Size(name, i), D(c, i), int(d)))
            if name in rule.src.inputs or name in rule.src.weights:
                dims.setdefault(int(d), []).append(D(c, i))
    src = lower_graph(rule.src, specs, env, facts, used, rule.free_examples, _Sizes(dims, facts, "source"))
    dst = lower_graph(rule.dst, specs, env, facts, used, rule.free_examples, _Sizes(dims, facts, "target"))
    for k, (o, a, b) in enumerate(zip(rule.src.outputs, src, dst)):
        shape = rule.src.types[o].shape or ()
        facts.extend(D(a, i) == D(b, i) for i in range(len(shape)))  # the rewrite checks the output types
        handles += [(Size(f"{OUTPUT}{k}", i), D(a, i), int(d)) for i, d in enumerate(shape)]
    constants = any("constant" in ops.get(n.op).tags for n in (*rule.src.nodes, *rule.dst.nodes))
    return Lowered(src, dst, facts, _size_facts(handles) + _free_facts(rule), used, not constants)


def _inputs(rule: Rule) -> list[tuple[str, TensorType]]:
    """Every input and weight of either side, once, in a fixed order."""
    seen: dict[str, TensorType] = {}
    for g in (rule.src, rule.dst):
        for name in (*g.inputs, *g.weights):
            t = g.types.get(name)
            if t is None or not t.is_static:
                raise Unsupported(f"input {name!r} has no static shape")
            seen.setdefault(name, t)
    return list(seen.items())


def _number(rule: Rule, name: str, specs: Specs) -> z3.ExprRef | None:
    """A 0-d or one-element (1,) float constant of the rule (GELU's 0.5 and sqrt 2, a norm's epsilon, a Pow's
    exponent; the TorchScript exporter writes attention's 64^-1/4 as a (1,) tensor, specs/mul.py) as the
    ``num`` term of the number `taso.ops.numbers` reads it as (specs/numbers.py), named by the very integer
    `attr_int` makes of an attribute of that value: LayerNormalization's epsilon and the 1e-5 its spelling adds
    are one term, as QuickGelu's alpha and a constant 1.702 are. The matcher binds it only to a constant read as
    the same number (`taso.rules.match`). None for any other weight (a free tensor), a nan or an infinity, or
    where the specs have no ``num``."""
    data = rule.src.data.get(name) or rule.dst.data.get(name)
    if data is None or data.dtype.kind != "f" or data.shape not in ((), (1,)) or "num" not in specs.symbols:
        return None
    c = float(data.array.reshape(()))
    return specs.symbols["num"](value=attr_int(c)) if math.isfinite(c) else None


def _size_facts(handles: list[tuple[Size, z3.ArithRef, int]]) -> list[Tracked]:
    """Equal example sizes as equalities (every pair, so a proof names the pairs it needs), then each example
    size itself."""
    by_size: dict[int, list[tuple[Size, z3.ArithRef]]] = {}
    for h, term, n in handles:
        by_size.setdefault(n, []).append((h, term))
    out = [
        Tracked(ta == tb, SameSize(a, b), True)
        for pairs in by_size.values()
        for (a, ta), (b, tb) in itertools.combinations(pairs, 2)
    ]
    out += [Tracked(term == n, SizeIs(h, n), False) for h, term, n in handles]
    return out


def _free_facts(rule: Rule) -> list[Tracked]:
    """Each free attribute at its example value."""
    out = []
    for attr, example in sorted(rule.free_examples, key=str):
        var = Free(attr, example).ints(len(example) if isinstance(example, tuple) else None)
        if isinstance(var, tuple):
            fact = z3.And(*(x == int(e) for x, e in zip(var, example)))  # type: ignore[union-attr]
        else:
            fact = var == attr_int(example)
        out.append(Tracked(fact, AttrIs(attr, example), False))
    return out


@dataclass
class _Sizes:
    """How the sizes a rule carries as data enter one side's terms."""

    dims: dict[int, list[z3.ArithRef]]
    """The source's input and weight dims by their example size (what `taso.rewrite` maps a constant's by)."""
    facts: list[z3.BoolRef]
    side: str
    """source | target: which side of the rule is being lowered."""


class _Recorder:
    """The specs' symbols by name, as lowering functions see them, noting which ones they use and stating
    what each application requires (`Symbol.requires`) as a fact; and the sizes a lowering writes into terms."""

    def __init__(self, specs: Specs, used: set[str], facts: list[z3.BoolRef], sizes: _Sizes) -> None:
        self._symbols, self._used, self._facts, self._sizes = specs.symbols, used, facts, sizes

    def __getattr__(self, name: str) -> Symbol | _Stated:
        self._used.add(name)
        sym = self._symbols[name]
        return sym if sym.requires is None else _Stated(sym, self._facts)

    def fact(self, *facts: z3.BoolRef | bool) -> None:
        """State what a well-typed application of the node being lowered satisfies (its operands' sizes)."""
        self._facts.extend(f for f in facts if not isinstance(f, bool))

    def split_sizes(self, node: Node, axis: int) -> list[IntExpr]:
        """A Split's output sizes along ``axis``, one variable each on either side: the model's where the side
        is matched, and where it is built, those of the source outputs it reproduces (`taso.rewrite`), which
        the rule's output types tie to the other side's."""
        return [z3.Int(f"size of {self._sizes.side} {o}") for o in node.outputs]

    def reaches(self, name: str) -> None:
        """Note that the node's term becomes one of the symbol ``name`` by an axiom (x - x is zeros: sub-self),
        so the axioms over it are among the rule's relevant ones (`taso.verify.run`), not left to the last stage,
        where every other axiom's instances crowd them out."""
        self._used.add(name)

    def witness(self, name: str, rank: int) -> z3.ExprRef:
        """A tensor of rank ``rank`` named for the value ``name`` on this side, standing for a shape no operand has:
        a fresh constant, whose values no proof can use, so what it proves holds at every tensor of its shape."""
        w = z3.Const(f"shape of {self._sizes.side} {name}", T)
        self._facts.append(R(w) == rank)
        return w

    def size_of(self, n: int) -> IntExpr:
        """An example size a constant generator's shape holds: in the source the size itself (the matcher
        binds the shape literally); in the target the source's dims of that example size (all equal where the
        rewrite maps it to them: it declines otherwise), or the size itself where the source has none."""
        same = self._sizes.dims.get(n) if self._sizes.side == "target" else None
        if not same:
            return n
        self._sizes.facts.extend(d == same[0] for d in same[1:])
        return same[0]


@dataclass(frozen=True)
class _Stated:
    """A symbol whose applications add what they require to ``facts``; otherwise the symbol itself."""

    sym: Symbol
    facts: list[z3.BoolRef]

    def __call__(self, *xs: z3.ExprRef, **attrs: object) -> z3.ExprRef:
        assert self.sym.requires is not None
        self.facts.append(self.sym.requires(SimpleNamespace(**attrs), *xs))
        return self.sym(*xs, **attrs)

    def __getattr__(self, name: str) -> object:
        return getattr(self.sym, name)


@dataclass(frozen=True)
class Free:
    """A free attribute's value while a rule is lowered: a variable, named by the attribute and the example."""

    attr: str
    example: AttrValue

    def ints(self, length: int | None) -> z3.ArithRef | tuple[z3.ArithRef, ...]:
        name = f"{self.attr}={self.example}"
        return z3.Int(name) if length is None else tuple(z3.Int(f"{name}[{i}]") for i in range(length))


def attr_int(v: object) -> z3.ArithRef | int:
    """A scalar attribute as a symbol's integer argument: a free one's variable, a float by the bits of the number
    it is read as (`taso.ops.numbers`: itself, or the known number it rounds, so QuickGelu's alpha 1.702 as a
    float32 is the 1.702 of a constant ``num``; equal floats give equal integers, which is all a proof asks of
    them), an int as it is."""
    if isinstance(v, Free):
        return v.ints(None)  # type: ignore[return-value]
    if isinstance(v, float):
        return numbers.read(v).bits if math.isfinite(v) else struct.unpack("<q", struct.pack("<d", v))[0]
    return int(v)  # type: ignore[call-overload]


def per_channel(x: TensorType | None, c: TensorType | None) -> bool:
    """Whether ``c`` broadcasts over ``x`` as one value per channel (axis 1): shape (C, 1, ...), a rank lower."""
    if x is None or c is None or x.shape is None or len(x.shape) < 2:
        return False
    return c.shape == (x.shape[1],) + (1,) * (len(x.shape) - 2)


def same_shape(x: z3.ExprRef, y: z3.ExprRef, rank: int | None) -> list[z3.BoolRef]:
    """The facts that ``x`` and ``y`` (of rank ``rank``) have one shape."""
    return [D(x, i) == D(y, i) for i in range(rank or 0)]


def channel_values(f: _Recorder, c: z3.ExprRef, t: TensorType, x: z3.ExprRef) -> z3.ExprRef:
    """The per-channel tensor ``c`` (of type ``t``) over ``x`` as its (C,) vector: itself where it is one already
    (a bias over a matrix's columns), else ``channels`` of it (a (C, 1, 1) tensor over NCHW); states that it has
    one value per channel of ``x``."""
    f.fact(D(c, 0) == D(x, 1), *(D(c, i) == 1 for i in range(1, t.rank or 0)))
    return c if t.rank == 1 else f.channels(c)


def broadcasts(x: TensorType | None, y: TensorType | None) -> bool:
    """Whether ``y`` broadcasts over ``x`` along some of its axes, at ``x``'s rank: every dim of ``y`` is ``x``'s
    or 1 (RMSNorm's (B, S, 1) over (B, S, D)), and the two shapes differ. A 0-d ``y`` does not: it is a scalar
    operand (``smul``, ``sadd``, ``sdiv``, ``spow``), whose ``num`` axioms (specs/numbers.py) see its value."""
    if x is None or y is None or x.shape is None or y.shape is None or len(x.shape) != len(y.shape):
        return False
    return x.shape != y.shape and all(b in (a, 1) for a, b in zip(x.shape, y.shape))


def spread(f: _Recorder, y: z3.ExprRef, ty: TensorType, x: z3.ExprRef, tx: TensorType) -> z3.ExprRef:
    """``y`` (of type ``ty``) broadcast to the shape of ``x`` (of type ``tx``): ``bcast`` of it (specs/broadcast.py),
    stating that its dims are 1 where the example's are and ``x``'s elsewhere, so that the proof holds only where
    an instance broadcasts the same way (which `taso.search.rewrite` checks)."""
    f.fact(*(D(y, i) == (1 if b == 1 != a else D(x, i)) for i, (a, b) in enumerate(zip(tx.shape, ty.shape))))
    return f.bcast(y, x)


def spread_both(f: _Recorder, node: Node, args: list[z3.ExprRef], types: dict[str, TensorType]) -> list[z3.ExprRef]:
    """A binary element-wise node's operands spread to its output's shape as numpy broadcasts them (LayerNorm's
    scale [D] over a per-row root [N, 1]): each is itself where it has that shape, ``bcast`` of it where it has
    that rank with size-1 axes (`spread`), ``trail`` of it where it has the output's trailing shape, each over the
    operand of the output's shape, else over a `_Recorder.witness` of that shape (specs/expand.py's
    ``expand-bcast`` axioms make a spread one over any tensor of that shape). Refuses (`Unsupported`) other
    broadcasting."""
    out = types[node.outputs[0]]
    assert out.shape is not None
    operands = [(x, types[v]) for x, v in zip(args, node.inputs)]
    like = next((x for x, t in operands if t.shape == out.shape), None)
    if like is None:
        like = f.witness(node.outputs[0], len(out.shape))
        for i, n in enumerate(out.shape):
            sizes = [D(x, i - len(out.shape) + len(t.shape)) for x, t in operands if _aligned(t, out, i) == n != 1]
            f.fact(D(like, i) == (sizes[0] if sizes else 1))
    terms = []
    for x, t in operands:
        if t.shape == out.shape:
            f.fact(*same_shape(x, like, out.rank))
            terms.append(x)
        elif broadcasts(out, t):
            terms.append(spread(f, x, t, like, out))
        elif t.shape and t.shape == out.shape[len(out.shape) - len(t.shape) :]:
            f.fact(*(D(x, j) == D(like, len(out.shape) - len(t.shape) + j) for j in range(len(t.shape))))
            terms.append(f.trail(x, like))
        else:
            raise Unsupported(
                f"{node.op} of shapes {t.shape} and {out.shape}: broadcasting other than along size-1 "
                "axes or of a trailing shape"
            )
    return terms


def _aligned(t: TensorType, out: TensorType, i: int) -> int | None:
    """``t``'s size at the output's axis ``i`` as numpy aligns shapes (from the right); None before its first."""
    assert t.shape is not None and out.shape is not None
    j = i - len(out.shape) + len(t.shape)
    return int(t.shape[j]) if j >= 0 else None


def normed(
    f: _Recorder, norm: z3.ExprRef, x: z3.ExprRef, rank: int, axis: int, weights: list[tuple[z3.ExprRef, TensorType]]
) -> z3.ExprRef:
    """``norm`` (of ``x``, of rank ``rank``, over its axes from ``axis`` on) times its scale, plus its shift where
    there is one, each spread over ``x`` along those axes (``trail``, specs/layernorm.py): LayerNormalization's
    form, which the norms onnxruntime fuses share (specs/fused.py). States that each weight has the normalised
    shape; refuses (`Unsupported`) one of another rank."""
    for w, t in weights:
        if t.rank != rank - axis:
            raise Unsupported("a norm's scale or shift of other than the normalised shape")
        f.fact(*(D(w, j) == D(x, axis + j) for j in range(rank - axis)))
    out = f.mul(norm, f.trail(weights[0][0], x))
    return f.add(out, f.trail(weights[1][0], x)) if len(weights) > 1 else out


def lower_graph(
    g: Graph,
    specs: Specs,
    env: dict[str, z3.ExprRef],
    facts: list[z3.BoolRef],
    used: set[str],
    free: frozenset[tuple[str, AttrValue]],
    sizes: _Sizes,
) -> list[z3.ExprRef]:
    """The terms of ``g``'s outputs over ``env``'s inputs; adds what well-typed applications satisfy to
    ``facts`` and the names of the symbols the terms use to ``used``; an attribute whose (name, value) is in
    ``free`` is a variable (`Rule.free_examples`)."""
    values = {name: env[name] for name in (*g.inputs, *g.weights)}
    f = _Recorder(specs, used, facts, sizes)
    for n in g.nodes:
        if free and not free.isdisjoint(n.attrs):
            n = replace(n, attrs=tuple((k, Free(k, v) if (k, v) in free else v) for k, v in n.attrs))
        if "constant" in ops.get(n.op).tags:  # a shape the rewrite recomputes from the model's dims
            shape = tuple(f.size_of(int(d)) for d in n.attr["shape"])  # type: ignore[union-attr]
            n = replace(n, attrs=tuple((k, shape if k == "shape" else v) for k, v in n.attrs))
        args = [values[v] for v in n.inputs if v]
        _check_attrs(n)
        if n.op in specs.lowerings:
            try:
                terms = specs.lowerings[n.op](n, args, g.types, f)
            except (TypeError, KeyError, ValueError, IndexError) as e:  # a free attribute it needs as a number, ...
                raise Unsupported(f"{n.op}: its lowering fails ({type(e).__name__}: {e})") from None
        elif n.op in specs.by_op:
            terms = [lower_plain(getattr(f, specs.by_op[n.op].name), n, args)]
        else:
            raise Unsupported(f"no spec for {n.op}")
        if len(terms) != len(n.outputs):
            raise Unsupported(f"{n.op} lowered to {len(terms)} terms for {len(n.outputs)} outputs")
        values.update(zip(n.outputs, terms))
    return [values[o] for o in g.outputs]


def _check_attrs(n: Node) -> None:
    """Refuse (`Unsupported`) a node whose attributes are not the catalogue's, every one written as import
    normalises a node: one it does not know is one no lowering reads (BatchNormalization's ``training_mode``),
    and one the node lacks would be read as whatever the lowering assumes (a rank-3 Transpose without ``perm``
    as the 2-D one, a Conv without ``dilations`` as one with the only dilations the spec models)."""
    if n.op not in ops.OPS:
        raise Unsupported(f"{n.op} is not in the catalogue")
    schema = ops.get(n.op).attrs
    unknown = sorted(set(n.attr) - set(schema))
    if unknown:
        raise Unsupported(f"{n.op} attribute(s) {', '.join(map(repr, unknown))} not modelled")
    missing = [k for k in schema if k not in n.attr]
    if missing:
        raise Unsupported(f"{n.op} without its attribute(s) {', '.join(map(repr, missing))}")


def lower_plain(sym: Symbol | _Stated, n: Node, args: list[z3.ExprRef]) -> z3.ExprRef:
    """A node whose op is one symbol: the symbol's attributes read by name, the rest fixed or derived."""
    attrs = n.attr
    for k, v in attrs.items():
        if k in sym.fixed and isinstance(v, Free):
            raise Unsupported(f"{n.op} {k} cannot be free (only {sym.fixed[k]} is modelled)")
        if k in sym.fixed and _norm(sym.fixed[k]) != _norm(v):
            raise Unsupported(f"{n.op} with {k}={v} (only {sym.fixed[k]} is modelled)")
        if k not in sym.fixed and k not in sym.derived and k not in dict(sym.layout):
            raise Unsupported(f"{n.op} attribute {k!r} is not modelled")
    if len(args) != sym.arity:
        raise Unsupported(f"{n.op} with {len(args)} inputs (the spec models {sym.arity})")
    try:
        return sym(*args, **{k: _ints(attrs[k], length) for k, length in sym.layout})
    except (KeyError, ValueError) as e:
        raise Unsupported(f"{n.op}: {e}") from None


def attr_ints(v: object, length: int) -> tuple[IntExpr, ...]:
    """A tuple attribute's values as a symbol's integer arguments (a free one's variables)."""
    return _ints(v, length)  # type: ignore[return-value]


def _ints(v: object, length: int | None) -> object:
    if isinstance(v, Free):
        return v.ints(length)
    if isinstance(v, tuple):
        return tuple(x if isinstance(x, z3.ExprRef) else int(x) for x in v)  # type: ignore[union-attr]
    return attr_int(v)


def _norm(v: object) -> object:
    return tuple(v) if isinstance(v, list | tuple) else v
