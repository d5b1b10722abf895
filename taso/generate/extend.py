"""Growing a graph by one op: the children the canonical orders allow, their fingerprints (a form evaluated once
over a batch of children), and the structure text and cost that rank a class's members."""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np

from taso import ops
from taso.generate.evaluate import _Context, _removable, _sinks, _State
from taso.generate.fingerprint import field_apply
from taso.generate.forms import ACTIVATION, NodeSpec, Shape, Sig, static_data
from taso.ops.field import residues


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
    """(structure, values it touches) of each removable sink node: what `_rivals` picks from."""
    out = []
    for k in range(len(st.nodes)):
        if _removable(ctx, st, k):
            other = st.values[st.outputs[k][0]].abstract
            touched = {*st.outputs[k], *(a for a in st.nodes[k][1] if a >= ctx.n_inputs)}
            out.append((other[: other.rindex("[")] if len(st.outputs[k]) > 1 else other, touched))
    return out


def _rivals(sink_nodes: list[tuple[str, set[int]]], head: str) -> list[tuple[str, set[int], bool]]:
    """The removable sink nodes that may be structurally larger than a new op whose structure starts with
    ``head`` (its form's name and "("): (structure, values it touches, whether it is larger whatever the op
    reads). One whose structure differs from ``head`` within it is ordered by that prefix alone; one that starts
    with it must be compared with the new op's whole structure."""
    out = []
    for other, touched in sink_nodes:
        same_head = other.startswith(head)
        if same_head or other > head:
            out.append((other, touched, not same_head))
    return out


def _text_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _children(ctx: _Context, st: _State, counts: Counter) -> Iterator[tuple[int, tuple[int, ...], tuple[Sig, ...]]]:
    """The new nodes the canonical orders allow on top of ``st``: (form, arguments, argument signatures).

    Hundreds of argument tuples are tried per graph, most of them refused, so what each test needs is worked out
    once per graph: the values no node reads (a new op on those alone must be the largest removable sink), the
    second unused tensor of each class (the only arguments first-use order can refuse), and per form the sink
    nodes that may outrank it (`_rivals`: a structure is built only where a prefix does not decide)."""
    by_sig: dict[Sig, list[int]] = {}
    for v in _candidates(ctx, st):
        by_sig.setdefault(st.values[v].sig, []).append(v)
    existing: dict[int, set[tuple[int, ...]]] = {}
    for f, args in st.nodes:
        existing.setdefault(f, set()).add(args)
    sink_nodes = _sink_nodes(ctx, st)
    rivals_of: dict[int, list[tuple[str, set[int], bool]]] = {}
    free = {v for vs in by_sig.values() for v in vs if v < ctx.n_inputs or not st.users[v]}
    pool = ctx.settings.pool
    second = {ctx.first[c] + u + 1 for c, u in enumerate(st.used) if u + 1 < pool[c].count}
    commuted = repeated = renamed = outranked = 0
    try:
        for f, sc, _ in ctx.applicable(tuple(sorted(by_sig))):
            form = ctx.forms[f]
            commutative = form.commutative
            if f not in rivals_of:
                rivals_of[f] = _rivals(sink_nodes, f"{form.name}(") if sink_nodes else []
            rivals, same = rivals_of[f], existing.get(f, ())
            tuples: Iterator[tuple[int, ...]]
            if commutative and sc[0] == sc[1]:  # one list: its pairs in order, without the swapped ones
                n = len(by_sig[sc[0]])
                commuted += n * (n - 1) // 2
                tuples, commutative = itertools.combinations_with_replacement(by_sig[sc[0]], 2), False
            else:
                tuples = itertools.product(*(by_sig[s] for s in sc))
            for args in tuples:
                if commutative and args[0] > args[1]:
                    commuted += 1
                    continue
                if same and args in same:
                    repeated += 1
                    continue
                if not second.isdisjoint(args) and not _canonical_fresh(ctx, st, args):
                    renamed += 1
                    continue
                if rivals and free.issuperset(args):
                    abstract = None
                    for other, touched, larger in rivals:
                        if touched.isdisjoint(args):
                            if not larger:
                                abstract = abstract or f"{form.name}({','.join(st.values[a].abstract for a in args)})"
                                larger = other > abstract
                            if larger:
                                break
                    else:
                        yield f, args, sc
                        continue
                    outranked += 1
                    continue
                yield f, args, sc
    finally:
        for reason, n in (
            ("commuted argument order", commuted),
            ("repeated op (same op, same arguments)", repeated),
            ("input renaming (first-use order)", renamed),
            ("node order (new op not the largest sink)", outranked),
        ):
            if n:
                counts[reason] += n


def _fingerprints(ctx: _Context, states: list[_State], children: np.ndarray) -> np.ndarray:
    """The first-evaluation fingerprint of each child, a row (parent's index in ``states``, form, arguments
    padded with -1). A form is evaluated once over every child that applies it to arguments of the same
    signatures (`_field_batch`), its arguments gathered from one matrix of values per signature (`_Values`); each
    child's output digests (its parent's sinks it does not read, and its new node's outputs) are sorted as one
    matrix and hashed row by row as `combine` hashes them."""
    if not len(children):
        return np.zeros(0, np.uint64)
    parent, form, args = children[:, 0], children[:, 1], children[:, 2:]
    values = _Values(ctx, states)
    kinds = np.where(args >= 0, values.kind[parent[:, None], np.maximum(args, 0)], -1)
    base = len(values.sigs) + 1
    key = form.astype(np.int64)
    for p in range(args.shape[1]):
        key = key * base + kinds[:, p] + 1
    order = np.argsort(key, kind="stable")
    starts = np.flatnonzero(np.diff(key[order], prepend=-1))
    groups = []
    for js in np.split(order, starts[1:]):
        f, sc = int(form[js[0]]), tuple(values.sigs[k] for k in kinds[js[0]] if k >= 0)
        groups.append((f, sc, js, ctx.apply(f, sc)))
    outputs = np.zeros(len(children), np.int64)
    new = np.full((len(children), max((len(a[1]) for *_, a in groups), default=0)), _LAST, np.uint64)  # type: ignore[index]
    for f, sc, js, (attrs, out_sigs) in groups:  # type: ignore[misc]
        xs = [values.gather(kinds[js[0], p], parent[js], args[js, p]) for p in range(len(sc))]
        data = static_data(ctx.forms[f], sc, attrs)
        if data is not None:
            xs.append(data)
        outs = _field_batch(ctx.forms[f].op, xs, attrs, len(out_sigs), ctx.keys[0], len(js), ctx.wide)
        outputs[js] = len(out_sigs)
        for k, (sig, out) in enumerate(zip(out_sigs, outs)):
            new[js, k] = _row_digests(sig[0], out)
    sinks = [_sinks(ctx, st) for st in states]
    width = max(map(len, sinks), default=0)
    sink_ids = np.full((len(states), width), -1, np.int64)
    sink_digests = np.full((len(states), width), _LAST, np.uint64)
    for i, (st, vs) in enumerate(zip(states, sinks)):
        sink_ids[i, : len(vs)] = vs
        sink_digests[i, : len(vs)] = [st.values[v].digest for v in vs]
    ids = sink_ids[parent]
    gone = (ids < 0) | (ids[:, :, None] == args[:, None, :]).any(axis=2)
    digests = np.sort(np.concatenate([np.where(gone, _LAST, sink_digests[parent]), new], axis=1), axis=1)
    return _hash_rows(digests, (((~gone).sum(axis=1) + outputs) * 8).tolist())


class _Values:
    """The values of a batch of graphs, one matrix per signature: pool tensors once (every graph shares them),
    then each graph's node outputs; ``kind[i, v]`` and ``row[i, v]`` say where value ``v`` of graph ``i`` is."""

    def __init__(self, ctx: _Context, states: list[_State]) -> None:
        self.sigs: list[Sig] = []
        ids: dict[Sig, int] = {}
        blocks: list[list[np.ndarray]] = []
        width = max((len(st.values) for st in states), default=ctx.n_inputs)
        self.kind = np.full((len(states), width), -1, np.int64)
        self.row = np.full((len(states), width), -1, np.int64)
        for i, st in enumerate(states):
            for v in range(ctx.n_inputs if i else 0, len(st.values)):
                sig = st.values[v].sig
                if sig not in ids:
                    ids[sig] = len(self.sigs)
                    self.sigs.append(sig)
                    blocks.append([])
                k = ids[sig]
                where = (slice(None) if v < ctx.n_inputs else i, v)
                self.kind[where], self.row[where] = k, len(blocks[k])
                blocks[k].append(st.values[v].runs[0])
        self.matrices = [np.stack(b) for b in blocks]

    def gather(self, kind: int, graphs: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The values ``values[j]`` of graphs ``graphs[j]``, all of signature ``kind``, stacked."""
        return self.matrices[kind][self.row[graphs, values]]


_LAST = np.uint64(2**64 - 1)
"""Pads a row of digests: sorted, it falls after the real ones, and only a row's real ones are hashed (a real
digest equal to it is the same bytes wherever it falls)."""


def _hash_rows(digests: np.ndarray, lengths: list[int]) -> np.ndarray:
    """`combine` of each row of sorted digests: the blake2b of its first ``lengths[i]`` bytes (little-endian)."""
    data = memoryview(np.ascontiguousarray(digests, dtype="<u8").tobytes())
    width = digests.shape[1] * 8
    out = bytearray()
    for i, n in enumerate(lengths):
        out += hashlib.blake2b(data[i * width : i * width + n], digest_size=8).digest()
    return np.frombuffer(bytes(out), dtype="<u8").astype(np.uint64)


def _row_digests(shape: Shape, batch: np.ndarray) -> np.ndarray:
    """`value_digest` of each row of a batch (one evaluation)."""
    head = hashlib.blake2b(repr(tuple(shape)).encode(), digest_size=8)
    rows = np.ascontiguousarray(residues(batch), dtype="<i8").reshape(len(batch), -1)
    data, width = memoryview(rows.tobytes()), rows.shape[1] * 8
    out = bytearray()
    for i in range(len(rows)):
        h = head.copy()
        h.update(data[i * width : (i + 1) * width])
        out += h.digest()
    return np.frombuffer(bytes(out), dtype="<u8").astype(np.uint64)


def _field_batch(
    op: str, xs: list[np.ndarray], attrs: dict, n_out: int, key: int, b: int, wide: bool = True
) -> tuple[np.ndarray, ...]:
    """`field_apply` over a batch of ``b``: every argument and output carries a leading batch axis. The batch
    is folded into an axis the op treats independently, so each row is exactly what `field_apply` gives alone
    (tests/test_generate.py checks every form)."""
    if op == "Conv":  # the batch becomes groups: row i's channels meet only row i's kernel (and bias)
        x, w, *bias = xs
        n, c = x.shape[1], x.shape[2]
        x2 = x.swapaxes(0, 1).reshape(n, b * c, *x.shape[3:])
        args = [x2, w.reshape(-1, *w.shape[2:]), *(v.reshape(-1) for v in bias)]
        (y,) = field_apply(op, args, {**attrs, "group": b * attrs["group"]}, 1, key, wide)
        return (y.reshape(n, b, -1, *y.shape[2:]).swapaxes(0, 1),)
    d = ops.get(op)
    if ops.PLANEWISE in d.traits:  # maps of each (image, channel): the batch joins the images
        (y,) = field_apply(op, [xs[0].reshape(-1, *xs[0].shape[2:])], attrs, 1, key, wide)
        return (y.reshape(b, -1, *y.shape[1:]),)
    if d.shape_of == (1, 0):  # Reshape: the batch is one more leading axis of its target, which is not batched
        return field_apply(op, [xs[0], np.array([b, *xs[1]], np.int64)], attrs, n_out, key, wide)
    if "axis" in d.attrs and (ops.REARRANGES in d.traits or len(xs) == 1):
        # Concat, Split (its second argument, its sizes, is not batched), Softmax; not a LayerNormalization,
        # whose scale and bias would meet the batch axis where they expect the normalised ones
        return field_apply(op, xs, {**attrs, "axis": attrs["axis"] + 1}, n_out, key, wide)
    if "perm" in d.attrs:
        return field_apply(op, xs, {"perm": (0, *(p + 1 for p in attrs["perm"]))}, 1, key, wide)
    if "axes" in d.attrs and ops.BATCH_POLYMORPHIC in d.traits:  # a reduction (axes sorted, >= 0): not the batch
        return field_apply(op, xs, {**attrs, "axes": tuple(a + 1 for a in attrs["axes"])}, n_out, key, wide)
    if ops.BATCH_POLYMORPHIC in d.traits:  # the batch axis lines up: broadcast the rest
        rank = max(x.ndim for x in xs)
        return field_apply(
            op, [x.reshape(b, *(1,) * (rank - x.ndim), *x.shape[1:]) for x in xs], attrs, n_out, key, wide
        )
    if not xs:  # a constant: the same for every row
        return tuple(np.broadcast_to(y, (b, *y.shape)) for y in field_apply(op, [], attrs, n_out, key, wide))
    rows = [field_apply(op, [x[i] for x in xs], attrs, n_out, key, wide) for i in range(b)]
    return tuple(np.stack([r[k] for r in rows]) for k in range(n_out))


class _Outline:
    """A compact graph's value signatures and expressions (pool tensors renamed), its node expressions, sorted,
    and how many of its ops read an activation: what ranks a class's members, kept per parent so that each
    child adds its one node (`grown`) instead of describing the whole graph again."""

    def __init__(self, ctx: _Context, nodes: Sequence[NodeSpec], rename: dict[int, int]) -> None:
        self.ctx = ctx
        self.sigs = list(ctx.input_sigs)
        self.text = [ctx.names[rename.get(a, a)] for a in range(ctx.n_inputs)] if rename else list(ctx.names)
        self.heads: list[str] = []
        self.cost = 0
        for f, args in nodes:
            head, cost, out_sigs = self._node(f, args)
            self.heads.append(head)
            self.cost += cost
            self.sigs.extend(out_sigs)
            self.text.extend(f"{head}[{i}]" if len(out_sigs) > 1 else head for i in range(len(out_sigs)))
        self.heads.sort()

    def _node(self, f: int, args: Sequence[int]) -> tuple[str, int, tuple[Sig, ...]]:
        arg_sigs = tuple([self.sigs[a] for a in args])
        applied = self.ctx.apply(f, arg_sigs)
        assert applied is not None
        head = f"{self.ctx.forms[f].name}({','.join([self.text[a] for a in args])})"
        return head, ACTIVATION in [sg[1] for sg in arg_sigs], applied[1]

    @property
    def structure(self) -> str:
        """The sorted node expressions: equal text, equal graphs."""
        return "|".join(self.heads)

    def grown(self, f: int, args: Sequence[int]) -> tuple[str, int]:
        """(structure, cost) of this graph with the node (f, args) added."""
        head, cost, _ = self._node(f, args)
        heads = list(self.heads)
        bisect.insort(heads, head)
        return "|".join(heads), self.cost + cost


def _structure(ctx: _Context, nodes: Sequence[NodeSpec], rename: dict[int, int]) -> str:
    """A compact graph's sorted node expressions, pool tensors renamed by ``rename``: equal text, equal graphs."""
    return _Outline(ctx, nodes, rename).structure


def _cost(ctx: _Context, nodes: Sequence[NodeSpec]) -> int:
    """How many of a compact graph's ops read an activation."""
    return _Outline(ctx, nodes, {}).cost
