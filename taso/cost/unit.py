"""What a unit is and its key: a graph is cut into units (a head op with the epilogue ops and views onnxruntime
fuses into it, `taso.cost.fusion`), each timed as a graph of its own and cached under a key that equal units
in different places, or graphs, share.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Collection
from dataclasses import dataclass

from taso import ops
from taso.cost.fusion import EPILOGUES, VIEWS, as_run, rms_norms
from taso.ir import Graph, Kind, Node, extract

JOINING = VIEWS.union(*EPILOGUES.values())
"""Ops that may join a unit before them; a node of any other op heads its own."""


@dataclass(frozen=True)
class Unit:
    nodes: tuple[Node, ...]

    @property
    def label(self) -> str:
        return "+".join(n.op for n in self.nodes)


def units(g: Graph, constant: Collection[int] | None = None) -> list[Unit]:
    """Partition ``g``'s non-constant nodes into units: each head op with the epilogue ops that consume it, and
    each RMS norm onnxruntime fuses (`rms_norms`) whole. ``constant``: the ids of the nodes that write constants
    alone, where the caller knows them (`Contexts.of`); else read from ``g``'s kinds.
    Pass a graph through `fold_static_shapes` first: shape arithmetic onnxruntime folds at load costs nothing."""
    if constant is None:
        kinds = g.kinds
        constant = {id(n) for n in g.nodes if n.outputs and all(kinds.get(o) is Kind.CONSTANT for o in n.outputs if o)}
    unit_of: dict[str, int] = {}  # value -> index of the unit that produced it
    groups: list[list[Node]] = []
    norms = {id(n): k for k, chain in enumerate(rms_norms(g)) for n in chain}  # node -> its norm, one unit
    norm_unit: dict[int, int] = {}  # norm -> index of its unit
    for n in g.nodes:
        if id(n) in constant:
            continue
        if id(n) in norms:
            target = norm_unit.get(norms[id(n)])
        else:
            target = _epilogue_of(g, n, unit_of, groups)
        if target is None:
            groups.append([n])
            target = len(groups) - 1
            if id(n) in norms:
                norm_unit[norms[id(n)]] = target
        else:
            groups[target].append(n)
        for o in n.outputs:
            unit_of[o] = target
    return [Unit(tuple(nodes)) for nodes in groups]


def _epilogue_of(g: Graph, n: Node, unit_of: dict[str, int], groups: list[list[Node]]) -> int | None:
    """The unit ``n`` joins: its data input's unit for a view op, else as an epilogue the latest unit feeding
    it whose head accepts ``n``'s op."""
    if n.op not in JOINING or n.implicit or n.domain:
        return None
    if n.op in VIEWS and n.inputs and n.inputs[0] in unit_of:
        return unit_of[n.inputs[0]]
    feeding = sorted({unit_of[v] for v in n.reads if v in unit_of}, reverse=True)
    for k in feeding:
        head = groups[k][0]
        if not head.is_opaque and n.op in EPILOGUES.get(head.op, ()):
            return k
    return None


def unit_graph(g: Graph, unit: Unit) -> Graph:
    """The unit as a graph of its own (`taso.ir.extract`): the weight-only nodes feeding it come along, since
    onnxruntime folds them at load, so they cost nothing but give inputs like Dropout's ratio their real value.
    Views the unit ends with are left out: as outputs of the timed graph they would be copied, a kernel the
    model never runs (GPT-2 on the H100: Split+Reshape+Reshape+Reshape timed 28.3 us, the Split alone 6.9 us)."""
    return extract(g, timed_nodes(unit))


def timed_nodes(unit: Unit) -> tuple[Node, ...]:
    """The unit's nodes without its trailing views (views nothing else in the unit reads); a unit that is
    only views keeps them."""
    nodes = list(unit.nodes)
    while True:
        read = {v for n in nodes for v in n.reads}
        trailing = [n for n in nodes if n.op in VIEWS and not read.intersection(n.outputs)]
        if not trailing or len(trailing) == len(nodes):
            return tuple(nodes)
        dropped = {id(n) for n in trailing}
        nodes = [n for n in nodes if id(n) not in dropped]


def _footprint(g: Graph, unit: Unit) -> tuple:
    """Everything the `unit_key` of the unit's graph depends on, read from ``g`` in a few lookups (extracting
    the unit scans all of ``g``): the unit's `timed_nodes` and the weight-only nodes feeding them, in graph order; the
    type of every value they read or write; which values read from outside are weights, and the values of
    those the key spells out. Equal footprints give equal keys."""
    kinds, producers = g.kinds, g.producers
    timed = timed_nodes(unit)
    part = {id(n): n for n in timed}
    pending = [v for n in timed for v in n.reads]
    while pending:  # the feeders `taso.ir.extract` adds
        p = producers.get(pending.pop())
        if p is not None and id(p) not in part and kinds.get(p.outputs[0]) is Kind.CONSTANT:
            part[id(p)] = p
            pending.extend(p.reads)
    nodes = sorted(part.values(), key=lambda n: g.positions[id(n)])
    produced = {o for n in nodes for o in n.outputs}
    outside = tuple(
        (v, kinds.get(v) is Kind.WEIGHT, g.data[v].spelled if v in g.data else None)
        for n in nodes
        for v in n.reads
        if v not in produced
    )
    return tuple(nodes), tuple(g.types.get(v) for n in nodes for v in (*n.reads, *n.outputs)), outside


@dataclass(frozen=True, slots=True)
class Context:
    """A node's id among the graphs one `Contexts` has seen, the ids of the values it writes, and whether it reads
    a constant."""

    id: int
    outputs: tuple[int, ...]
    reads_constant: bool
    constant: bool
    """Whether the node writes constants alone: `units` leaves it out."""


class Contexts:
    """Ids for the nodes of the graphs a search costs, equal where all that a unit's key reads of the node is: the
    node, and the name, type and kind (`Kind`) of each value it reads or writes, and the spelled values of the
    weights it reads. So a unit whose nodes have the ids of a unit met before has its key, unless it reads a
    constant: where `extract` puts the weight-only nodes feeding a unit among its nodes follows the graph's
    order, which ids do not pin. The ids are local, not digests of all a node depends on: a rewrite gives new ids
    to the nodes it makes and to the readers of values whose type or kind it changes, no others. Each graph is
    still read whole, a dict lookup a node: footprinting every unit of every candidate was a quarter of
    ResNet-50's search."""

    def __init__(self) -> None:
        self._nodes: dict[tuple, Context] = {}
        self._values: dict[tuple, int] = {}
        self._activations: set[int] = set()
        """Ids of values computed from a graph input at every run (`Kind.ACTIVATION`)."""
        self._constants: set[int] = set()
        """Ids of values computed from weights alone (`Kind.CONSTANT`)."""
        self._ids = itertools.count()

    def of(self, g: Graph) -> tuple[dict[int, int], set[int], set[int]]:
        """Each node's id here, by the node's id; the ids of the nodes that write constants alone (`units`); and
        those of the nodes that read a constant."""
        types = g.types
        values: dict[str, int] = {}
        for kind, names in ((Kind.ACTIVATION, g.inputs), (Kind.WEIGHT, g.weights)):
            for v in names:
                values[v] = self._value(kind, v, g)
        ids: dict[int, int] = {}
        constant: set[int] = set()
        reading: set[int] = set()
        for n in g.nodes:
            try:
                reads = tuple(map(values.__getitem__, n.reads))
            except KeyError:  # read before it is written, or never
                reads = tuple(values[v] if v in values else self._value(None, v, g) for v in n.reads)
            key = (n, reads, tuple(map(types.get, n.outputs)))
            context = self._nodes.get(key)
            if context is None:
                context = self._node(key, reads, n, g)
            ids[id(n)] = context.id
            if context.constant:
                constant.add(id(n))
            if context.reads_constant:
                reading.add(id(n))
            values.update(zip(n.outputs, context.outputs))
        return ids, constant, reading

    def _value(self, kind: Kind | None, v: str, g: Graph) -> int:
        """The id of value ``v`` of ``g`` of this kind (None: one ``g`` never defines); a unit's graph keeps the
        data of weights alone (`extract`)."""
        spelled = g.data[v].spelled if kind is Kind.WEIGHT and v in g.data else None
        key = (kind, v, g.types.get(v), spelled)
        known = self._values.get(key)
        if known is None:
            known = self._values[key] = next(self._ids)
            if kind is Kind.ACTIVATION:
                self._activations.add(known)
            elif kind is Kind.CONSTANT:
                self._constants.add(known)
        return known

    def _node(self, key: tuple, reads: tuple[int, ...], n: Node, g: Graph) -> Context:
        kind = Kind.ACTIVATION if any(r in self._activations for r in reads) else Kind.CONSTANT  # as `Graph.kinds`
        outputs = tuple(self._value(kind, o, g) for o in n.outputs)
        constant = bool(n.outputs) and (kind is Kind.CONSTANT or not any(n.outputs))
        reads_constant = any(r in self._constants for r in reads)
        context = self._nodes[key] = Context(next(self._ids), outputs, reads_constant, constant)
        return context


def unit_key(ug: Graph) -> str:
    """Identity of a unit for the cache: ops, attributes, concrete types and small constant inputs, with
    value names canonicalised so equal units in different places (or graphs) share one measurement. The unit
    is keyed as onnxruntime runs it (`as_run`), so a rewrite onnxruntime makes itself leaves the key alone."""
    return graph_digest(as_run(ug))


def graph_digest(ug: Graph) -> str:
    """`unit_key` of a unit graph taken as it is."""
    names: dict[str, str] = {}
    for i, v in enumerate((*ug.inputs, *ug.weights)):
        names[v] = f"i{i}"
    parts = [",".join(f"{names[v]}:{ug.types.get(v)}" for v in (*ug.inputs, *ug.weights))]
    for w in ug.weights:
        if (values := ug.data[w].spelled) is not None:
            parts.append(f"{names[w]}={values}")
    for k, n in enumerate(ug.nodes):
        for j, o in enumerate(n.outputs):
            names[o] = f"n{k}.{j}"
        parts.append(_node_text(ug, n, [names.get(v, "?") for v in n.inputs]))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _node_text(ug: Graph, n: Node, ins: list[str]) -> str:
    """A node as the unit keys spell it, its inputs named ``ins``: op, attributes, opaque payload, output types."""
    opaque = hashlib.sha1(n.opaque).hexdigest()[:16] if n.opaque else ""
    types = ",".join(str(ug.types.get(o)) for o in n.outputs)
    return f"{n.domain}::{n.op}({','.join(ins)}){n.attrs}{opaque}->{types}"


def twin_key(ug: Graph) -> str:
    """The unit's `unit_key` up to the order of each commutative op's two inputs (``OpDef.commutative``), which
    cannot change what it costs: a rewrite that writes Add(b, a) where the model read Add(a, b) makes a unit
    `unit_key` tells apart (MobileOne's search on the H200's prior: 16 of its 152 new units). Each value is named
    by what computes it, so the swapped forms read the same; an input by its kind and type, and its rank among
    the unit's inputs of that kind and type (an Add of two inputs is no twin of an Add of one input to itself).
    Kept beside `unit_key`, whose keys the shipped cost tables hold."""
    ug = as_run(ug)
    weights = set(ug.weights)
    names: dict[str, str] = {}
    ranks: dict[str, int] = {}
    for v in (*ug.inputs, *ug.weights):
        spelled = ug.data[v].spelled if v in weights and v in ug.data else None
        base = f"{'w' if v in weights else 'x'}:{ug.types.get(v)}={spelled}"
        ranks[base] = ranks.get(base, -1) + 1
        names[v] = f"{hashlib.sha256(base.encode()).hexdigest()}#{ranks[base]}"  # no comma: names join unambiguously
    for n in ug.nodes:
        ins = [names.get(v, "?") for v in n.inputs]
        if not n.is_opaque and not n.domain and len(ins) == 2 and n.op in ops.OPS and ops.get(n.op).commutative:
            ins.sort()
        node = hashlib.sha256(_node_text(ug, n, ins).encode()).hexdigest()
        for j, o in enumerate(n.outputs):
            names[o] = f"{node}.{j}"
    return hashlib.sha256("\n".join(sorted(names[o] for o in ug.outputs)).encode()).hexdigest()
