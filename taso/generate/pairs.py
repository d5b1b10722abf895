"""Pairs into rules: each class member against its representative, dropped when smaller pairs imply it,
kept as a `Rule` (member -> representative) otherwise."""

from __future__ import annotations

import itertools
from dataclasses import replace

from taso.generate.evaluate import _build, _Context, _removable, _sinks, _State
from taso.generate.extend import _structure
from taso.generate.fingerprint import combine
from taso.generate.forms import ACTIVATION, WEIGHT, NodeSpec, static_data
from taso.ir import Graph, Node, TensorType, WeightData, lint, make_attrs
from taso.rules import Rule, census


def _outs(ctx: _Context, st: _State, outs: tuple[int, ...] | None) -> list[int]:
    return list(outs) if outs is not None else _sinks(ctx, st)


Member = tuple[tuple[NodeSpec, ...], "tuple[int, ...] | None"]


def judge(
    ctx: _Context, pairs: list[tuple[Member, Member]], job: tuple[int, int]
) -> list[tuple[str, tuple | None, int]]:
    """For each (member, representative) of ``pairs[start:stop]``: why it is dropped (implied by smaller rules, or
    a collision of the first evaluation that the second one exposes), or its renaming-free key; and its full
    fingerprint (``ctx`` holds every evaluation)."""
    out: list[tuple[str, tuple | None, int]] = []
    r_key: object = None
    for (nodes, outs), (rep_nodes, rep_outs) in pairs[slice(*job)]:
        if (rep_nodes, rep_outs) != r_key:  # members of one class come together: build the representative once
            r, r_key, r_fresh = _build(ctx, rep_nodes), (rep_nodes, rep_outs), {}
        m = _build(ctx, nodes)
        fp = combine(m.values[v].digest for v in _outs(ctx, m, outs))
        if fp != combine(r.values[v].digest for v in _outs(ctx, r, rep_outs)):
            out.append(("first-evaluation collision (the second evaluation differs)", None, fp))
        elif not ctx.settings.prune_pairs:
            out.append(("", None, fp))
        else:
            reason = _implied(ctx, m, outs, r, rep_outs, r_fresh)
            out.append((reason, None, fp) if reason else ("", _pair_key(ctx, m, outs, r, rep_outs), fp))
    return out


def _implied(
    ctx: _Context, m: _State, m_spec: tuple | None, r: _State, r_spec: tuple | None, r_fresh: dict[str, int]
) -> str | None:
    """Why the pair (m, r) follows from smaller rules, or None. ``r_fresh``: the fingerprints of ``r`` with a
    subgraph replaced by a fresh input, by the subgraph's head, kept across the members of r's class."""
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
        fresh = ctx.fresh(head, shape)
        if head not in r_fresh:
            r2 = _build(ctx, r.nodes, {head: fresh})
            r_fresh[head] = combine(r2.values[v].digest for v in r_outs)
        m2 = _build(ctx, m.nodes, {head: fresh})
        if combine(m2.values[v].digest for v in m_outs) == r_fresh[head]:
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
        data = static_data(form, [st.values[a].sig for a in args], attrs)
        if data is not None:
            label = "sizes" if form.op == "Split" else "target"
            name = f"{label}_" + "_".join(str(d).replace("-", "m") for d in data)
            sizes[name] = WeightData(data)
            types[name] = TensorType("int64", data.shape)
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


def to_rule(ctx: _Context, m: _State, m_outs: tuple | None, r: _State, r_outs: tuple | None) -> Rule:
    src, src_d = _graph(ctx, m, m_outs)
    dst, dst_d = _graph(ctx, r, r_outs)
    order: list[int] = []
    for d in src_d:
        i = next(i for i, e in enumerate(dst_d) if e == d and i not in order)
        order.append(i)
    dst = replace(dst, outputs=tuple(dst.outputs[i] for i in order))
    return Rule(src, dst, census(src, dst))
