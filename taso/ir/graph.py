"""Nodes and graphs, and the few operations every stage needs on them: checking, ordering, cutting out a part,
dropping dead code, fresh names.

Nodes whose op is in the operator catalogue (`taso.ops`) carry plain Python attributes; every other node
(custom domains, control flow with subgraphs, ops the catalogue does not describe) is *opaque*: it keeps its
original attributes as bytes that only `taso.onnx` reads, and passes through every stage untouched.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType

from taso.ir.types import AttrValue, Kind, TensorType
from taso.ir.weights import WeightData


@dataclass(frozen=True, slots=True)
class Node:
    """One op application. ``outputs`` are the names of the values it defines; ``""`` skips an optional input."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    name: str = ""
    domain: str = ""
    doc: str = ""
    opaque: bytes | None = None
    """Serialized attributes of a pass-through node; ``None`` for catalogue ops."""
    implicit: tuple[str, ...] = ()
    """Outer-scope values the node's subgraphs read (If/Loop/Scan bodies): real dependencies."""
    reads: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Every value this node depends on, explicit or through a subgraph. Kept, not recomputed: the search
    asks for it millions of times (15 % of NasRNN's search time when it was a property)."""
    _hash: int = field(init=False, repr=False, compare=False)
    """Kept for the same reason: a cost model looks units up by their nodes (`taso.cost.unit._footprint`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", tuple(i for i in self.inputs if i) + self.implicit)
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.op,
                    self.inputs,
                    self.outputs,
                    self.attrs,
                    self.name,
                    self.domain,
                    self.doc,
                    self.opaque,
                    self.implicit,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_opaque(self) -> bool:
        return self.opaque is not None

    @property
    def attr(self) -> dict[str, AttrValue]:
        return dict(self.attrs)


@dataclass(frozen=True, slots=True)
class ModelMeta:
    """Model-level facts kept only so that export writes back what import read."""

    ir_version: int = 8
    opsets: tuple[tuple[str, int], ...] = (("", 17),)
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc: str = ""
    graph_name: str = "graph"
    graph_doc: str = ""
    metadata: tuple[tuple[str, str], ...] = ()
    functions: tuple[bytes, ...] = ()
    """Serialized model-local functions: opaque nodes may call them."""
    docs: tuple[tuple[str, str], ...] = ()
    """Doc strings of graph inputs, outputs and initializers, by value name."""
    annotated: tuple[str, ...] = ()
    """Intermediate values the source model gave a value_info for; export writes those again."""
    external_data: bool = False

    def opset(self, domain: str = "") -> int | None:
        return dict(self.opsets).get(domain)


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable tensor graph. Build new graphs with `dataclasses.replace` or the helpers below."""

    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: Mapping[str, TensorType]
    weights: tuple[str, ...] = ()
    data: Mapping[str, WeightData] = field(default_factory=dict)
    """Weight values where known; generator and rule graphs have symbolic weights with no data."""
    meta: ModelMeta = ModelMeta()

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", MappingProxyType(dict(self.types)))
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))

    # identity -----------------------------------------------------------------------------------------------
    @cached_property
    def key(self) -> str:
        """A digest of everything the graph says: equal keys mean equal graphs (names included)."""
        h = hashlib.sha256()
        for part in (
            self.nodes,
            self.inputs,
            self.outputs,
            self.weights,
            sorted(self.types.items()),
            sorted((k, v.digest) for k, v in self.data.items()),
            self.meta,
        ):
            h.update(repr(part).encode())
        return h.hexdigest()

    @cached_property
    def structure(self) -> str:
        """A digest of what the graph computes, independent of intermediate value and node names: graphs
        reached by different rewrite orders that build the same nodes share it (the search's repeat check)."""
        leaves = {v: f"in:{v}" for v in self.inputs}
        leaves.update({w: f"w:{self.data[w].digest}" if w in self.data else f"w:{w}" for w in self.weights})
        keys = _value_keys(self, leaves)
        return hashlib.sha256(repr([keys[o] for o in self.outputs]).encode()).hexdigest()

    @cached_property
    def places(self) -> Mapping[str, str]:
        """Each value's place in the computation: inputs and weights keyed by position and type (and spelled
        values), whatever their names and learned values; what `form` digests and `correspondence` pairs."""
        leaves = {v: f"in{i}:{self.types.get(v)}" for i, v in enumerate(self.inputs)}
        for k, w in enumerate(self.weights):
            leaves[w] = f"w{k}:{self.types.get(w)}:{self.data[w].spelled if w in self.data else ''}"
        return MappingProxyType(_value_keys(self, leaves))

    @cached_property
    def form(self) -> str:
        """A digest of what the graph computes up to value names and weight values (`WeightData.spelled` ones
        excepted): graphs of one form run the same computation on different weights, such as two layers of a
        transformer, so a rewrite found for one carries over to the other (`correspondence`)."""
        keys = self.places
        nodes = sorted(keys[o] for n in self.nodes for o in n.outputs if o)
        return hashlib.sha256(repr(([keys[o] for o in self.outputs], nodes)).encode()).hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    # structure ----------------------------------------------------------------------------------------------
    @cached_property
    def positions(self) -> Mapping[int, int]:
        """Each node's index in ``nodes``, by the node's id: parts cut from the graph keep its order."""
        return MappingProxyType({id(n): i for i, n in enumerate(self.nodes)})

    @cached_property
    def producers(self) -> Mapping[str, Node]:
        return MappingProxyType({out: n for n in self.nodes for out in n.outputs if out})

    @cached_property
    def consumers(self) -> Mapping[str, tuple[Node, ...]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for v in dict.fromkeys(n.reads):
                users.setdefault(v, []).append(n)
        return MappingProxyType({k: tuple(v) for k, v in users.items()})

    @cached_property
    def kinds(self) -> Mapping[str, Kind]:
        """Activation / weight / constant for every value, propagated through the nodes in order."""
        kinds = {name: Kind.ACTIVATION for name in self.inputs}
        kinds.update({name: Kind.WEIGHT for name in self.weights})
        for n in self.nodes:
            live = any(kinds.get(v) is Kind.ACTIVATION for v in n.reads)
            for out in n.outputs:
                if out:
                    kinds[out] = Kind.ACTIVATION if live else Kind.CONSTANT
        return MappingProxyType(kinds)

    def values(self) -> Iterator[str]:
        """Every value name, inputs and weights first, then node outputs in order."""
        yield from self.inputs
        yield from self.weights
        for n in self.nodes:
            yield from (o for o in n.outputs if o)

    def op_census(self) -> dict[str, int]:
        census: dict[str, int] = {}
        for n in self.nodes:
            label = f"{n.domain}::{n.op}" if n.domain else n.op
            census[label] = census.get(label, 0) + 1
        return census

    # printing -----------------------------------------------------------------------------------------------
    def __str__(self) -> str:
        from taso.ir.text import format_graph  # the text form builds on this module

        return format_graph(self)


_NODE_KEYS: dict[tuple[Node, tuple[str, ...]], str] = {}
"""Each node's digest by the node and the keys of what it reads (`_value_keys`): the search digests every
candidate's structure, and a candidate shares all but the few nodes around its rewrite with its parent (ResNet-50's
search on the CPU: 15,000 digests of whole graphs, 12 s of its 105). Emptied when `NODE_KEYS_KEPT` is reached."""
NODE_KEYS_KEPT = 200_000


def _value_keys(g: Graph, leaves: dict[str, str]) -> dict[str, str]:
    """Each value's key: ``leaves`` gives the inputs' and weights'; a node output's is a digest of the node's
    op and attributes and the keys of what it reads (`Graph.structure`, `Graph.form`)."""
    keys = dict(leaves)
    for n in g.nodes:
        reads = tuple(keys.get(i, i) for i in n.reads)
        node_key = _NODE_KEYS.get((n, reads))
        if node_key is None:
            if len(_NODE_KEYS) >= NODE_KEYS_KEPT:
                _NODE_KEYS.clear()
            digest = hashlib.sha256(repr((n.op, n.domain, n.attrs, n.opaque, list(reads))).encode())
            node_key = _NODE_KEYS[n, reads] = digest.hexdigest()
        for k, o in enumerate(n.outputs):
            if o:
                keys[o] = f"{node_key}:{k}"
    return keys


def correspondence(a: Graph, b: Graph) -> dict[str, str] | None:
    """Each value of ``a`` -> the value of ``b`` in its place, for graphs of one `Graph.form`; None otherwise."""
    if a.form != b.form:
        return None
    place: dict[str, str] = {}
    for v, key in b.places.items():
        place.setdefault(key, v)
    return {v: place[key] for v, key in a.places.items()}


class IRError(ValueError):
    """A graph that breaks the IR's invariants; the message names the offending node or value."""


def lint(g: Graph) -> Graph:
    """Check order, single assignment and that outputs exist; returns ``g`` so calls chain."""
    defined: set[str] = set()
    for name in (*g.inputs, *g.weights):
        if name in defined:
            raise IRError(f"value {name!r} is defined twice")
        defined.add(name)
    for n in g.nodes:
        for v in n.reads:
            if v not in defined:
                raise IRError(f"node {n.name or n.op!r} reads {v!r} before it is defined")
        for out in n.outputs:
            if out and out in defined:
                raise IRError(f"node {n.name or n.op!r} redefines {out!r}")
            defined.add(out)
    for out in g.outputs:
        if out not in defined:
            raise IRError(f"graph output {out!r} is never defined")
    return g


def find_cycle(nodes: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[int] | None:
    """The positions of nodes that form a cycle, from the earliest, each writing a value the next one reads (the
    last one a value the first reads), or None where there is none; ``nodes`` are (values read, values written).
    For naming the cycle of a file onnx refuses as unsorted: its checker's message names one input, cut in lines.
    An iterative depth-first search: a model's graph can be deeper than Python's recursion limit."""
    writer = {v: k for k, (_, outs) in enumerate(nodes) for v in outs if v}
    state = [0] * len(nodes)  # 0 not seen, 1 on the current path, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        path, stack = [root], [iter(nodes[root][0])]
        state[root] = 1
        while stack:
            v = next(stack[-1], None)
            if v is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            k = writer.get(v)
            if k is None or state[k] == 2:
                continue
            if state[k] == 1:
                cycle = path[path.index(k) :][::-1]
                first = cycle.index(min(cycle))
                return cycle[first:] + cycle[:first]
            state[k] = 1
            path.append(k)
            stack.append(iter(nodes[k][0]))
    return None


def topological_order(nodes: list[Node], defined: set[str]) -> list[Node] | None:
    """``nodes`` in an order where every value is defined before it is read, keeping the given order where
    it already is one (so rewrites disturb the model's layout as little as possible); None on a cycle.

    Kahn's algorithm, always placing the earliest ready node: the smallest valid order by position, in
    O(n log n) (a rewrite appends its new nodes after every node that reads them). The leading nodes that read
    only what is defined before them come first as they are, without the heap: that is the order Kahn's would
    give them, and a rewrite leaves most of a graph so."""
    producers = {o for n in nodes for o in n.outputs if o}
    known = set(defined)
    start = 0
    for n in nodes:
        if any(v in producers and v not in known for v in n.reads):
            break
        known.update(n.outputs)
        start += 1
    placed: list[Node] = list(nodes[:start])
    rest = nodes[start:]
    waits = [0] * len(rest)
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(rest):
        for v in dict.fromkeys(n.reads):
            if v in producers and v not in known:
                waits[k] += 1
                readers.setdefault(v, []).append(k)
    ready = [k for k, w in enumerate(waits) if w == 0]
    while ready:
        node = rest[heapq.heappop(ready)]
        placed.append(node)
        for o in node.outputs:
            for r in readers.pop(o, ()):
                waits[r] -= 1
                if waits[r] == 0:
                    heapq.heappush(ready, r)
    return placed if len(placed) == len(nodes) else None


def extract(g: Graph, nodes: Sequence[Node]) -> Graph:
    """``nodes`` of ``g`` as a graph of their own, with the weight-only nodes that feed them (so constants keep
    their values): activations read from outside become inputs, weights stay weights, and every value used
    outside (or, for a part nothing outside reads, the last node's outputs) becomes an output."""
    members = {id(n) for n in nodes}
    feeders: list[Node] = []
    pending = [v for n in nodes for v in n.reads]
    while pending:
        p = g.producers.get(pending.pop())
        if p is not None and id(p) not in members and g.kinds.get(p.outputs[0]) is Kind.CONSTANT:
            members.add(id(p))
            feeders.append(p)
            pending.extend(p.reads)
    order = g.positions
    part = tuple(sorted((*feeders, *nodes), key=lambda n: order[id(n)]))
    produced = {o for n in part for o in n.outputs if o}
    reads = list(dict.fromkeys(v for n in part for v in n.reads if v not in produced))
    outputs = [
        o
        for n in nodes
        for o in n.outputs
        if o and (o in g.outputs or any(id(c) not in members for c in g.consumers.get(o, ())))
    ] or [o for o in nodes[-1].outputs if o]
    weights = tuple(v for v in reads if v in g.weights)
    inputs = tuple(v for v in reads if v not in g.weights)
    types = {v: g.types[v] for v in (*reads, *produced) if v in g.types}
    data = {w: g.data[w] for w in weights if w in g.data}
    return Graph(part, inputs, tuple(outputs), types, weights, data, g.meta)


def eliminate_dead(g: Graph) -> Graph:
    """Drop nodes and weights no output depends on (ops are pure; opaque nodes are kept only if used). A kept
    node's unread outputs keep their types: a rule that matches a Split binds all of its outputs."""
    live = set(g.outputs)
    kept: list[Node] = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(n.reads)
    weights = tuple(w for w in g.weights if w in live)
    if len(kept) == len(g.nodes) and len(weights) == len(g.weights):
        return g
    typed = live | set(g.inputs) | {o for n in kept for o in n.outputs}
    return replace(
        g,
        nodes=tuple(reversed(kept)),
        weights=weights,
        data={k: v for k, v in g.data.items() if k in live},
        types={k: v for k, v in g.types.items() if k in typed},
    )


def fresh_names(used: Iterable[str], prefix: str) -> Iterator[str]:
    """Value names not in ``used`` (pass every name of every graph the new values will live in)."""
    taken = set(used)
    for i in itertools.count():
        name = f"{prefix}{i}"
        if name not in taken:
            taken.add(name)
            yield name
