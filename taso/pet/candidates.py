"""PET in a model graph: the sites each mutant kind may take, the graph with a corrected mutant in place, and
every such graph as a candidate for the search."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from taso.ir import Graph, Kind, Node, eliminate_dead, lint, topological_order
from taso.pet.correct import Plan, correct, plan
from taso.pet.mutants import MUTATORS, Builder, MutantKind

PREFIX = "pet "
"""How the search's history (and so the report) names a mutation: ``pet <kind> <nodes> (corrects <share>)``."""


def sites(g: Graph, kind: MutantKind) -> Iterator[tuple[Node, ...]]:
    """The nodes of ``g`` that ``kind`` may mutate together: each node of its op alone, or for a merging kind
    each group of two or more siblings (one activation read first, weights beside it, attributes alike except
    the ones the kind reconciles)."""
    static = [
        n
        for n in g.nodes
        if n.op == kind.op and not n.is_opaque and all(g.types[v].is_static for v in (*n.inputs, *n.outputs))
    ]
    if kind.merges is None:
        yield from ((n,) for n in static)
        return
    kinds = g.kinds
    groups: dict[tuple, list[Node]] = {}
    for n in static:
        if all(kinds[v] is not Kind.ACTIVATION for v in n.inputs[1:]):
            alike = tuple((k, v) for k, v in n.attrs if k not in kind.merges)
            groups.setdefault((n.inputs[0], len(n.inputs), alike), []).append(n)
    yield from (tuple(group) for group in groups.values() if len(group) > 1)


def mutate(g: Graph, nodes: Sequence[Node], kind: str, fix: Plan) -> Graph | None:
    """``g`` with ``nodes`` replaced by ``kind``'s mutant corrected by ``fix`` (None if that makes a cycle)."""
    b = Builder(g.types, list(g.values()))
    mutant = MUTATORS[kind].build(b, tuple(nodes))
    assert mutant is not None, "a planned mutant must build"
    outs = correct(b, nodes, mutant, fix)
    rename = {new: n.outputs[0] for n, new in zip(nodes, outs)}  # the originals' names: consumers stay valid
    new_nodes = [
        replace(n, inputs=tuple(rename.get(v, v) for v in n.inputs), outputs=tuple(rename.get(o, o) for o in n.outputs))
        for n in b.nodes
    ]
    kept = [n for n in g.nodes if all(n is not m for m in nodes)]
    order = topological_order(kept + new_nodes, set(g.inputs) | set(g.weights) | set(b.data))
    if order is None:
        return None
    types = {v: t for v, t in b.types.items() if v not in rename}
    types.update((n.outputs[0], g.types[n.outputs[0]]) for n in nodes)
    return lint(
        eliminate_dead(
            replace(g, nodes=tuple(order), weights=(*g.weights, *b.data), data={**g.data, **b.data}, types=types)
        )
    )


def mutations(g: Graph) -> Iterator[tuple[str, Graph]]:
    """Every corrected mutant of ``g``'s compute ops with static shapes: the search's PET candidates, each
    named by kind, nodes and the share of their output the correction recomputes."""
    for kind, spec in MUTATORS.items():
        for nodes in sites(g, spec):
            fix = plan(kind, nodes, g.types)
            if fix is None:
                continue
            h = mutate(g, nodes, kind, fix)
            if h is not None:
                label = "+".join(n.name or n.outputs[0] for n in nodes)
                yield f"{PREFIX}{kind} {label} (corrects {fix.fraction:.1%})", h
