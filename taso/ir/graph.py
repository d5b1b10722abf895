"""The one graph IR every stage of subst shares.

A `Graph` is an immutable, hashable DAG: a topologically ordered tuple of `Node`s that name the values they
read and write (ONNX-style single assignment), plus the types of those values, the graph's activation inputs,
its weights (initializers) and the model-level facts the exporter needs to write the model back unchanged.

Nodes whose op is in the operator catalogue (`taso.ops`) carry plain Python attributes; every other node
(custom domains, control flow with subgraphs, ops the catalogue does not describe) is *opaque*: it keeps its
original attributes as bytes that only `taso.onnx_io` reads, and passes through every stage untouched.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from types import MappingProxyType

import numpy as np

Dim = int | str | None
"""A dimension: a static size, a symbolic name (``"batch"``) or unknown (``None``)."""

AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...]


@dataclass(frozen=True, slots=True)
class TensorType:
    """Element type and shape of a value; ``shape is None`` means even the rank is unknown."""

    dtype: str
    shape: tuple[Dim, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def with_dims(self, dims: Mapping[str, int]) -> TensorType:
        """This type with named symbolic dims replaced by sizes (for costing a dynamic model at one size)."""
        if self.shape is None or not any(isinstance(d, str) and d in dims for d in self.shape):
            return self
        return TensorType(self.dtype, tuple(dims.get(d, d) if isinstance(d, str) else d for d in self.shape))

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[*]"
        dims = ",".join("?" if d is None else str(d) if isinstance(d, int) else _quote(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


class Kind(Enum):
    """Where a value comes from, which decides what may be precomputed before inference."""

    ACTIVATION = "activation"  # depends on a graph input: computed at every inference
    WEIGHT = "weight"  # an initializer
    CONSTANT = "constant"  # computed from weights and constants only: foldable ahead of time


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", tuple(i for i in self.inputs if i) + self.implicit)

    @property
    def is_opaque(self) -> bool:
        return self.opaque is not None

    @property
    def attr(self) -> dict[str, AttrValue]:
        return dict(self.attrs)


def canonical_attr(v: AttrValue | list) -> AttrValue:
    """Lists become tuples and floats are rounded to float32, as ONNX stores them, so values read back from a
    model compare equal to the ones written."""
    if isinstance(v, list | tuple):
        return tuple(canonical_attr(x) for x in v)  # type: ignore[return-value]
    if isinstance(v, float):
        return float(np.float32(v))
    return v


def make_attrs(attrs: Mapping[str, AttrValue]) -> tuple[tuple[str, AttrValue], ...]:
    """The canonical (sorted, hashable) form of an attribute dict."""
    return tuple(sorted((k, canonical_attr(v)) for k, v in attrs.items()))


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


class WeightData:
    """A read-only array with a digest computed once, so hashing a graph never rehashes weights. Equal digests
    mean equal data: the digest is of the content, or, for data computed from other weights, of how it was
    computed (`computed`). Data that only rearranges other data can be left to compute when first read
    (`deferred`): a search costs thousands of candidates by their shapes and keeps a few."""

    __slots__ = ("_array", "_make", "dtype", "shape", "__dict__")

    def __init__(self, array: np.ndarray, owned: bool = False) -> None:
        """``owned``: the caller made ``array`` for this and keeps no other reference, so it is frozen in place
        rather than copied (a search folds megabytes of weights per candidate)."""
        array = _read_only(array, owned)
        self._array: np.ndarray | None = array
        self._make: Callable[[], np.ndarray] | None = None
        self.dtype, self.shape = array.dtype, array.shape

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            assert self._make is not None
            made = _read_only(self._make(), owned=True)
            if (made.dtype, made.shape) != (self.dtype, self.shape):
                raise ValueError(f"deferred data made {made.dtype}{made.shape}, promised {self.dtype}{self.shape}")
            self._array, self._make = made, None
        return self._array

    @classmethod
    def computed(cls, array: np.ndarray, recipe: tuple) -> WeightData:
        """Data a deterministic computation made from other data (``recipe``: the computation and its inputs'
        `WeightData`), owned by the caller. Its digest is the recipe's: a search folds thousands of weights
        (NasRNN: 980 concatenated gate matrices, 2.9 GB to hash by content) and equal recipes give equal data."""
        data = cls(array, owned=True)
        data.__dict__["digest"] = _recipe_digest(data.dtype, data.shape, recipe)
        return data

    @classmethod
    def deferred(cls, dtype: str, shape: tuple[int, ...], make: Callable[[], np.ndarray], recipe: tuple) -> WeightData:
        """`computed` data of a known type whose array ``make`` computes when it is first read."""
        data = cls.__new__(cls)
        data._array, data._make = None, make
        data.dtype, data.shape = np.dtype(dtype), tuple(shape)
        data.__dict__["digest"] = _recipe_digest(data.dtype, data.shape, recipe)
        return data

    @property
    def spelled(self) -> str | None:
        """The values where they say what a graph computes rather than hold learned numbers: small integer
        tensors (shapes, axes, split sizes). Unit costs (`taso.cost.unit_key`) and `Graph.form` include them."""
        if int(np.prod(self.shape)) > 16 or self.dtype.kind not in "iu":
            return None
        return str(self.array.tolist())

    @cached_property
    def digest(self) -> str:
        h = hashlib.sha256(f"{self.array.dtype}{self.array.shape}".encode())
        h.update(np.ascontiguousarray(self.array).data)
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WeightData) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)


def _read_only(array: np.ndarray, owned: bool) -> np.ndarray:
    """``array`` frozen: in place when ``owned`` (nothing else holds it), else a frozen copy."""
    array = np.asarray(array)
    if array.flags.writeable:
        array = array if owned else array.copy()
        array.flags.writeable = False
    return array


def _recipe_digest(dtype: np.dtype, shape: tuple[int, ...], recipe: tuple) -> str:
    parts = [p.digest if isinstance(p, WeightData) else p for p in recipe]
    return hashlib.sha256(repr(("computed", str(dtype), shape, parts)).encode()).hexdigest()


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
        return format_graph(self)


def _value_keys(g: Graph, leaves: dict[str, str]) -> dict[str, str]:
    """Each value's key: ``leaves`` gives the inputs' and weights'; a node output's is a digest of the node's
    op and attributes and the keys of what it reads (`Graph.structure`, `Graph.form`)."""
    keys = dict(leaves)
    for n in g.nodes:
        digest = hashlib.sha256(repr((n.op, n.domain, n.attrs, n.opaque, [keys.get(i, i) for i in n.reads])).encode())
        node_key = digest.hexdigest()
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


def topological_order(nodes: list[Node], defined: set[str]) -> list[Node] | None:
    """``nodes`` in an order where every value is defined before it is read, keeping the given order where
    it already is one (so rewrites disturb the model's layout as little as possible); None on a cycle.

    Kahn's algorithm, always placing the earliest ready node: the smallest valid order by position, in
    O(n log n) (a rewrite appends its new nodes after every node that reads them)."""
    producers = {o for n in nodes for o in n.outputs if o}
    waits = [0] * len(nodes)
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for v in dict.fromkeys(n.reads):
            if v in producers and v not in defined:
                waits[k] += 1
                readers.setdefault(v, []).append(k)
    ready = [k for k, w in enumerate(waits) if w == 0]
    placed: list[Node] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
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
    order = {id(n): i for i, n in enumerate(g.nodes)}
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
    """Drop nodes and weights no output depends on (ops are pure; opaque nodes are kept only if used)."""
    live = set(g.outputs)
    kept: list[Node] = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(n.reads)
    weights = tuple(w for w in g.weights if w in live)
    if len(kept) == len(g.nodes) and len(weights) == len(g.weights):
        return g
    return replace(
        g,
        nodes=tuple(reversed(kept)),
        weights=weights,
        data={k: v for k, v in g.data.items() if k in live},
        types={k: v for k, v in g.types.items() if k in live or k in g.inputs},
    )


# ---- text form: one line per node, parse(format(g)) == g for catalogue graphs with small or no weights ------

_SIMPLE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
_INLINE_LIMIT = 16


def _quote(name: str) -> str:
    return name if _SIMPLE.fullmatch(name) else json.dumps(name)


def _ref(name: str) -> str:
    return "%" + _quote(name) if name else "_"


def _fmt_attr(v: AttrValue) -> str:
    return json.dumps(list(v)) if isinstance(v, tuple) else json.dumps(v)


def format_graph(g: Graph) -> str:
    """FX-style text: a header with typed inputs and weights, one line per node, then ``return``."""
    params = [f"{_ref(i)}: {g.types.get(i, '?')}" for i in g.inputs]
    for w in g.weights:
        t = g.types.get(w, "?")
        d = g.data.get(w)
        if d is not None and d.array.size <= _INLINE_LIMIT:
            params.append(f"{_ref(w)}: {t} = {json.dumps(d.array.tolist())}")
        else:
            params.append(f"{_ref(w)}: {t} weight")
    lines = [f"graph({', '.join(params)}):"]
    for n in g.nodes:
        outs = ", ".join(_ref(o) for o in n.outputs)
        op = f"{n.domain}::{n.op}" if n.domain else n.op
        attrs = "" if not n.attrs else " {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs) + "}"
        if n.is_opaque:
            attrs += " <opaque>"
        types = ", ".join(str(g.types.get(o, "?")) for o in n.outputs)
        lines.append(f"  {outs} = {op}({', '.join(_ref(i) for i in n.inputs)}){attrs} : {types}")
    lines.append(f"  return {', '.join(_ref(o) for o in g.outputs)}")
    return "\n".join(lines)


_TOKEN = re.compile(
    r'\s*(?:(?P<ref>%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_][A-Za-z0-9_.]*))|(?P<skip>_)'
    r'|(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<word>[A-Za-z_][A-Za-z0-9_:.]*)'
    r"|(?P<punct>[()\[\]{},:=?*]))"
)


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise IRError(f"cannot parse graph text at {text[pos : pos + 30]!r}")
            kind = m.lastgroup or ""
            self.items.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.items[self.i] if self.i < len(self.items) else ("end", "")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        k, v = self.peek()
        if (value is not None and v != value) or (kind is not None and k != kind):
            raise IRError(f"graph text: expected {value or kind}, found {v!r}")
        self.i += 1
        return v

    def accept(self, value: str) -> bool:
        if self.peek()[1] == value and self.peek()[0] in ("punct", "word"):
            self.i += 1
            return True
        return False

    def name(self) -> str:
        k, v = self.peek()
        if k == "skip":
            self.i += 1
            return ""
        v = self.take(kind="ref")[1:]
        return json.loads(v) if v.startswith('"') else v

    def json_value(self) -> object:
        """A JSON literal (number, string or nested list), read token by token."""
        k, v = self.peek()
        if v == "[":
            self.take("[")
            items: list[object] = []
            while not self.accept("]"):
                items.append(self.json_value())
                self.accept(",")
            return items
        self.i += 1
        if k in ("num", "str"):
            return json.loads(v)
        raise IRError(f"graph text: expected a literal, found {v!r}")

    def type_(self) -> TensorType:
        dtype = self.take(kind="word")
        self.take("[")
        if self.accept("*"):
            self.take("]")
            return TensorType(dtype, None)
        dims: list[Dim] = []
        while not self.accept("]"):
            k, v = self.peek()
            self.i += 1
            dims.append(None if v == "?" else int(v) if k == "num" else json.loads(v) if k == "str" else v)
            self.accept(",")
        return TensorType(dtype, tuple(dims))


def parse_graph(text: str) -> Graph:
    """Inverse of `format_graph` for catalogue graphs whose weights are symbolic or printed inline."""
    t = _Tokens(text)
    t.take("graph")
    t.take("(")
    inputs: list[str] = []
    weights: list[str] = []
    types: dict[str, TensorType] = {}
    data: dict[str, WeightData] = {}
    while not t.accept(")"):
        name = t.name()
        t.take(":")
        types[name] = t.type_()
        if t.accept("="):
            weights.append(name)
            data[name] = WeightData(np.array(t.json_value(), dtype=types[name].dtype))
        elif t.accept("weight"):
            weights.append(name)
        else:
            inputs.append(name)
        t.accept(",")
    t.take(":")
    nodes: list[Node] = []
    while not t.accept("return"):
        outs = [t.name()]
        while t.accept(","):
            outs.append(t.name())
        t.take("=")
        op = t.take(kind="word")
        domain, _, op = op.rpartition("::")
        t.take("(")
        ins: list[str] = []
        while not t.accept(")"):
            ins.append(t.name())
            t.accept(",")
        attrs: dict[str, AttrValue] = {}
        if t.accept("{"):
            while not t.accept("}"):
                key = t.take(kind="word")
                t.take("=")
                v = t.json_value()
                attrs[key] = tuple(v) if isinstance(v, list) else v  # type: ignore[assignment]
                t.accept(",")
        t.take(":")
        for o in outs:
            ty = t.type_() if t.peek()[1] != "?" else None
            if ty is None:
                t.take("?")
            else:
                types[o] = ty
            t.accept(",")
        nodes.append(Node(op, tuple(ins), tuple(outs), make_attrs(attrs), domain=domain))
    outputs = [t.name()]
    while t.accept(","):
        outputs.append(t.name())
    return lint(Graph(tuple(nodes), tuple(inputs), tuple(outputs), types, tuple(weights), data))


def fresh_names(used: Iterable[str], prefix: str) -> Iterator[str]:
    """Value names not in ``used`` (pass every name of every graph the new values will live in)."""
    taken = set(used)
    for i in itertools.count():
        name = f"{prefix}{i}"
        if name not in taken:
            taken.add(name)
            yield name
