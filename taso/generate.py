"""Enumerate every small graph over an op set and an input pool, and pair those that compute the same thing.

Graphs grow one op at a time, level by level (TASO's generator, pruned the way Quartz prunes circuits):

- *Fingerprint classes.* Every graph is fingerprinted incrementally (`taso.fingerprint`: each new op is
  evaluated once, over Z_p, on top of its parent's values; enumeration uses the first of the two evaluations
  and every pair is confirmed with both). A worker evaluates one op form over all the children in its chunk
  that apply it to arguments of the same signatures in one numpy call (`_field_batch`). Graphs of equal fingerprint form a class; only the class's cheapest
  member, its *representative*, is extended into larger graphs. A larger graph built on a non-representative
  is implied by the rule (member -> representative) plus the larger graph built on the representative.
- *Canonical input order.* Inputs of one pool class (same shape and kind) are interchangeable, so a graph must
  use them in order of first use (``x0`` before ``x1``): graphs equal up to renaming inputs are built once.
- *Canonical node order.* A new op must be the largest removable sink (by its structure, names aside), so one
  DAG is not built once per topological order; commutative ops take their arguments in a fixed order; an op
  applied twice to the same arguments is never built, nor two forms that give the same node.
- *Last level.* Graphs of the largest size are never extended, so only those whose fingerprint is seen twice,
  or was seen at a smaller size, are looked at again. Workers send back 8 bytes (the fingerprint) and a
  20-byte row (parent, form, up to three arguments) per graph; rows wait in a scratch file, and the structure
  hash and cost that rank a class's members are worked out only for the graphs kept.
- *Pairs.* Each non-representative member gives a candidate (member, representative). A pair is dropped when
  both sides end in the same op on equal arguments (implied by the smaller pair, by congruence); when both
  share a common subgraph that a fresh input can stand for and the pair still holds (implied by the smaller
  rule over that input; rules are read as schemas over shapes of the same rank); when it is a special case
  of the pair with one input's uses split over two inputs; or when it repeats a pair up to renaming inputs.
  Last, `taso.fold` drops rules that strictly smaller kept rules derive in one rewrite from each side.

Derivability of every dropped pair from the kept rules is checked by tests/test_generate.py on small settings.
The pool's tensors and the op forms are data (`Settings`); graph outputs are the values no op consumes.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.metadata
import itertools
import json
import multiprocessing
import os
import shutil
import tempfile
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from taso import ops, store
from taso.errors import BadInput
from taso.field import P
from taso.fingerprint import EVALUATIONS, combine, evaluation_seeds, field_apply, input_values, value_digest
from taso.fold import fold
from taso.ir import Graph, Node, TensorType, WeightData, lint, make_attrs
from taso.rules import Rule, census

Shape = tuple[int, ...]
Splits = tuple[tuple[int, tuple[int, ...]], ...]
"""Where a value may be split: (axis, part sizes) left by the concat it descends from (TASO's split tree)."""
Sig = tuple[Shape, str, Splits]
"""What decides whether a form applies to a value: shape, kind ('a' activation, 'w' weight or constant), splits."""
NodeSpec = tuple[int, tuple[int, ...]]
"""A node of a compact graph: (form index, argument value ids); pool inputs are ids 0..n-1, outputs follow."""

ACTIVATION, WEIGHT = "a", "w"
MAX_ARITY = 3
"""Most arguments of a form (a Conv with a bias); a spooled row is (parent, form, arguments padded with -1)."""
ROW = 2 + MAX_ARITY
MIN_IMAGE = 2
"""Convs and pools must leave images at least this wide: on a single pixel every stride and padding reads the
same taps, and the coincidences that follow (stride 1 = stride 2) hold for no real model."""


# ---- settings -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputClass:
    """Interchangeable pool tensors: ``count`` tensors named ``prefix0``, ``prefix1``, ... of one shape and kind."""

    prefix: str
    shape: Shape
    kind: str  # "activation" or "weight"
    count: int
    splits: Splits = ()
    """Where these tensors may be split, as if each were a concat of these parts: an input that stands for
    a merged op's output (a conv over concatenated kernels), so rules about its Split can be found."""

    def as_dict(self) -> dict:
        d = {"prefix": self.prefix, "shape": list(self.shape), "kind": self.kind, "count": self.count}
        return {**d, "splits": {str(a): list(v) for a, v in self.splits}} if self.splits else d


@dataclass(frozen=True)
class Form:
    """One way to apply an op: ``attrs`` gives the attributes for argument signatures, or None where it does not
    apply (shapes are then checked by `taso.ops.infer`)."""

    name: str
    op: str
    arity: int
    attrs: Callable[[Sequence[Sig]], dict | None]
    commutative: bool = False
    doc: str = ""
    cut: str = "parts"
    """For a Split: cut at every part boundary (``parts``), or in two, keeping the leading parts together
    (``head``) or the trailing ones (``tail``), which may then be split again: a split of a split."""


def _rank(s: Sig) -> int:
    return len(s[0])


def _conv(stride: int, same: bool, bias: bool = False) -> Callable[[Sequence[Sig]], dict | None]:
    def attrs(sigs: Sequence[Sig]) -> dict | None:
        (xs, xk, _), (ws, wk, _) = sigs[:2]
        if bias and (sigs[2][1] != WEIGHT or sigs[2][0] != ws[:1]):  # one bias per output channel
            return None
        if len(xs) != 4 or len(ws) != 4 or xk != ACTIVATION or wk != WEIGHT or xs[1] % ws[1]:
            return None
        group, (kh, kw) = xs[1] // ws[1], ws[2:]
        if group not in (1, xs[1]) or ws[0] % group or (same and not (kh % 2 and kw % 2)):
            return None
        pads = (kh // 2, kw // 2, kh // 2, kw // 2) if same else (0, 0, 0, 0)
        return {
            "kernel_shape": (kh, kw),
            "strides": (stride, stride),
            "pads": pads,
            "dilations": (1, 1),
            "group": group,
        }

    return attrs


def _pool(extra: dict) -> Callable[[Sequence[Sig]], dict | None]:
    def attrs(sigs: Sequence[Sig]) -> dict | None:
        s = sigs[0]
        if _rank(s) != 4 or s[1] != ACTIVATION:
            return None
        return {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), **extra}

    return attrs


def _enlarge(sigs: Sequence[Sig]) -> dict | None:
    shape, kind, _ = sigs[0]
    if len(shape) != 4 or kind != WEIGHT or shape[2:] == (3, 3) or any(d > 3 or d % 2 == 0 for d in shape[2:]):
        return None
    return {"kernel_shape": (3, 3)}


def _concat(axis: int) -> Callable[[Sequence[Sig]], dict | None]:
    return lambda sigs: {"axis": axis} if _rank(sigs[0]) == _rank(sigs[1]) > axis else None


def _split(name: str, axis: int, doc: str, cut: str = "parts") -> Form:
    least = 2 if cut == "parts" else 3  # cutting two parts in two is the plain split

    def attrs(sigs: Sequence[Sig]) -> dict | None:
        return {"axis": axis} if len(dict(sigs[0][2]).get(axis, ())) >= least else None

    return Form(name, "Split", 1, attrs, doc=doc, cut=cut)


def _cut(form: Form, sig: Sig, axis: int) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """A Split form's sizes on a value, and the parts each output may be split into again (empty: none)."""
    parts = dict(sig[2])[axis]
    if form.cut == "head":
        return (sum(parts[:-1]), parts[-1]), [parts[:-1], ()]
    if form.cut == "tail":
        return (parts[0], sum(parts[1:])), [(), parts[1:]]
    return parts, [()] * len(parts)


def _constant(shape: Shape) -> Callable[[Sequence[Sig]], dict | None]:
    return lambda sigs: {"shape": tuple(shape), "dtype": "float32"}


def _elementwise_forms() -> list[Form]:
    """A form for each unary element-wise op of the catalogue, named as the op, on any tensor of rank >= 1: a
    new activation enters the generator by its catalogue entry alone."""
    return [
        Form(op.name.lower(), op.name, 1, lambda s: {} if _rank(s[0]) else None)
        for op in ops.OPS.values()
        if op.elementwise and op.arity == (1, 1)
    ]


FORMS: dict[str, Form] = {
    f.name: f
    for f in [
        Form("matmul", "MatMul", 2, lambda s: {} if _rank(s[0]) == _rank(s[1]) == 2 else None, doc="2-D matmul"),
        Form("add", "Add", 2, lambda s: {} if s[0][0] == s[1][0] and _rank(s[0]) else None, True, "same shapes"),
        Form("mul", "Mul", 2, lambda s: {} if s[0][0] == s[1][0] and _rank(s[0]) else None, True, "same shapes"),
        Form("smul", "Mul", 2, lambda s: {} if _rank(s[0]) and s[1][0] == () else None, doc="by a 0-d scalar"),
        *_elementwise_forms(),
        Form("conv_s1_same", "Conv", 2, _conv(1, True), doc="stride 1, SAME padding; group 1 or depthwise"),
        Form("conv_s1_valid", "Conv", 2, _conv(1, False), doc="stride 1, no padding"),
        Form("conv_s2_same", "Conv", 2, _conv(2, True), doc="stride 2, SAME padding"),
        Form("conv_s2_valid", "Conv", 2, _conv(2, False), doc="stride 2, no padding"),
        Form("conv_s1_same_bias", "Conv", 3, _conv(1, True, True), doc="stride 1, SAME padding, with a bias"),
        Form("conv_s1_valid_bias", "Conv", 3, _conv(1, False, True), doc="stride 1, no padding, with a bias"),
        Form("conv_s2_same_bias", "Conv", 3, _conv(2, True, True), doc="stride 2, SAME padding, with a bias"),
        Form("conv_s2_valid_bias", "Conv", 3, _conv(2, False, True), doc="stride 2, no padding, with a bias"),
        Form("avgpool3", "AveragePool", 1, _pool({"count_include_pad": 1}), doc="3x3, stride 1, SAME"),
        Form("maxpool3", "MaxPool", 1, _pool({}), doc="3x3, stride 1, SAME"),
        Form("enlarge3", "Enlarge", 1, _enlarge, doc="zero-pad a weight kernel to 3x3"),
        Form("concat0", "Concat", 2, _concat(0)),
        Form("concat1", "Concat", 2, _concat(1)),
        _split("split0", 0, "at the boundary of the concat it descends from"),
        _split("split1", 1, "at the boundary of the concat it descends from"),
        _split("split1_head", 1, "in two, the leading parts kept together", "head"),
        _split("split1_tail", 1, "in two, the trailing parts kept together", "tail"),
        Form("transpose", "Transpose", 1, lambda s: {"perm": (1, 0)} if _rank(s[0]) == 2 else None),
        Form("ones", "Ones", 0, _constant((2, 4)), doc="shape 2x4"),
        Form("eye", "Eye", 0, _constant((4, 4)), doc="4x4"),
        Form("conv_identity", "ConvIdentity", 0, _constant((4, 1, 3, 3)), doc="depthwise 3x3 identity kernel"),
        Form("pool_kernel", "PoolKernel", 0, _constant((4, 1, 3, 3)), doc="depthwise 3x3 kernel of 1/9"),
    ]
}

TASO_FORMS = tuple(
    f
    for f, form in FORMS.items()
    if ops.TASO in ops.get(form.op).traits and not f.endswith("_bias") and form.cut == "parts"
)
"""The forms TASO's generator uses, over its ops (`taso.ops.TASO`; its fused conv+relu is conv followed by relu here; a concat there has two
parts, so the split forms that group three or more parts never apply)."""
BIAS_FORMS = tuple(f for f in FORMS if f.endswith("_bias"))
"""Convs with a bias (``--ops +bias``): exporters write a bias into nearly every Conv (a BatchNorm folds into it),
and a rule over TASO's bias-less convs matches none of those. The shipped store is TASO's set plus these."""

TASO_POOL = (
    InputClass("x", (2, 4), "activation", 3),
    InputClass("w", (4, 4), "weight", 3),
    InputClass("X", (2, 4, 5, 5), "activation", 2),
    InputClass("K", (4, 4, 3, 3), "weight", 2),
    InputClass("Kp", (4, 4, 1, 1), "weight", 1),
    InputClass("Kr", (4, 4, 1, 3), "weight", 1),
    InputClass("Kc", (4, 4, 3, 1), "weight", 1),
    InputClass("D", (4, 1, 3, 3), "weight", 1),
    InputClass("s", (), "weight", 1),
)
"""TASO's kinds of input tensors, at TASO's shapes (2-D 2x4 activations and 4x4 weights, 2x4x5x5 images)."""
BIASES = InputClass("b", (4,), "weight", 2)
"""Added to the default pool when a biased conv form is chosen: two, so that sibling convs with their own biases
can merge."""


@dataclass(frozen=True)
class Settings:
    """Everything that decides the rule set: same settings, same rules."""

    max_ops: int = 3
    forms: tuple[str, ...] = TASO_FORMS
    pool: tuple[InputClass, ...] = TASO_POOL
    seed: int = 0
    constants: tuple[tuple[str, Shape], ...] = ()
    """Shape overrides of the constant forms (ones, eye, conv_identity, pool_kernel)."""
    prune_pairs: bool = True
    """Drop pairs implied by smaller ones, and fold (`taso.fold`) rules that smaller kept rules derive; off,
    every candidate becomes a rule (to check what pruning drops)."""
    extend_all: bool = False
    """Extend every graph, not only each class's representative (no Quartz pruning): to check what it drops."""

    def form_list(self) -> list[Form]:
        shapes = dict(self.constants)
        out = []
        for name in self.forms:
            f = FORMS[name]
            if name in shapes:
                f = Form(f.name, f.op, f.arity, _constant(tuple(shapes[name])), f.commutative, f.doc)
            out.append(f)
        return out

    def as_dict(self) -> dict:
        return {
            "max_ops": self.max_ops,
            "forms": list(self.forms),
            "pool": [c.as_dict() for c in self.pool],
            "constants": {k: list(v) for k, v in self.constants},
            "seed": self.seed,
            "prune_pairs": self.prune_pairs,
            "extend_all": self.extend_all,
        }


# ---- one graph's values, evaluated incrementally ------------------------------------------------------------


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
                runs = tuple(input_values(name, ic.shape, s) for s, _ in seeds)
                kind = ACTIVATION if ic.kind == "activation" else WEIGHT
                sig: Sig = (tuple(ic.shape), kind, ic.splits)
                self.inputs.append(_Value(sig, runs, value_digest(ic.shape, runs), ic.prefix, name))
                self.names.append(name)
                self.cls.append(c)
                self.index.append(i)
        self.n_inputs = len(self.names)
        self._memo: dict[tuple, tuple[dict, tuple[Sig, ...]] | None] = {}
        self._menu: dict[tuple, list] = {}
        self.values: dict[str, list[_Value]] = {}
        """Evaluated nodes by expression (input names included: equal text, equal values), for `_build`: a
        pair's graphs share most of their nodes with the pairs judged just before."""

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
        if form.op == "Split":
            sizes, _ = _cut(form, sigs[0], attrs["axis"])
            types.append(TensorType("int64", (len(sizes),)))
            consts.append(np.array(sizes, dtype=np.int64))
            n_out = len(sizes)
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
            if form.op == "Split":
                xs.append(np.array(_cut(form, args[0].sig, attrs["axis"])[0], dtype=np.int64))
            outs_per_run.append(field_apply(form.op, xs, attrs, len(out_sigs), key))
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


# ---- extension ----------------------------------------------------------------------------------------------


def _candidates(ctx: _Context, st: _State) -> list[int]:
    """Values a new op may read: every node output, the pool tensors used so far and the next two of each
    class (fresh tensors must then be taken in order: see `_canonical_fresh`)."""
    out = list(range(ctx.n_inputs, len(st.values)))
    for c, first in enumerate(ctx.first):
        out.extend(range(first, first + min(st.used[c] + 2, ctx.settings.pool[c].count)))
    return sorted(out)


def _canonical_fresh(ctx: _Context, st: _State, args: Sequence[int]) -> bool:
    """Fresh pool tensors must be the next unused of their class, in argument order (x0 before x1)."""
    nxt = list(st.used)
    for a in args:
        if a < ctx.n_inputs:
            c, i = ctx.cls[a], ctx.index[a]
            if i > nxt[c]:
                return False
            nxt[c] += i == nxt[c]
    return True


def _sink_nodes(ctx: _Context, st: _State) -> list[tuple[str, set[int]]]:
    """(structure, values it touches) of each removable sink node: what `_is_largest_sink` compares against."""
    out = []
    for k in range(len(st.nodes)):
        if _removable(ctx, st, k):
            other = st.values[st.outputs[k][0]].abstract
            touched = {*st.outputs[k], *(a for a in st.nodes[k][1] if a >= ctx.n_inputs)}
            out.append((other[: other.rindex("[")] if len(st.outputs[k]) > 1 else other, touched))
    return out


def _is_largest_sink(sink_nodes: list[tuple[str, set[int]]], args: Sequence[int], abstract: str) -> bool:
    """No other removable sink node of the new graph is structurally larger than the new op (names aside); a
    sink whose outputs or arguments the new op reads is no longer removable."""
    return all(other <= abstract or not touched.isdisjoint(args) for other, touched in sink_nodes)


def _text_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _children(ctx: _Context, st: _State, counts: Counter) -> Iterator[tuple[int, tuple[int, ...], tuple[Sig, ...]]]:
    """The new nodes the canonical orders allow on top of ``st``: (form, arguments, argument signatures)."""
    by_sig: dict[Sig, list[int]] = {}
    for v in _candidates(ctx, st):
        by_sig.setdefault(st.values[v].sig, []).append(v)
    existing = set(st.nodes)
    sink_nodes = _sink_nodes(ctx, st)
    for f, sc, _ in ctx.applicable(tuple(sorted(by_sig))):
        form = ctx.forms[f]
        for args in itertools.product(*(by_sig[s] for s in sc)):
            if form.commutative and args[0] > args[1]:
                counts["commuted argument order"] += 1
                continue
            if (f, args) in existing:
                counts["repeated op (same op, same arguments)"] += 1
                continue
            if not _canonical_fresh(ctx, st, args):
                counts["input renaming (first-use order)"] += 1
                continue
            if all(a < ctx.n_inputs or not st.users[a] for a in args):
                abstract = f"{form.name}({','.join(st.values[a].abstract for a in args)})"
                if not _is_largest_sink(sink_nodes, args, abstract):
                    counts["node order (new op not the largest sink)"] += 1
                    continue
            yield f, args, sc


def _fingerprints(
    ctx: _Context, states: list[_State], children: list[tuple[int, int, tuple[int, ...], tuple]]
) -> np.ndarray:
    """The first-evaluation fingerprint of each child (parent, form, arguments, argument signatures). A form is
    evaluated once over every child that applies it to arguments of the same signatures (`_field_batch`)."""
    groups: dict[tuple, list[int]] = {}
    for j, (_, f, _, sc) in enumerate(children):
        groups.setdefault((f, sc), []).append(j)
    new_digests: list[list[int]] = [[] for _ in children]
    for (f, sc), js in groups.items():
        attrs, out_sigs = ctx.apply(f, sc)  # type: ignore[misc]
        xs = [np.stack([states[children[j][0]].values[children[j][2][p]].runs[0] for j in js]) for p in range(len(sc))]
        if ctx.forms[f].op == "Split":
            xs.append(np.array(_cut(ctx.forms[f], sc[0], attrs["axis"])[0], dtype=np.int64))
        for sig, out in zip(out_sigs, _field_batch(ctx.forms[f].op, xs, attrs, len(out_sigs), ctx.keys[0], len(js))):
            for j, d in zip(js, _row_digests(sig[0], out)):
                new_digests[j].append(d)
    sinks = [[(v, st.values[v].digest) for v in _sinks(ctx, st)] for st in states]
    fps = np.empty(len(children), dtype=np.uint64)
    for j, (i, _, args, _) in enumerate(children):
        fps[j] = combine([d for v, d in sinks[i] if v not in args] + new_digests[j])
    return fps


def _row_digests(shape: Shape, batch: np.ndarray) -> list[int]:
    """`value_digest` of each row of a batch (one evaluation)."""
    head = hashlib.blake2b(repr(tuple(shape)).encode(), digest_size=8)
    out = []
    for row in np.ascontiguousarray(batch, dtype=np.int64):
        h = head.copy()
        h.update(row.data)
        out.append(int.from_bytes(h.digest(), "little"))
    return out


def _field_batch(op: str, xs: list[np.ndarray], attrs: dict, n_out: int, key: int, b: int) -> tuple[np.ndarray, ...]:
    """`field_apply` over a batch of ``b``: every argument and output carries a leading batch axis. The batch
    is folded into an axis the op treats independently, so each row is exactly what `field_apply` gives alone
    (tests/test_generate.py checks every form)."""
    if op == "Conv":  # the batch becomes groups: row i's channels meet only row i's kernel (and bias)
        x, w, *bias = xs
        n, c = x.shape[1], x.shape[2]
        x2 = x.swapaxes(0, 1).reshape(n, b * c, *x.shape[3:])
        args = [x2, w.reshape(-1, *w.shape[2:]), *(v.reshape(-1) for v in bias)]
        (y,) = field_apply(op, args, {**attrs, "group": b * attrs["group"]}, 1, key)
        return (y.reshape(n, b, -1, *y.shape[2:]).swapaxes(0, 1),)
    d = ops.get(op)
    if ops.PLANEWISE in d.traits:  # maps of each (image, channel): the batch joins the images
        (y,) = field_apply(op, [xs[0].reshape(-1, *xs[0].shape[2:])], attrs, 1, key)
        return (y.reshape(b, -1, *y.shape[1:]),)
    if "axis" in d.attrs:  # Concat, Split (a Split's second argument, its sizes, is not batched)
        return field_apply(op, xs, {**attrs, "axis": attrs["axis"] + 1}, n_out, key)
    if "perm" in d.attrs:
        return field_apply(op, xs, {"perm": (0, *(p + 1 for p in attrs["perm"]))}, 1, key)
    if ops.BATCH_POLYMORPHIC in d.traits:  # the batch axis lines up: broadcast the rest
        rank = max(x.ndim for x in xs)
        return field_apply(op, [x.reshape(b, *(1,) * (rank - x.ndim), *x.shape[1:]) for x in xs], attrs, n_out, key)
    if not xs:  # a constant: the same for every row
        return tuple(np.broadcast_to(y, (b, *y.shape)) for y in field_apply(op, [], attrs, n_out, key))
    rows = [field_apply(op, [x[i] for x in xs], attrs, n_out, key) for i in range(b)]
    return tuple(np.stack([r[k] for r in rows]) for k in range(n_out))


def _structure(ctx: _Context, nodes: Sequence[NodeSpec], rename: dict[int, int]) -> str:
    """A compact graph's sorted node expressions, pool tensors renamed by ``rename``: equal text, equal graphs."""
    sigs = [v.sig for v in ctx.inputs]
    text = [ctx.names[rename.get(a, a)] for a in range(ctx.n_inputs)]
    heads = []
    for f, args in nodes:
        applied = ctx.apply(f, tuple(sigs[a] for a in args))
        assert applied is not None
        head = f"{ctx.forms[f].name}({','.join(text[a] for a in args)})"
        heads.append(head)
        sigs.extend(applied[1])
        text.extend(f"{head}[{i}]" if len(applied[1]) > 1 else head for i in range(len(applied[1])))
    return "|".join(sorted(heads))


def _cost(ctx: _Context, nodes: Sequence[NodeSpec]) -> int:
    """How many of a compact graph's ops read an activation."""
    sigs = [v.sig for v in ctx.inputs]
    cost = 0
    for f, args in nodes:
        arg_sigs = tuple(sigs[a] for a in args)
        cost += any(sg[1] == ACTIVATION for sg in arg_sigs)
        sigs.extend(ctx.apply(f, arg_sigs)[1])  # type: ignore[index]
    return cost


# ---- the level-by-level driver ------------------------------------------------------------------------------


@dataclass
class _Class:
    level: int
    members: list[tuple[tuple[NodeSpec, ...], tuple[int, ...] | None]]
    """(nodes, outputs) of each member, cheapest (the representative) first; outputs None means the sinks."""
    keys: set[int]


@dataclass
class Result:
    """What a run found, and what each pruning removed."""

    settings: Settings
    rules: list[tuple[str, Rule]]
    """(class fingerprint, rule) in a deterministic order."""
    graphs: list[int]
    """Graphs built per op count (0 ops: pool tensors as outputs)."""
    classes: int
    candidates: int
    pruned: Counter = field(default_factory=Counter)


_WORKER: dict[str, Any] = {}


def _init_worker(settings: Settings, runs: int = EVALUATIONS) -> None:
    _WORKER["ctx"] = _Context(settings, runs)


Imap = Callable[[Callable, list], Iterator]


@contextlib.contextmanager
def _workers(workers: int, settings: Settings, runs: int) -> Iterator[Imap]:
    """``imap`` over worker processes, each with its own `_Context` (this process's, for one worker)."""
    if workers <= 1:
        _init_worker(settings, runs)
        yield map
        return
    pool = _fork_pool(workers, (settings, runs))
    try:
        yield pool.imap
    finally:
        pool.terminate()
        pool.join()
        gc.unfreeze()


def _fork_pool(workers: int, init_args: tuple) -> Any:
    """Worker processes, forked where the platform can (cheap start). The parent's objects are frozen out of
    the garbage collector first (callers unfreeze them after): a collection in a child would otherwise touch,
    and so copy, every page."""
    gc.freeze()
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return multiprocessing.get_context(method).Pool(workers, _init_worker, init_args)


def _work(job: tuple[int, list[tuple[NodeSpec, ...]]]) -> tuple[int, np.ndarray, np.ndarray, Counter]:
    """Extend a chunk of representatives, compactly: each child's first-evaluation fingerprint (uint64) and
    (parent, form, arg0, arg1) (int32; -1 for no argument)."""
    start, reps = job
    ctx = _WORKER["ctx"]
    counts: Counter = Counter()
    states = [_build(ctx, nodes) for nodes in reps]
    children = [(i, f, args, sc) for i, st in enumerate(states) for f, args, sc in _children(ctx, st, counts)]
    rows = [(start + i, f, *args, *(-1,) * (MAX_ARITY - len(args))) for i, f, args, _ in children]
    return len(reps), _fingerprints(ctx, states, children), np.array(rows, dtype=np.int32).reshape(-1, ROW), counts


def _chunks(items: list, workers: int, most: int) -> list[tuple[int, list]]:
    """``items`` as (start, slice) jobs: about 16 per worker, at most ``most`` items each."""
    size = max(1, min(most, len(items) // (workers * 16) or 1))
    return [(i, items[i : i + size]) for i in range(0, len(items), size)]


def _describe(job: tuple[int, list[tuple[NodeSpec, ...]]]) -> np.ndarray:
    """For each graph: its structure hash (equal hashes, equal graphs, input names included) and how many of
    its ops read an activation (what ranks a class's members: weight-only ops are folded ahead of time)."""
    ctx = _WORKER["ctx"]
    out = [(_text_hash(_structure(ctx, nodes, {})), _cost(ctx, nodes)) for nodes in job[1]]
    return np.array(out, dtype=np.uint64).reshape(-1, 2)


def _extend_level(
    imap: Imap, workers: int, frontier: list, last: bool, classes: dict[int, _Class], tick: Callable
) -> tuple[int, np.ndarray, np.ndarray, list[tuple[NodeSpec, ...]]]:
    """Extend every representative in ``frontier``, in order. Returns how many graphs were built and, for those
    worth a look (at the last level only fingerprints seen twice or seen before; all of them otherwise), their
    (fingerprint, structure hash) as uint64 pairs, their costs and their nodes. The children's rows wait in a
    scratch file meanwhile, so memory holds 8 bytes per graph built."""
    with tempfile.TemporaryFile() as fp_file, tempfile.TemporaryFile() as row_file:
        for n, fps, rows, counts in imap(_work, _chunks(frontier, workers, 256)):
            fps.tofile(fp_file)
            rows.tofile(row_file)
            tick(n, len(fps), counts)
        fp_file.seek(0)
        row_file.seek(0)
        fps = np.fromfile(fp_file, dtype=np.uint64)
        picked = _colliding(fps, classes) if last else np.arange(len(fps))
        rows = (
            np.memmap(row_file, dtype=np.int32, mode="r").reshape(-1, ROW)[picked]
            if len(fps)
            else np.zeros((0, ROW), np.int32)
        )
    nodes = [(*frontier[p], (f, tuple(a for a in args if a >= 0))) for p, f, *args in rows.tolist()]
    described = np.concatenate([np.zeros((0, 2), np.uint64), *imap(_describe, _chunks(nodes, workers, 4096))])
    return len(fps), np.stack([fps[picked], described[:, 0]], axis=1), described[:, 1], nodes


Progress = Callable[[str, int, int, dict], None]
"""progress(stage, done, total, counts): called as representatives are extended."""


def generate(settings: Settings, workers: int | None = None, progress: Progress | None = None) -> Result:
    """Enumerate, fingerprint, prune and pair: the candidate rules of ``settings``."""
    workers = workers or os.cpu_count() or 1
    ctx = _Context(settings, 1)
    classes: dict[int, _Class] = {}
    pruned: Counter = Counter()
    graphs = [_seed_classes(ctx, classes)]
    frontier: list[tuple[NodeSpec, ...]] = [()]
    for level in range(1, settings.max_ops + 1):
        last = level == settings.max_ops
        seen = [0, 0]

        def tick(
            n: int, built: int, counts: Counter, seen: list = seen, total: int = len(frontier), level: int = level
        ) -> None:
            seen[0] += n
            seen[1] += built
            pruned.update(counts)
            if progress:
                progress(f"{level} ops", seen[0], total, {"graphs": sum(graphs) + seen[1], "classes": len(classes)})

        with _workers(workers, settings, 1) as imap:
            built, ids, costs, nodes = _extend_level(imap, workers, frontier, last, classes, tick)
        graphs.append(built)
        frontier = _merge(classes, level, ids, costs, nodes, last, settings.extend_all, pruned)
    rules, candidates = _pairs(ctx, classes, pruned, workers)
    if settings.prune_pairs:
        keep, pruned["derivable from smaller kept rules (one rewrite from each side)"] = fold([r for _, r in rules])
        rules = [fr for fr, k in zip(rules, keep) if k]
    return Result(settings, rules, graphs, len(classes), candidates, pruned)


def _merge(
    classes: dict[int, _Class],
    level: int,
    ids: np.ndarray,
    costs: np.ndarray,
    nodes: list[tuple[NodeSpec, ...]],
    last: bool,
    extend_all: bool,
    pruned: Counter,
) -> list[tuple[NodeSpec, ...]]:
    """File a level's graphs into fingerprint classes; the next frontier: each new class's representative (the
    cheapest member, then the smallest structure hash), or every new graph with ``extend_all``."""
    _, first = np.unique(ids, axis=0, return_index=True)
    pruned["same graph built twice"] += len(ids) - len(first)
    first.sort()
    new: dict[int, dict[int, tuple[int, tuple[NodeSpec, ...]]]] = {}
    everything: list[tuple[NodeSpec, ...]] = []
    for (fp, key), cost, g in zip(ids[first].tolist(), costs[first].tolist(), [nodes[i] for i in first]):
        old = classes.get(fp)
        if old is not None:
            if key in old.keys:
                pruned["same graph built twice"] += 1
                continue
            old.keys.add(key)
            old.members.append((g, None))
            everything.append(g)
            pruned["not extended (class has a cheaper representative)"] += not (last or extend_all)
            continue
        bucket = new.setdefault(fp, {})
        if key in bucket:
            pruned["same graph built twice"] += 1
        else:
            bucket[key] = (cost, g)
            everything.append(g)
    frontier = []
    for fp, bucket in new.items():
        ranked = sorted(bucket.items(), key=lambda kv: (kv[1][0], kv[0]))
        classes[fp] = _Class(level, [(g, None) for _, (_, g) in ranked], set(bucket))
        frontier.append(ranked[0][1][1])
        pruned["not extended (class has a cheaper representative)"] += (len(ranked) - 1) * (not (last or extend_all))
    return everything if extend_all else frontier


def _seed_classes(ctx: _Context, classes: dict[int, _Class]) -> int:
    """0-op graphs: one pool tensor, or two, as the outputs (targets of rules such as T(T(x)) = x)."""
    firsts = list(ctx.first)
    picks: list[tuple[int, ...]] = [(a,) for a in firsts]
    for c, first in enumerate(firsts):
        if ctx.settings.pool[c].count > 1:
            picks.append((first, first + 1))
        picks.extend((first, other) for other in firsts[c + 1 :])
    for outs in picks:
        fp = combine([ctx.inputs[a].digest for a in outs])
        classes.setdefault(fp, _Class(0, [((), outs)], {_text_hash("out:" + ",".join(ctx.names[a] for a in outs))}))
    return len(picks)


def _colliding(fps: np.ndarray, classes: dict[int, _Class]) -> np.ndarray:
    """Which of the last level's graphs are worth a look: fingerprint seen twice, or already a class. One sorted
    copy and a binary search: memory stays near two arrays of the level's size (tens of millions at 4 ops)."""
    s = np.sort(fps)
    hot = np.union1d(s[1:][s[1:] == s[:-1]], np.fromiter(classes, dtype=np.uint64, count=len(classes)))
    del s
    if not len(hot):
        return np.zeros(len(fps), dtype=bool)
    return hot[np.minimum(np.searchsorted(hot, fps), len(hot) - 1)] == fps


# ---- pairs into rules ---------------------------------------------------------------------------------------


def _outs(ctx: _Context, st: _State, outs: tuple[int, ...] | None) -> list[int]:
    return list(outs) if outs is not None else _sinks(ctx, st)


Member = tuple[tuple[NodeSpec, ...], "tuple[int, ...] | None"]


def _judge(job: list[tuple[Member, Member]]) -> list[tuple[str, tuple | None, int]]:
    """For each (member, representative): why it is dropped (implied by smaller rules, or a collision of the
    first evaluation that the second one exposes), or its renaming-free key; and its full fingerprint."""
    ctx = _WORKER["ctx"]
    out: list[tuple[str, tuple | None, int]] = []
    r_key: object = None
    for (nodes, outs), (rep_nodes, rep_outs) in job:
        if (rep_nodes, rep_outs) != r_key:  # members of one class come together: build the representative once
            r, r_key = _build(ctx, rep_nodes), (rep_nodes, rep_outs)
        m = _build(ctx, nodes)
        fp = combine(m.values[v].digest for v in _outs(ctx, m, outs))
        if fp != combine(r.values[v].digest for v in _outs(ctx, r, rep_outs)):
            out.append(("first-evaluation collision (the second evaluation differs)", None, fp))
        elif not ctx.settings.prune_pairs:
            out.append(("", None, fp))
        else:
            reason = _implied(ctx, m, outs, r, rep_outs)
            out.append((reason, None, fp) if reason else ("", _pair_key(ctx, m, outs, r, rep_outs), fp))
    return out


def _pairs(
    ctx: _Context, classes: dict[int, _Class], pruned: Counter, workers: int
) -> tuple[list[tuple[str, Rule]], int]:
    """Each non-representative member against its representative, pruned, as rules (member -> representative)."""
    pairs = [(fp, m, k.members[0]) for fp, k in classes.items() for m in k.members[1:]]
    size = max(1, min(64, len(pairs) // (workers * 8) or 1))
    jobs = [[(m, rep) for _, m, rep in pairs[i : i + size]] for i in range(0, len(pairs), size)]
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(ctx.settings, EVALUATIONS)
        verdicts = [v for job in jobs for v in _judge(job)]
    else:
        with _fork_pool(workers, (ctx.settings,)) as pool:
            verdicts = [v for part in pool.imap(_judge, jobs) for v in part]
        gc.unfreeze()
    rules: list[tuple[str, Rule]] = []
    seen: set[tuple] = set()
    full = _Context(ctx.settings)
    for (_, (nodes, outs), (rep_nodes, rep_outs)), (reason, key, fp) in zip(pairs, verdicts):
        if reason:
            pruned[reason] += 1
        elif key is not None and key in seen:
            pruned["same pair up to renaming inputs"] += 1
        else:
            seen.add(key)
            rule = _rule(full, _build(full, nodes), outs, _build(full, rep_nodes), rep_outs)
            rules.append((f"{fp:016x}", rule))
    return rules, len(pairs)


def _implied(ctx: _Context, m: _State, m_spec: tuple | None, r: _State, r_spec: tuple | None) -> str | None:
    """Why the pair (m, r) follows from smaller rules, or None."""
    m_outs, r_outs = _outs(ctx, m, m_spec), _outs(ctx, r, r_spec)
    for km in range(len(m.nodes)):
        if not _removable(ctx, m, km):
            continue
        for kr in range(len(r.nodes)):
            if m.nodes[km][0] == r.nodes[kr][0] and _removable(ctx, r, kr) and _same_args(ctx, m, km, r, kr):
                if _fp_without(ctx, m, m_outs, km) == _fp_without(ctx, r, r_outs, kr):
                    return "common final op (implied by the smaller pair)"
    kinds = {(len(c.shape), ACTIVATION if c.kind == "activation" else WEIGHT) for c in ctx.settings.pool}
    for km, head in enumerate(m.heads):
        if head not in r.heads or len(m.outputs[km]) != 1:
            continue
        shape, kind, _ = m.values[m.outputs[km][0]].sig
        if (len(shape), kind) not in kinds:
            continue  # no pool tensor of that rank and kind: the smaller rule is not in the set
        fresh = tuple(input_values(f"fresh:{head}", shape, s) for s in ctx.seeds)
        m2, r2 = _build(ctx, m.nodes, {head: fresh}), _build(ctx, r.nodes, {head: fresh})
        if combine(m2.values[v].digest for v in m_outs) == combine(r2.values[v].digest for v in r_outs):
            return "common subgraph (implied by the rule over a fresh input)"
    if _specialises(ctx, m, m_spec, r, r_spec):
        return "special case (an input used twice; the pair over two inputs holds)"
    return None


def _specialises(ctx: _Context, m: _State, m_spec: tuple | None, r: _State, r_spec: tuple | None) -> bool:
    """Whether some uses of one pool tensor can read a fresh tensor of its class instead, on both sides, and the
    pair still holds: then it is an instance of that more general pair (which has as many ops)."""
    sides = [(m, m_spec), (r, r_spec)]
    used = [max(a, b) for a, b in zip(m.used, r.used)]
    for a in r_spec or ():
        used[ctx.cls[a]] = max(used[ctx.cls[a]], ctx.index[a] + 1)
    for a in range(ctx.n_inputs):
        c = ctx.cls[a]
        if ctx.index[a] >= used[c] or used[c] >= ctx.settings.pool[c].count:
            continue
        occ = [
            (side, k, i)
            for side, (st, _) in enumerate(sides)
            for k, (_, args) in enumerate(st.nodes)
            for i, x in enumerate(args)
            if x == a
        ]
        occ += [(side, -1, i) for side, (_, spec) in enumerate(sides) for i, x in enumerate(spec or ()) if x == a]
        if not 2 <= len(occ) <= 7:
            continue
        fresh = ctx.first[c] + used[c]
        for mask in range(1, 1 << (len(occ) - 1)):
            moved = {occ[j + 1] for j in range(len(occ) - 1) if mask >> j & 1}
            fps = []
            for side, (st, spec) in enumerate(sides):
                nodes = tuple(
                    (f, tuple(fresh if (side, k, i) in moved else x for i, x in enumerate(args)))
                    for k, (f, args) in enumerate(st.nodes)
                )
                new_spec = (
                    None if spec is None else tuple(fresh if (side, -1, i) in moved else x for i, x in enumerate(spec))
                )
                st2 = _build(ctx, nodes)
                fps.append(combine(st2.values[v].digest for v in _outs(ctx, st2, new_spec)))
            if fps[0] == fps[1]:
                return True
    return False


def _same_args(ctx: _Context, m: _State, km: int, r: _State, kr: int) -> bool:
    dm = [m.values[a].digest for a in m.nodes[km][1]]
    dr = [r.values[a].digest for a in r.nodes[kr][1]]
    if ctx.forms[m.nodes[km][0]].commutative:
        dm, dr = sorted(dm), sorted(dr)
    return dm == dr


def _fp_without(ctx: _Context, st: _State, outs: list[int], k: int) -> int:
    """The fingerprint of the graph left when removable sink node ``k`` is taken off."""
    left = [v for v in outs if st.producer[v] != k]
    left += [a for a in dict.fromkeys(st.nodes[k][1]) if a >= ctx.n_inputs]
    return combine(st.values[v].digest for v in left)


def _pair_key(ctx: _Context, m: _State, m_outs: tuple | None, r: _State, r_outs: tuple | None) -> tuple:
    """The pair's smallest text over every renaming of the pool tensors it uses within their classes."""
    used = [max(a, b) for a, b in zip(m.used, r.used)]
    if r_outs is not None:
        for a in r_outs:
            used[ctx.cls[a]] = max(used[ctx.cls[a]], ctx.index[a] + 1)
    per_class = [
        [
            dict(zip(range(ctx.first[c], ctx.first[c] + u), (ctx.first[c] + i for i in p)))
            for p in itertools.permutations(range(u))
        ]
        for c, u in enumerate(used)
        if u > 1
    ]
    best = None
    for maps in itertools.product(*per_class):
        rename = {k: v for mp in maps for k, v in mp.items()}
        key = tuple(
            "out:" + ",".join(ctx.names[rename.get(a, a)] for a in outs) if outs else _structure(ctx, st.nodes, rename)
            for st, outs in ((m, m_outs), (r, r_outs))
        )
        best = key if best is None or key < best else best
    return best  # type: ignore[return-value]


def _graph(ctx: _Context, st: _State, outs: tuple[int, ...] | None) -> tuple[Graph, list[int]]:
    """The IR graph of a compact graph, and the digest of each of its outputs."""
    names = [ctx.names[a] for a in range(ctx.n_inputs)]
    types: dict[str, TensorType] = {}
    used: set[int] = set(outs or ())
    sizes: dict[str, WeightData] = {}
    nodes = []
    for k, (f, args) in enumerate(st.nodes):
        form = ctx.forms[f]
        attrs, _ = ctx.apply(f, tuple(st.values[a].sig for a in args))  # type: ignore[misc]
        ins = [names[a] for a in args]
        used.update(a for a in args if a < ctx.n_inputs)
        if form.op == "Split":
            cut, _ = _cut(form, st.values[args[0]].sig, attrs["axis"])
            name = "sizes_" + "_".join(map(str, cut))
            sizes[name] = WeightData(np.array(cut, dtype=np.int64))
            types[name] = TensorType("int64", (len(cut),))
            ins.append(name)
        outs_k = [f"t{v - ctx.n_inputs}" for v in st.outputs[k]]
        names.extend(outs_k)
        for o, v in zip(outs_k, st.outputs[k]):
            types[o] = TensorType("float32", st.values[v].sig[0])
        nodes.append(Node(form.op, tuple(ins), tuple(outs_k), make_attrs(attrs)))
    for a in used:
        types[ctx.names[a]] = TensorType("float32", ctx.inputs[a].sig[0])
    order = sorted(used)
    acts = tuple(ctx.names[a] for a in order if ctx.inputs[a].sig[1] == ACTIVATION)
    weights = tuple(ctx.names[a] for a in order if ctx.inputs[a].sig[1] == WEIGHT) + tuple(sorted(sizes))
    out_ids = _outs(ctx, st, outs)
    g = Graph(tuple(nodes), acts, tuple(names[v] for v in out_ids), types, weights, sizes)
    return lint(g), [st.values[v].digest for v in out_ids]


def _rule(ctx: _Context, m: _State, m_outs: tuple | None, r: _State, r_outs: tuple | None) -> Rule:
    src, src_d = _graph(ctx, m, m_outs)
    dst, dst_d = _graph(ctx, r, r_outs)
    order: list[int] = []
    for d in src_d:
        i = next(i for i, e in enumerate(dst_d) if e == d and i not in order)
        order.append(i)
    dst = replace(dst, outputs=tuple(dst.outputs[i] for i in order))
    return Rule(src, dst, census(src, dst))


# ---- settings from flags and config files -------------------------------------------------------------------


def parse_ops(spec: str, base: Sequence[str] = TASO_FORMS) -> tuple[str, ...]:
    """Forms named by ``spec``: comma-separated form names (``conv_s1_same``), op names (``Conv``: all its forms),
    ``taso`` (TASO's set) or ``bias`` (the biased convs); a leading ``+`` or ``-`` adds to or removes from
    ``base``."""
    chosen: list[str] = []
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise BadInput("--ops: no op forms given")
    if items[0][0] in "+-":
        chosen = list(base)
    for item in items:
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if name == "taso":
            names = list(TASO_FORMS)
        elif name == "bias":
            names = list(BIAS_FORMS)
        elif name in FORMS:
            names = [name]
        else:
            names = [f for f, form in FORMS.items() if form.op.lower() == name.lower()]
        if not names:
            ops_ = sorted({f.op for f in FORMS.values()})
            raise BadInput(f"--ops: unknown form or op {name!r}; forms: {', '.join(FORMS)}; ops: {', '.join(ops_)}")
        for n in names:
            if sign == "-" and n in chosen:
                chosen.remove(n)
            elif sign == "+" and n not in chosen:
                chosen.append(n)
    if not chosen:
        raise BadInput("--ops: that leaves no op forms")
    return tuple(chosen)


def load_config(path: Path) -> dict:
    """A config file (JSON, or TOML by its .toml suffix) as a dict, checked for unknown keys."""
    try:
        text = path.read_text()
    except OSError as e:
        raise BadInput(f"{path}: cannot read config ({e.strerror})") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'} ({e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a config file holds a table/object at the top")
    unknown = set(data) - {"max_ops", "ops", "inputs", "constants", "seed"}
    if unknown:
        raise BadInput(f"{path}: unknown config key(s) {sorted(unknown)}; known: max_ops, ops, inputs, constants, seed")
    return data


def settings_from(
    config: dict | None = None, ops: str | None = None, max_ops: int | None = None, seed: int | None = None
) -> Settings:
    """Settings from a config dict (see `load_config`) overridden by flags."""
    try:
        return _settings_from(config or {}, ops, max_ops, seed)
    except (TypeError, ValueError, AttributeError) as e:
        raise BadInput(f"config: a value has the wrong type ({e})") from None


def _settings_from(config: dict, ops: str | None, max_ops: int | None, seed: int | None) -> Settings:
    forms = TASO_FORMS
    if "ops" in config:
        cfg_ops = config["ops"]
        forms = parse_ops(",".join(cfg_ops) if isinstance(cfg_ops, list) else str(cfg_ops))
    if ops:
        forms = parse_ops(ops, forms)
    pool = (*TASO_POOL, BIASES) if set(forms) & set(BIAS_FORMS) else TASO_POOL
    if "inputs" in config:
        pool = tuple(_input_class(i, c) for i, c in enumerate(config["inputs"]))
        prefixes = [c.prefix for c in pool]
        if len(set(prefixes)) != len(prefixes):
            raise BadInput("config inputs: two classes share a prefix")
    constants = tuple((k, tuple(int(d) for d in v)) for k, v in sorted(config.get("constants", {}).items()))
    for k, _ in constants:
        if k not in FORMS or FORMS[k].arity:
            raise BadInput(f"config constants: {k!r} is not a constant form (ones, eye, conv_identity, pool_kernel)")
    n = max_ops if max_ops is not None else int(config.get("max_ops", 3))
    if not 0 <= n <= 6:
        raise BadInput(f"max_ops must be between 0 and 6, got {n}")
    return Settings(n, forms, pool, seed if seed is not None else int(config.get("seed", 0)), constants)


def _input_class(i: int, c: object) -> InputClass:
    where = f"config inputs[{i}]"
    if (
        not isinstance(c, dict)
        or set(c) - {"prefix", "shape", "kind", "count", "splits"}
        or not {"prefix", "shape"} <= set(c)
    ):
        raise BadInput(f"{where}: give prefix, shape and optionally kind (activation|weight), count and splits")
    prefix, kind, count = str(c["prefix"]), c.get("kind", "activation"), c.get("count", 1)
    if not prefix.isidentifier() or prefix[-1].isdigit():
        raise BadInput(f"{where}: prefix {prefix!r} must be a name not ending in a digit")
    if kind not in ("activation", "weight"):
        raise BadInput(f"{where}: kind must be activation or weight, not {kind!r}")
    shape = c["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
        raise BadInput(f"{where}: shape must be a list of positive integers")
    if not isinstance(count, int) or not 1 <= count <= 8:
        raise BadInput(f"{where}: count must be 1..8")
    return InputClass(prefix, tuple(shape), kind, count, _input_splits(where, shape, c.get("splits", {})))


def _input_splits(where: str, shape: list[int], splits: object) -> Splits:
    """``{axis: [part sizes]}`` from a config, checked against the shape."""
    if not isinstance(splits, dict):
        raise BadInput(f"{where}: splits must map an axis to a list of part sizes, e.g. {{1 = [4, 4]}}")
    out = []
    for axis, sizes in splits.items():
        a = int(axis) if str(axis).isdigit() else -1
        if not 0 <= a < len(shape):
            raise BadInput(f"{where}: splits axis {axis!r} is not an axis of shape {shape}")
        if not isinstance(sizes, list) or len(sizes) < 2 or not all(isinstance(d, int) and d > 0 for d in sizes):
            raise BadInput(f"{where}: splits of axis {a} must list two or more positive sizes")
        if sum(sizes) != shape[a]:
            raise BadInput(f"{where}: splits of axis {a} add up to {sum(sizes)}, not the size {shape[a]}")
        out.append((a, tuple(sizes)))
    return tuple(sorted(out))


# ---- the store ----------------------------------------------------------------------------------------------


def provenance(settings: Settings) -> dict:
    """What a stored rule came from: enough to generate it again."""
    try:
        version = importlib.metadata.version("subst")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"tool": "subst generate", "version": version, "settings": settings.as_dict(), "field_prime": P}


def save(result: Result, path: str | Path) -> tuple[int, int]:
    """Add the result's rules to the store at ``path``: (added, already there). Written to a temporary copy
    renamed into place, so an interrupted run leaves the store as it was. Rules already in the store (same
    source and target text) keep their verdicts."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.exists():
            store.open_store(path).close()
            shutil.copyfile(path, tmp)
            db = store.open_store(tmp)
        else:
            db = store.create(tmp)
        db.execute("PRAGMA synchronous = OFF")  # a scratch copy: durability comes from the rename
        have = store.known(db)
        groups: dict[str, list[Rule]] = {}
        kept = 0
        for fp, rule in result.rules:
            row = rule.to_row()
            if (row["src"], row["dst"]) in have:
                kept += 1
                continue
            groups.setdefault(fp, []).append(rule)
        prov = provenance(result.settings)
        added = sum(store.add_rules(db, rules, fp, prov) for fp, rules in groups.items())
        db.close()
        os.replace(tmp, path)
        return added, kept
    finally:
        tmp.unlink(missing_ok=True)
