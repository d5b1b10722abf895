"""One graph's values, evaluated incrementally over Z_p: the pool's values and the forms once per worker
(`_Context`), and a compact graph built on top of them (`_build`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from taso import ops
from taso.generate.fingerprint import (
    EVALUATIONS,
    evaluation_seeds,
    field_apply,
    input_values,
    needs_exponents,
    value_digest,
)
from taso.generate.forms import (
    ACTIVATION,
    MIN_IMAGE,
    WEIGHT,
    Form,
    NodeSpec,
    Settings,
    Shape,
    Sig,
    Splits,
    _cut,
    static_data,
)
from taso.ir import TensorType
from taso.ops.field import residues

_FRESH_KEPT = 20_000
"""`_Context.fresh` is emptied past this many inputs (a few tens of MB per worker at TASO's shapes)."""


@dataclass
class _Value:
    sig: Sig
    runs: tuple[np.ndarray, ...]
    digest: int
    abstract: str  # structure with inputs named by class only: orders nodes independently of input names
    concrete: str  # structure with input names: identifies the graph


class _Context:
    """The pool's values and the forms, built once per worker process."""

    def __init__(self, settings: Settings, runs: int = EVALUATIONS) -> None:
        self.settings = settings
        self.forms = settings.form_list()
        self.wide = needs_exponents(f.op for f in self.forms)
        """Whether values carry their Z_q components (only an Exp-like form reads them)."""
        self.names: list[str] = []
        self.cls: list[int] = []
        self.index: list[int] = []
        self.first: list[int] = []  # id of each class's first tensor
        self.inputs: list[_Value] = []
        seeds = evaluation_seeds(settings.seed)[:runs]
        self.keys = [key for _, key in seeds]
        self.seeds = [s for s, _ in seeds]
        for c, ic in enumerate(settings.pool):
            self.first.append(len(self.names))
            for i in range(ic.count):
                name = f"{ic.prefix}{i}"
                runs = tuple(self._draw(name, ic.shape, s) for s, _ in seeds)
                kind = ACTIVATION if ic.kind == "activation" else WEIGHT
                sig: Sig = (tuple(ic.shape), kind, ic.splits)
                self.inputs.append(_Value(sig, runs, value_digest(ic.shape, runs), ic.prefix, name))
                self.names.append(name)
                self.cls.append(c)
                self.index.append(i)
        self.n_inputs = len(self.names)
        self.input_sigs = [v.sig for v in self.inputs]
        self._memo: dict[tuple, tuple[dict, tuple[Sig, ...]] | None] = {}
        self._menu: dict[tuple, list] = {}
        self.values: dict[str, list[_Value]] = {}
        """Evaluated nodes by expression (input names included: equal text, equal values), for `_build`: a
        pair's graphs share most of their nodes with the pairs judged just before."""
        self._fresh: dict[tuple[str, Shape], tuple[np.ndarray, ...]] = {}

    def fresh(self, head: str, shape: Shape) -> tuple[np.ndarray, ...]:
        """The values, in every evaluation, of a fresh input standing for the subgraph ``head`` (memoised: the
        pairs of one class ask for the same ones, and drawing them costs more than the rest of the test)."""
        key = (head, shape)
        if key not in self._fresh:
            if len(self._fresh) > _FRESH_KEPT:
                self._fresh.clear()
            self._fresh[key] = tuple(self._draw(f"fresh:{head}", shape, s) for s in self.seeds)
        return self._fresh[key]

    def _draw(self, name: str, shape: Shape, seed: int) -> np.ndarray:
        """`input_values`, reduced to the Z_p residues when no form reads the Z_q components."""
        values = input_values(name, shape, seed)
        return values if self.wide else residues(values)

    def applicable(self, sigs: tuple[Sig, ...]) -> list[tuple[int, tuple[Sig, ...], tuple[dict, tuple[Sig, ...]]]]:
        """Every (form, argument signatures, what `apply` gives) over values of these signatures (memoised)."""
        if sigs not in self._menu:
            self._menu[sigs] = [
                (f, sc, applied)
                for f, form in enumerate(self.forms)
                for sc in itertools.product(sigs, repeat=form.arity)
                if (applied := self.apply(f, sc)) is not None
            ]
        return self._menu[sigs]

    def apply(self, f: int, sigs: tuple[Sig, ...]) -> tuple[dict, tuple[Sig, ...]] | None:
        """Attributes and output signatures of form ``f`` on these arguments, or None (memoised)."""
        key = (f, sigs)
        if key not in self._memo:
            self._memo[key] = self._apply(self.forms[f], sigs)
        return self._memo[key]

    def _apply(self, form: Form, sigs: tuple[Sig, ...]) -> tuple[dict, tuple[Sig, ...]] | None:
        attrs = form.attrs(sigs)
        if attrs is None:
            return None
        for other in self.forms:  # e.g. a SAME and a VALID conv of a 1x1 kernel: one node, built once
            if other is form:
                break
            if (other.op, other.arity, other.cut) == (form.op, form.arity, form.cut) and other.attrs(sigs) == attrs:
                return None
        types = [TensorType("float32", s[0]) for s in sigs]
        consts: list[np.ndarray | None] = [None] * len(sigs)
        n_out = 1
        data = static_data(form, sigs, attrs)
        if data is not None:
            types.append(TensorType("int64", data.shape))
            consts.append(data)
            n_out = len(data) if form.op == "Split" else 1
        try:
            out_types = ops.infer(form.op, types, attrs, consts, n_out)
        except ops.OpError:
            return None
        if form.op in ops.having(ops.WINDOWED) and min(out_types[0].shape[2:]) < MIN_IMAGE:  # type: ignore[index]
            return None
        kind = ACTIVATION if any(s[1] == ACTIVATION for s in sigs) else WEIGHT
        splits = _splits_after(form, attrs, sigs)
        outs = []
        for i, t in enumerate(out_types):
            own = splits[i] if isinstance(splits, list) else splits
            outs.append((tuple(t.shape), kind, own))  # type: ignore[arg-type]
        return attrs, tuple(outs)  # type: ignore[return-value]

    def evaluate(self, f: int, args: Sequence[_Value], attrs: dict, out_sigs: Sequence[Sig]) -> list[_Value]:
        form = self.forms[f]
        outs_per_run = []
        for r, key in enumerate(self.keys):
            xs = [a.runs[r] for a in args]
            data = static_data(form, [a.sig for a in args], attrs)
            if data is not None:
                xs.append(data)
            outs_per_run.append(field_apply(form.op, xs, attrs, len(out_sigs), key, self.wide))
        head_a = f"{form.name}({','.join(a.abstract for a in args)})"
        head_c = f"{form.name}({','.join(a.concrete for a in args)})"
        out = []
        for i, sig in enumerate(out_sigs):
            runs = tuple(o[i] for o in outs_per_run)
            suffix = f"[{i}]" if len(out_sigs) > 1 else ""
            out.append(_Value(sig, runs, value_digest(sig[0], runs), head_a + suffix, head_c + suffix))
        return out


def _splits_after(form: Form, attrs: dict, sigs: Sequence[Sig]) -> Splits | list[Splits]:
    """TASO's split tree: where each output may be split again, from where its arguments could be."""
    op = form.op
    s = [dict(sig[2]) for sig in sigs]
    if op == "Concat":
        a = attrs["axis"]
        keep = {ax: v for ax, v in s[0].items() if ax != a and s[1].get(ax) == v}
        keep[a] = (sigs[0][0][a], sigs[1][0][a])
        return tuple(sorted(keep.items()))
    if op == "Split":
        rest = tuple(sorted((ax, v) for ax, v in s[0].items() if ax != attrs["axis"]))
        _, again = _cut(form, sigs[0], attrs["axis"])
        return [tuple(sorted([*rest, (attrs["axis"], p)])) if p else rest for p in again]
    if op in ("Add", "Mul") and form.name != "smul":
        return tuple(sorted((ax, v) for ax, v in s[0].items() if s[1].get(ax) == v))
    if op == "MatMul":
        return tuple(sorted({**({0: s[0][0]} if 0 in s[0] else {}), **({1: s[1][1]} if 1 in s[1] else {})}.items()))
    if op == "Transpose":
        return tuple(sorted((1 - ax, v) for ax, v in s[0].items()))
    if op == "Conv":
        out = {0: s[0][0]} if 0 in s[0] else {}
        if attrs["group"] == 1 and 0 in s[1] and all(bias.get(0) == s[1][0] for bias in s[2:]):
            out[1] = s[1][0]
        return tuple(sorted(out.items()))
    d = ops.get(op)
    if (d.elementwise and d.arity == (1, 1)) or form.name == "smul":
        return tuple(sorted(s[0].items()))
    if ops.PLANEWISE in d.traits:
        return tuple(sorted((ax, v) for ax, v in s[0].items() if ax < 2))
    return ()


@dataclass
class _State:
    """A compact graph with every value evaluated: what extending it or pruning a pair needs."""

    nodes: tuple[NodeSpec, ...]
    values: list[_Value]
    producer: list[int]  # node index of each value, -1 for pool inputs
    users: list[list[int]]  # node indices reading each value
    used: list[int]  # how many tensors of each pool class the graph uses (a prefix, by canonical order)
    heads: list[str]  # each node's expression with input names
    outputs: list[list[int]]  # each node's output value ids


_VALUES_KEPT = 100_000
"""`_Context.values` is emptied past this many nodes (a few hundred MB per worker at TASO's shapes)."""


def _build(
    ctx: _Context, nodes: Sequence[NodeSpec], replace: dict[str, tuple[np.ndarray, ...]] | None = None
) -> _State:
    """Evaluate a compact graph; ``replace`` swaps the values of the nodes with these heads for other ones.
    Nodes that do not depend on a replaced one are looked up in ``ctx.values`` first."""
    st = _State(
        tuple(nodes), list(ctx.inputs), [-1] * ctx.n_inputs, [[] for _ in ctx.inputs], [0] * len(ctx.first), [], []
    )
    if len(ctx.values) > _VALUES_KEPT:
        ctx.values.clear()
    tainted: set[int] = set()  # values that depend on a replaced node
    for k, (f, args) in enumerate(nodes):
        for a in args:
            if a < ctx.n_inputs:
                c = ctx.cls[a]
                st.used[c] = max(st.used[c], ctx.index[a] + 1)
            if k not in st.users[a]:
                st.users[a].append(k)
        vals = [st.values[a] for a in args]
        head = f"{ctx.forms[f].name}({','.join(v.concrete for v in vals)})"
        pure = tainted.isdisjoint(args)
        if not pure or head not in ctx.values:
            applied = ctx.apply(f, tuple(v.sig for v in vals))
            assert applied is not None, "a stored graph no longer type-checks"
            outs = ctx.evaluate(f, vals, *applied)
            if pure:
                ctx.values[head] = outs
        else:
            outs = ctx.values[head]
        if replace and head in replace and len(outs) == 1:
            runs = replace[head]
            outs = [_Value(outs[0].sig, runs, value_digest(outs[0].sig[0], runs), "?", "?")]
            pure = False
        if not pure:
            tainted.update(range(len(st.values), len(st.values) + len(outs)))
        st.heads.append(head)
        st.outputs.append(list(range(len(st.values), len(st.values) + len(outs))))
        for v in outs:
            st.values.append(v)
            st.producer.append(k)
            st.users.append([])
    return st


def _sinks(ctx: _Context, st: _State) -> list[int]:
    return [v for v in range(ctx.n_inputs, len(st.values)) if not st.users[v]]


def _removable(ctx: _Context, st: _State, k: int, also_read: set[int] = frozenset()) -> bool:  # type: ignore[assignment]
    """Node ``k`` is a sink whose removal leaves its arguments as outputs (or they are pool tensors)."""
    if any(st.users[o] or o in also_read for o in st.outputs[k]):
        return False
    return all(a < ctx.n_inputs or (st.users[a] == [k] and a not in also_read) for a in st.nodes[k][1])
