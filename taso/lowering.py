"""An IR rule as z3 terms over the specs' uninterpreted functions.

Every input and weight becomes a tensor constant of its own name (the two sides of a rule share them); every
node becomes an application of its op's symbol, with the node's attributes as integer arguments. Ops whose
mapping is not one to one (Split into one ``slice`` per output, Mul by a 0-d scalar, n-ary Concat) have a
lowering function in their spec.

A generated rule (no free attributes) is lowered at its example's sizes: each input's shape is stated as facts,
and its attributes are matched exactly. A rule with free attributes (`taso.rules.Rule.free_attrs`) claims more:
every value of them, at every size the matcher binds. So it is lowered over symbolic sizes: the free attributes
are integer variables shared by both sides, each input's dims are variables constrained only by what every
well-typed application requires (`Symbol.requires`), and the example's sizes and free values are *tracked*
facts (`Tracked`): a proof may assume one, and then carries it as a condition the matcher enforces
(`taso.rules.Condition`), never silently. A proof that needed a conv's group to be 1 holds with ``group == 1``
as its condition, not for every group.
"""

from __future__ import annotations

import functools
import itertools
import struct
from dataclasses import dataclass, replace
from types import SimpleNamespace

import z3

from taso.ir import AttrValue, Graph, Node, TensorType
from taso.rules import AttrIs, Condition, Rule, SameSize, Size, SizeIs
from taso.spec import DIM, RANK, Specs, Symbol, T, Unsupported


@functools.lru_cache(maxsize=4096)
def tensor_const(name: str, t: TensorType | None) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
    """The constant for a graph input and the facts that give its shape (cached: pools reuse few inputs)."""
    if t is None or not t.is_static:
        raise Unsupported(f"input {name!r} has no static shape")
    c = z3.Const(name, T)
    assert t.shape is not None
    return c, (RANK(c) == len(t.shape), *(DIM(c, i) == int(d) for i, d in enumerate(t.shape)))


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
    """Hold wherever the matcher binds the rule: shapes, or ranks and what each application requires."""
    tracked: list[Tracked]
    """The example's coincidences (symbolic sizes only): assumed only with the condition they give."""
    used: set[str]
    symbolic: bool


def lower_rule(rule: Rule, specs: Specs) -> Lowered:
    """``rule``'s sides as terms; over symbolic sizes when it has free attributes (see the module docstring)."""
    env: dict[str, z3.ExprRef] = {}
    facts: list[z3.BoolRef] = []
    used: set[str] = set()
    symbolic = bool(rule.free_attrs)
    tracked: list[Tracked] = []
    if symbolic:
        for name, t in _inputs(rule):
            env[name], shape_facts = _symbolic_const(name, t)
            facts.extend(shape_facts)
        tracked = _size_facts(rule, env)
    src = lower_graph(rule.src, specs, env, facts, used, rule.free_examples, symbolic)
    dst = lower_graph(rule.dst, specs, env, facts, used, rule.free_examples, symbolic)
    if symbolic:
        tracked += _free_facts(rule)
    return Lowered(src, dst, facts, tracked, used, symbolic)


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


def _symbolic_const(name: str, t: TensorType) -> tuple[z3.ExprRef, list[z3.BoolRef]]:
    """An input of any sizes of its rank (at least 1 each)."""
    c = z3.Const(name, T)
    assert t.shape is not None
    return c, [RANK(c) == len(t.shape), *(DIM(c, i) >= 1 for i in range(len(t.shape)))]


def _size_facts(rule: Rule, env: dict[str, z3.ExprRef]) -> list[Tracked]:
    """Equal example sizes as equalities (every pair, so a proof names the pairs it needs), then each example
    size itself."""
    by_size: dict[int, list[Size]] = {}
    for name, t in _inputs(rule):
        for i, d in enumerate(t.shape or ()):
            by_size.setdefault(int(d), []).append(Size(name, i))
    out: list[Tracked] = []
    for sizes in by_size.values():
        for a, b in itertools.combinations(sizes, 2):
            out.append(Tracked(DIM(env[a.value], a.axis) == DIM(env[b.value], b.axis), SameSize(a, b), True))
    for n, sizes in by_size.items():
        out.extend(Tracked(DIM(env[s.value], s.axis) == n, SizeIs(s, n), False) for s in sizes)
    return out


def _free_facts(rule: Rule) -> list[Tracked]:
    """Each free attribute at its example value."""
    out = []
    for attr, example in sorted(rule.free_examples, key=str):
        v = attr_int(example) if not isinstance(example, tuple) else None
        var = Free(attr, example).ints(None if v is not None else len(example))  # type: ignore[arg-type]
        if isinstance(var, tuple):
            fact = z3.And(*(x == int(e) for x, e in zip(var, example)))  # type: ignore[union-attr]
        else:
            fact = var == v
        out.append(Tracked(fact, AttrIs(attr, example), False))
    return out


class _Recorder:
    """The specs' symbols by name, as lowering functions see them, noting which ones they use and stating
    what each application requires (`Symbol.requires`) as a fact."""

    def __init__(self, specs: Specs, used: set[str], facts: list[z3.BoolRef], symbolic: bool = False) -> None:
        self._symbols, self._used, self._facts = specs.symbols, used, facts
        self.symbolic = symbolic
        """Sizes are variables: a lowering that writes an example size into a term must refuse."""

    def __getattr__(self, name: str) -> Symbol | _Stated:
        self._used.add(name)
        sym = self._symbols[name]
        return sym if sym.requires is None else _Stated(sym, self._facts)


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
    """A scalar attribute as a symbol's integer argument: a free one's variable, a float by its bits (equal
    floats give equal integers, which is all a proof asks of them), an int as it is."""
    if isinstance(v, Free):
        return v.ints(None)  # type: ignore[return-value]
    if isinstance(v, float):
        return struct.unpack("<q", struct.pack("<d", v))[0]
    return int(v)  # type: ignore[call-overload]


def per_channel(x: TensorType | None, c: TensorType | None) -> bool:
    """Whether ``c`` broadcasts over ``x`` as one value per channel (axis 1): shape (C, 1, ...), a rank lower."""
    if x is None or c is None or x.shape is None or len(x.shape) < 2:
        return False
    return c.shape == (x.shape[1],) + (1,) * (len(x.shape) - 2)


def channel_values(f: Specs, c: z3.ExprRef, t: TensorType) -> z3.ExprRef:
    """The per-channel tensor ``c`` (of type ``t``) as its (C,) vector: itself where it is one already (a bias
    over a matrix's columns), else ``channels`` of it (a (C, 1, 1) tensor over NCHW)."""
    return c if t.rank == 1 else f.channels(c)


def lower_graph(
    g: Graph,
    specs: Specs,
    env: dict[str, z3.ExprRef],
    facts: list[z3.BoolRef],
    used: set[str],
    free: frozenset[tuple[str, AttrValue]] = frozenset(),
    symbolic: bool = False,
) -> list[z3.ExprRef]:
    """The terms of ``g``'s outputs; adds constants for its inputs to ``env``, their shapes to ``facts`` and the
    names of the symbols the terms use to ``used``; an attribute whose (name, value) is in ``free`` is a
    variable (`Rule.free_examples`). With ``symbolic`` the inputs are in ``env`` already (`lower_rule`)."""
    values: dict[str, z3.ExprRef] = {}
    f = _Recorder(specs, used, facts, symbolic)
    for name in (*g.inputs, *g.weights):
        if name not in env:
            env[name], shape_facts = tensor_const(name, g.types.get(name))
            facts.extend(shape_facts)
        values[name] = env[name]
    for n in g.nodes:
        if free and not free.isdisjoint(n.attrs):
            n = replace(n, attrs=tuple((k, Free(k, v) if (k, v) in free else v) for k, v in n.attrs))
        args = [values[v] for v in n.inputs if v]
        if n.op in specs.lowerings:
            terms = specs.lowerings[n.op](n, args, g.types, f)
        elif n.op in specs.by_op:
            terms = [lower_plain(getattr(f, specs.by_op[n.op].name), n, args)]
        else:
            raise Unsupported(f"no spec for {n.op}")
        if len(terms) != len(n.outputs):
            raise Unsupported(f"{n.op} lowered to {len(terms)} terms for {len(n.outputs)} outputs")
        values.update(zip(n.outputs, terms))
    return [values[o] for o in g.outputs]


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


def _ints(v: object, length: int | None) -> object:
    if isinstance(v, Free):
        return v.ints(length)
    return tuple(int(x) for x in v) if isinstance(v, tuple) else attr_int(v)  # type: ignore[union-attr]


def _norm(v: object) -> object:
    return tuple(v) if isinstance(v, list | tuple) else v
