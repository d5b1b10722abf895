"""Where a graph is cut for the search, and how a searched part goes back in.

Large models are cut into regions at ops no rule mentions, and a region larger than `MAX_REGION` nodes (a CNN
whose every op some rule mentions is one region) into windows at its narrowest points (`windows`); each is
searched on its own (`taso.search.optimize_graph`), so the work per node does not grow with the model, and
spliced back where it was (`splice`). A region need not be convex: the paths through the rest of the graph
from its outputs to its inputs (`outside_links`) are what a rewrite of it must not close into a cycle.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from taso.ir import Graph, Kind, Node, eliminate_dead, fresh_names, lint, topological_order
from taso.rules import Match

MAX_REGION = 64
"""Nodes in a searched region at most (see `windows`). Smaller windows search faster and, with a budget per
region, deeper; on the zoo, 64 found as much as 100 or 150 everywhere and more on Inception-v3."""


CYCLE = "would close a cycle through the rest of the graph"
"""Why a region's rewrite is declined when it reads a value computed, outside the region, from its own result."""


def outside_links(g: Graph, region: Graph) -> tuple[Node, ...]:
    """For each input of ``region`` (a part of ``g``) that ``g`` computes from the region's outputs through
    nodes outside the region, a stand-in node that reads those outputs and makes the input. A region need not
    be convex: BERT-tiny's attention scores of two layers are one region (they share the mask they add), and
    the second layer's Q and K are computed from the first layer's scores outside it. Searched alone, merging
    the two layers' scaling Muls looks sound and closes a cycle once spliced (`closes_cycle`)."""
    inside = {id(n) for n in region.nodes}
    inputs = set(region.inputs)
    made_from: dict[str, list[str]] = {}
    for o in region.outputs:
        for i in sorted(inputs & set(_downstream(g, o, inside))):
            made_from.setdefault(i, []).append(o)
    return tuple(Node("outside", tuple(os), (i,)) for i, os in sorted(made_from.items()))


def closes_cycle(region: Graph, outside: Sequence[Node]) -> bool:
    """Whether ``region``'s nodes, with the ``outside`` paths (`outside_links`), depend on themselves."""
    return bool(outside) and topological_order([*region.nodes, *outside], set()) is None


def surely_cycles(g: Graph, match: Match, outside: Sequence[Node]) -> bool:
    """Whether rewriting ``match`` would close a cycle with the ``outside`` paths, told before the rewrite is
    built: a value the rule's target computes from one of its inputs reaches that input again, through nodes
    the rewrite keeps or the outside paths. Llama's search built 6,000 rewrites only for `closes_cycle` to turn
    them down. Every cycle this finds is real; one through two outputs at once it misses, and `closes_cycle`
    still judges every rewrite built."""
    if not outside:
        return False
    dst = match.rule.dst
    made = {o: n for n in dst.nodes for o in n.outputs}
    links = _links(tuple(outside))
    matched = {id(n) for n in match.nodes.values()}
    for s, d in zip(match.rule.src.outputs, dst.outputs):
        if d not in made:
            continue  # the target hands one of its inputs on: nothing new computes it
        targets = {match.values[v] for v in _reads(dst, d, made) if v in match.values}
        if targets and any(v in targets for v in _downstream(g, match.values[s], matched, links)):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _links(outside: tuple[Node, ...]) -> dict[str, tuple[str, ...]]:
    """The outside paths as edges, value read -> values made: one region's, asked for at each of its matches."""
    links: dict[str, tuple[str, ...]] = {}
    for n in outside:
        for i in n.inputs:
            links[i] = (*links.get(i, ()), *n.outputs)
    return links


def _reads(dst: Graph, value: str, made: dict[str, Node]) -> set[str]:
    """The inputs and weights of the rule's target that ``value`` is computed from."""
    found, stack, seen = set(), [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in made:
            stack.extend(made[v].inputs)
        else:
            found.add(v)
    return found


def _downstream(
    g: Graph, start: str, skip: set[int], links: Mapping[str, tuple[str, ...]] | None = None
) -> Iterator[str]:
    """The values computed from ``start``, nearest first along each path, through nodes of ``g`` not in ``skip``
    (by identity) and the ``links`` (value read -> values made) that stand for paths outside ``g``."""
    seen, stack = {start}, [start]
    while stack:
        v = stack.pop()
        made = [o for c in g.consumers.get(v, ()) if id(c) not in skip for o in c.outputs if o]
        for o in (*made, *(links or {}).get(v, ())):
            if o not in seen:
                seen.add(o)
                stack.append(o)
                yield o


def regions(g: Graph, rule_ops: set[str]) -> list[list[Node]]:
    """Groups of connected nodes whose op some rule mentions; everything else is a cut point. A value connects
    its producer to each reader, and two readers only where neither depends on the other: a rule that matches
    two readers of one value and not the path between them would make one read its own result. Llama's layers
    all read the rotary cos and sin and the attention mask: joined by them, four layers' rotary Muls were one
    window of 64 nodes whose search spent its work on cross-layer merges `surely_cycles` turns down; apart,
    each layer is a region of one form, searched once and replayed."""
    touchable = [
        n for n in g.nodes if not n.is_opaque and n.op in rule_ops and g.kinds.get(n.outputs[0]) is not Kind.CONSTANT
    ]
    parent = list(range(len(touchable)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    made: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(touchable):
        made.update((o, i) for o in n.outputs if g.kinds.get(o) is Kind.ACTIVATION)
        for v in dict.fromkeys(n.reads):
            if g.kinds.get(v) is Kind.ACTIVATION:  # sharing a weight does not connect two places
                readers.setdefault(v, []).append(i)
    depends = _dependence(g, [touchable[i] for idx in readers.values() if len(idx) > 1 for i in idx])
    for v, idx in readers.items():
        if v in made:
            for i in idx:
                parent[find(i)] = find(made[v])
        for k, i in enumerate(idx):
            for j in idx[k + 1 :]:  # graph order: only the later of two readers can depend on the other
                if find(i) != find(j) and not depends(touchable[j], touchable[i]):
                    parent[find(j)] = find(i)
    groups: dict[int, list[Node]] = {}
    for i, n in enumerate(touchable):
        groups.setdefault(find(i), []).append(n)
    return sorted(groups.values(), key=lambda ns: g.nodes.index(ns[0]))


def _dependence(g: Graph, among: list[Node]) -> Callable[[Node, Node], bool]:
    """Whether a node of ``g`` depends on a node of ``among`` (through any path), told in one pass over ``g``:
    each node's ancestors among those, as a bit set (bits for these few, not for every node: a graph of 50,000
    nodes would need 300 MB)."""
    bit = {id(n): 1 << k for k, n in enumerate(dict.fromkeys(among))}
    below: dict[int, int] = {}
    producers = g.producers
    for n in g.nodes:
        bits = 0
        for v in n.reads:
            p = producers.get(v)
            if p is not None:
                bits |= below[id(p)] | bit.get(id(p), 0)
        below[id(n)] = bits
    return lambda later, earlier: bool(below[id(later)] & bit.get(id(earlier), 0))


def with_context(g: Graph, nodes: list[Node], context_ops: frozenset[str], depth: int = 6) -> list[Node]:
    """``nodes`` plus the consumers (``depth`` levels) whose op is in ``context_ops``: ops the cost model fuses
    into a region's nodes, so a region is costed the way it will run (a merge that breaks a MatMul+Add
    fusion must look as costly as it is). Pass-through ops count too (BERT's GELU: MatMul, Add, then Div and
    Erf, which no rule mentions, then Add, Mul, Mul: six levels); a region never rewrites them."""
    members = {id(n) for n in nodes}
    frontier = list(nodes)
    for _ in range(depth):
        extra = [
            c
            for n in frontier
            for o in n.outputs
            for c in g.consumers.get(o, ())
            if id(c) not in members and c.op in context_ops and not c.domain and not c.implicit
        ]
        extra = list({id(c): c for c in extra}.values())
        members.update(id(c) for c in extra)
        nodes = [*nodes, *extra]
        frontier = extra
    order = g.positions
    return sorted(nodes, key=lambda n: order[id(n)])


def splice(g: Graph, old: Graph, new: Graph) -> Graph | None:
    """``g`` with region ``old`` replaced by its optimized ``new`` (same inputs and output names), placed where
    the region began, so the nodes after it keep their order (and a later region of the same form extracts as
    the same graph); None where that would make a cycle (a rewrite that did not know the paths outside the
    region, `outside_links`). A value the region's rewrites made is renamed where ``g`` uses its name for
    another value: a rewrite names new values afresh within the region only, and can reuse the name of a
    weight it dropped."""
    gone = {id(n) for n in old.nodes}
    start = next((k for k, n in enumerate(g.nodes) if id(n) in gone), len(g.nodes))
    kept = [n for n in g.nodes if id(n) not in gone or g.kinds.get(n.outputs[0]) is Kind.CONSTANT]
    keep_ids = {id(n) for n in kept}
    added = [n for n in new.nodes if id(n) not in keep_ids]
    new_weights = [w for w in new.weights if new.data.get(w) is not g.data.get(w)]  # made by the region's rewrites
    producers, taken = g.producers, set(g.values())
    clashes = {w for w in new_weights if w in taken} | {
        o for n in added for o in n.outputs if o in taken and producers.get(o) is not n
    }
    fresh = fresh_names(taken | set(new.values()), "subst_")
    rename = {v: next(fresh) for v in sorted(clashes - set(new.outputs))}
    data = {**g.data, **{rename.get(w, w): new.data[w] for w in new_weights}}
    types = {**g.types, **{rename.get(v, v): new.types[v] for v in new.values() if v in new.types}}
    if rename:
        added = [
            replace(
                n, inputs=tuple(rename.get(i, i) for i in n.inputs), outputs=tuple(rename.get(o, o) for o in n.outputs)
            )
            for n in added
        ]
        new_weights = [rename.get(w, w) for w in new_weights]
    before = [n for n in g.nodes[:start] if id(n) in keep_ids]
    after = [n for n in g.nodes[start:] if id(n) in keep_ids]
    nodes = topological_order(before + added + after, set(g.inputs) | set(g.weights) | set(new_weights))
    if nodes is None:
        return None
    return lint(
        eliminate_dead(replace(g, nodes=tuple(nodes), weights=(*g.weights, *new_weights), data=data, types=types))
    )


def disjoint(parts: list[list[Node]]) -> list[list[Node]]:
    """Merge regions that came to share a node through their context, so each node is searched once."""
    merged: list[list[Node]] = []
    for part in parts:
        ids = {id(n) for n in part}
        overlapping = [m for m in merged if ids & {id(n) for n in m}]
        for m in overlapping:
            merged.remove(m)
            part = [*m, *(n for n in part if id(n) not in {id(x) for x in m})]
        merged.append(part)
    return merged


def windows(g: Graph, nodes: list[Node], size: int, context_ops: frozenset[str] = frozenset()) -> list[list[Node]]:
    """``nodes`` (one region) cut into consecutive windows of at most ``size`` nodes in graph order, so that a
    region as large as the model (a CNN whose every op some rule mentions) is searched piece by piece and a
    candidate costs as much in a large model as in a small one. Each cut is made where the fewest values cross
    it into a ``context_ops`` reader, then where the fewest cross it at all: a window that starts with such a
    reader costs it apart from the op it fuses with, and a match that straddles a cut is not found."""
    order = g.positions
    nodes = sorted(nodes, key=lambda n: order[id(n)])
    if len(nodes) <= size:
        return [nodes]
    at = {id(n): k for k, n in enumerate(nodes)}
    fused = [0] * len(nodes)  # fused[k]: values made at or before k and read after k by a context op
    crossing = [0] * len(nodes)  # crossing[k]: values made at or before k and read after k
    for k, n in enumerate(nodes):
        readers = [c for o in n.outputs for c in g.consumers.get(o, ()) if id(c) in at]
        for j in range(k, max((at[id(c)] for c in readers), default=k)):
            crossing[j] += 1
        for j in range(k, max((at[id(c)] for c in readers if c.op in context_ops), default=k)):
            fused[j] += 1
    out, start = [], 0
    while len(nodes) - start > size:
        cut = min(range(start + size // 2, start + size), key=lambda k: (fused[k], crossing[k], -k))
        out.append(nodes[start : cut + 1])
        start = cut + 1
    return [*out, nodes[start:]]
