"""Growing a graph by one op: the children the canonical orders allow, their fingerprints (a form evaluated once
over a batch of children), and the structure text and cost that rank a class's members."""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np

from taso import ops
from taso.generate.evaluate import _Context, _removable, _sinks, _State
from taso.generate.fingerprint import combine, field_apply
from taso.generate.forms import ACTIVATION, NodeSpec, Shape, Sig, _cut


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
