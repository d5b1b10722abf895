"""Chains of axis moves composed: at most a Reshape, a Transpose and a Reshape where exporters wrote more.

Exporters move axes in many small steps. ViT-B/16's attention as the dynamo exporter writes it takes the fused
QKV projection through Reshape, Unsqueeze, Transpose and Squeeze, then each head through Reshape, Transpose,
Transpose and Reshape: onnxruntime runs every Transpose as a copy and every step as a node of its own, and fuses
none of them. A Reshape, Transpose, Squeeze, Unsqueeze or Flatten only moves elements, so a chain of them is one
fixed rearrangement of its input, and any chain is the same as: split the input's axes into *atoms*, permute the
atoms once, regroup them into the output's axes.

The composition is exact, at every size of the dynamic dims: an atom is a whole input axis or an int-sized piece
of one, a dim param is never split, and a step that would cut an atom other than by an exact int factor stops
the chain being composed (the chain stays as written). A chain is replaced only where that takes fewer nodes.

A step's parameters need not be constants: the dynamo exporter computes BERT's and GPT-2's head reshapes from
``Shape`` (``[-1, seq, 64]``), and each entry of such a target is known as shape inference names it
(`taso.optimize.shapefold.abstract_values`): an int, or a dim param, the size of that dim wherever it appears.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from taso import onnx as onnx_io
from taso.ir import Dim, Graph, Node, TensorType, WeightData, eliminate_dead, fresh_names, lint
from taso.optimize.shapefold import Abstract, Elem, abstract_values

Size = tuple[int, tuple[str, ...]]
"""A size as a product: an int factor and the dim params multiplied in (sorted), e.g. ``(12, ("batch",))``."""


class _Uncomposable(Exception):
    """A step the atoms cannot follow exactly: the chain is left as written."""


def _times(a: Size, b: Size) -> Size:
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def _over(a: Size, b: Size) -> Size:
    """``a / b``; raises where ``b`` does not divide ``a`` at every size of the dim params."""
    rest = Counter(a[1])
    rest.subtract(b[1])
    if a[0] % b[0] or any(v < 0 for v in rest.values()):
        raise _Uncomposable
    return a[0] // b[0], tuple(sorted(rest.elements()))


ONE: Size = (1, ())
MAX_RANK = 8
"""The most atoms a composed Transpose moves: onnxruntime's CUDA kernels take tensors of up to 8 axes."""


@dataclass
class _Layout:
    """Where a chain has moved its input's elements to: ``order`` lists the input's atoms in memory order,
    ``dims`` the current axes, each the atoms it holds (none for an axis of size 1), outermost first."""

    sizes: dict[int, Size]
    order: list[int]
    dims: list[list[int]]

    @classmethod
    def of(cls, shape: list[Size]) -> _Layout:
        sizes: dict[int, Size] = {}
        dims: list[list[int]] = []
        for d in shape:
            if d == ONE:
                dims.append([])
            else:
                sizes[len(sizes)] = d
                dims.append([len(sizes) - 1])
        return cls(sizes, _flat(dims), dims)

    def size(self, atoms: list[int]) -> Size:
        return _product(self.sizes[a] for a in atoms)

    def shape(self) -> list[Size]:
        return [self.size(d) for d in self.dims]

    def transpose(self, perm: list[int]) -> None:
        if sorted(perm) != list(range(len(self.dims))):
            raise _Uncomposable
        self.dims = [self.dims[p] for p in perm]

    def reshape(self, target: list[Size]) -> None:
        """Regroup the atoms, in their current order, into axes of the ``target`` sizes, splitting an int atom
        where an axis ends inside it."""
        queue = _flat(self.dims)
        dims: list[list[int]] = []
        for want in target:
            group: list[int] = []
            have = ONE
            while have != want:
                if not queue:
                    raise _Uncomposable
                atom = queue.pop(0)
                size = self.sizes[atom]
                try:
                    _over(want, _times(have, size))
                except _Uncomposable:  # the axis ends inside this atom: split off the part it takes
                    need = _over(want, have)
                    if need[1] or size[0] % need[0]:  # a dim param's atom (1, (p,)) divides by no int
                        raise
                    outer, inner = self._split(atom, need[0])
                    queue.insert(0, inner)
                    atom, size = outer, self.sizes[outer]
                group.append(atom)
                have = _times(have, size)
            dims.append(group)
        if queue:
            raise _Uncomposable
        self.dims = dims

    def _split(self, atom: int, outer: int) -> tuple[int, int]:
        """Atom ``atom`` as two, ``outer`` then the rest, wherever it appears."""
        a = max(self.sizes) + 1
        b = a + 1
        self.sizes[a], self.sizes[b] = (outer, ()), (self.sizes[atom][0] // outer, ())
        for atoms in (self.order, *self.dims):
            if atom in atoms:
                k = atoms.index(atom)
                atoms[k : k + 1] = [a, b]
        del self.sizes[atom]
        return a, b


def _product(sizes: Iterable[Size]) -> Size:
    out = ONE
    for s in sizes:
        out = _times(out, s)
    return out


def compose_views(g: Graph) -> tuple[Graph, int]:
    """``g`` with each chain of axis moves (`FOLLOW`) that takes more nodes than its composition composed;
    returns the graph and how many nodes that removed (``g`` itself where none). Repeats while a round removes
    nodes: a composed chain leaves dead the shape program its targets were computed from, and a Shape that read
    a link made it a link of two readers (GPT-2's key head after its split: Reshape, Transpose, then, past the
    Shape, Reshape, Transpose, Reshape)."""
    out, removed = _compose_once(g)
    total = removed
    while removed:
        out, removed = _compose_once(out)
        total += removed
    return out, total


def _compose_once(g: Graph) -> tuple[Graph, int]:
    keep = set(g.outputs)
    values = abstract_values(g)
    moves = {
        id(n): p
        for n in g.nodes
        if n.op in FOLLOW and not n.domain and not n.implicit and (p := _params(n, values)) is not None
    }
    fresh = fresh_names(g.values(), "view_")
    named = {n.name for n in g.nodes if n.name}  # node names taken, shared by every chain this round writes
    data, types, weights = dict(g.data), dict(g.types), list(g.weights)
    replaced: dict[int, list[Node]] = {}  # id of a chain's last node -> the nodes that take its place
    dropped: set[int] = set()
    for chain in _chains(g, keep, moves):
        try:
            written = _composed(g, chain, fresh, named, moves)
        except _Uncomposable:
            continue
        if len(written.nodes) < len(chain):
            data.update(written.data)
            types.update(written.types)
            weights += written.data
            replaced[id(chain[-1])] = written.nodes
            dropped.update(id(n) for n in chain)
    if not replaced:
        return g, 0
    nodes = [m for n in g.nodes for m in replaced.get(id(n), [] if id(n) in dropped else [n])]
    out = lint(eliminate_dead(replace(g, nodes=tuple(nodes), weights=tuple(weights), data=data, types=types)))
    return out, len(g.nodes) - len(out.nodes)


Params = Sequence[tuple[Elem, ...] | None]
"""A move's parameters, entry by entry (`_params`)."""


def _params(n: Node, values: Mapping[str, Abstract]) -> Params | None:
    """The entries of a move's parameters (a Reshape target, Squeeze or Unsqueeze axes; None where not given),
    or None if one is not known entry by entry. A catalogued Squeeze's or Unsqueeze's axes are its attribute
    (import read them from their input)."""
    if not n.is_opaque and "axes" in n.attr:
        return [tuple(n.attr["axes"])]  # type: ignore[arg-type]
    params: list[tuple[Elem, ...] | None] = []
    for v in n.inputs[1:]:
        value = values.get(v) if v else None
        if v and (value is None or len(value[0]) != 1 or None in value[1]):
            return None
        params.append(value[1] if value is not None else None)
    return params


def _chains(g: Graph, keep: set[str], moves: Mapping[int, Params]) -> list[list[Node]]:
    """Each maximal run of ``moves`` (nodes by id, with their parameters) where every link's output is read by
    the next move alone (and is no graph output), of two moves or more."""

    def next_move(n: Node) -> Node | None:
        out = n.outputs[0]
        readers = g.consumers.get(out, ())
        if out in keep or len(readers) != 1 or id(readers[0]) not in moves:
            return None
        return readers[0]  # its parameters are known, so its data input is ``out``

    linked = {id(m) for n in g.nodes if id(n) in moves and (m := next_move(n)) is not None}
    chains = []
    for n in g.nodes:
        if id(n) not in moves or id(n) in linked:
            continue
        chain = [n]
        while (m := next_move(chain[-1])) is not None:
            chain.append(m)
        if len(chain) > 1:
            chains.append(chain)
    return chains


@dataclass
class _Written:
    """The nodes a composition writes, with the targets and the types of the values it makes (fresh names;
    the chain's output keeps its name and type). Node names are made unique among ``named``: onnxruntime
    refuses a model with two nodes of one name, and two unnamed chains both named theirs ``Transpose/...``."""

    fresh: Iterator[str]
    dtype: str
    named: set[str]
    nodes: list[Node] = field(default_factory=list)
    data: dict[str, WeightData] = field(default_factory=dict)
    types: dict[str, TensorType] = field(default_factory=dict)

    def _out(self, out: str | None, shape: list[Size]) -> str:
        if out is None:
            out = next(self.fresh)
            self.types[out] = TensorType(self.dtype, tuple(_dim(s) for s in shape))
        return out

    def _name(self, name: str) -> str:
        unique, k = name, 0
        while unique in self.named:
            k += 1
            unique = f"{name}_{k}"
        self.named.add(unique)
        return unique

    def transpose(self, x: str, perm: list[int], shape: list[Size], name: str, out: str | None = None) -> str:
        out = self._out(out, shape)
        self.nodes.append(Node("Transpose", (x,), (out,), (("perm", tuple(perm)),), name=self._name(name)))
        return out

    def reshape(self, x: str, shape: list[Size], target: list[Size], name: str, out: str | None = None) -> str:
        """A Reshape of ``x`` (of ``shape``) to ``target``, written so that it holds at every size: a static
        size as itself, an axis equal to the input's at its index copied (0), one other axis inferred (-1)."""
        entries = [s[0] if not s[1] else 0 if k < len(shape) and shape[k] == s else -1 for k, s in enumerate(target)]
        if entries.count(-1) > 1:
            raise _Uncomposable
        w = next(self.fresh)
        self.data[w] = WeightData(np.array(entries, np.int64))
        self.types[w] = TensorType("int64", (len(entries),))
        out = self._out(out, target)
        self.nodes.append(Node("Reshape", (x, w), (out,), (("allowzero", 0),), name=self._name(name)))
        return out


def _composed(
    g: Graph, chain: list[Node], fresh: Iterator[str], named: set[str], moves: Mapping[int, Params]
) -> _Written:
    """The chain's composition: Reshape to the atoms, Transpose them, Reshape to the chain's output shape, each
    left out where it changes nothing."""
    x, y = chain[0].inputs[0], chain[-1].outputs[0]
    t = g.types.get(x)
    if t is None or t.shape is None or g.types.get(y) is None:
        raise _Uncomposable
    shape = [_size(d) for d in t.shape]
    layout = _Layout.of(shape)
    for n in chain:
        FOLLOW[n.op](layout, n, moves[id(n)])
    atoms = [layout.sizes[a] for a in layout.order]
    perm = [layout.order.index(a) for a in _flat(layout.dims)]
    if len(perm) > MAX_RANK:
        raise _Uncomposable
    final = layout.shape()
    written = _Written(fresh, t.dtype, named)
    value = x
    name = chain[-1].name or chain[-1].op
    if perm != sorted(perm):
        if shape != atoms:
            value, shape = written.reshape(value, shape, atoms, f"{name}/atoms"), atoms
        shape = [shape[p] for p in perm]
        value = written.transpose(value, perm, shape, f"{name}/moved", y if shape == final else None)
    if value != y:
        written.reshape(value, shape, final, f"{name}/regrouped", y)
    return written


def _transpose(layout: _Layout, n: Node, params: Params) -> None:
    perm = onnx_io.int_attrs(n).get("perm")
    layout.transpose(list(perm) if perm is not None else list(reversed(range(len(layout.dims)))))  # type: ignore[arg-type]


def _flatten(layout: _Layout, n: Node, params: Params) -> None:
    axis = int(onnx_io.int_attrs(n).get("axis", 1))  # type: ignore[arg-type]
    axis = axis + len(layout.dims) if axis < 0 else axis
    layout.reshape([layout.size(_flat(layout.dims[:axis])), layout.size(_flat(layout.dims[axis:]))])


def _reshape_to(layout: _Layout, n: Node, params: Params) -> None:
    allowzero = bool(onnx_io.int_attrs(n).get("allowzero"))
    layout.reshape(_target(layout, params[0], allowzero))  # type: ignore[arg-type]


def _axes(params: Params) -> list[int]:
    """Squeeze's or Unsqueeze's axes, an input from opset 13 (import upgrades older models); none if not given."""
    axes = params[0] if params else None
    if axes is not None and not all(isinstance(a, int) for a in axes):
        raise _Uncomposable  # an axis that is a dim's size: no model means that
    return list(axes) if axes is not None else []  # type: ignore[arg-type]


def _squeeze(layout: _Layout, n: Node, params: Params) -> None:
    rank = len(layout.dims)
    at = {a % rank for a in _axes(params)} if rank else set()
    if not at or any(layout.dims[a] for a in at):
        raise _Uncomposable  # every size-1 axis (which the run decides), or an axis not known to be 1
    layout.dims = [d for k, d in enumerate(layout.dims) if k not in at]


def _unsqueeze(layout: _Layout, n: Node, params: Params) -> None:
    axes = _axes(params)
    for a in sorted(a % (len(layout.dims) + len(axes)) for a in axes):
        layout.dims.insert(a, [])


FOLLOW: dict[str, Callable[[_Layout, Node, Params], None]] = {
    "Reshape": _reshape_to,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Flatten": _flatten,
}
"""How each op a chain is made of moves its input's elements: the atoms' layout after it. Each only moves
elements, computing nothing, so a chain of them is one rearrangement."""


def _flat(dims: list[list[int]]) -> list[int]:
    return [a for d in dims for a in d]


def _target(layout: _Layout, target: tuple[Elem, ...], allowzero: bool) -> list[Size]:
    """A Reshape's target as sizes: 0 copies the input's axis (unless ``allowzero``), -1 takes what is left, a dim
    param is that dim's size."""
    current = layout.shape()
    sizes: list[Size | None] = []
    for k, d in enumerate(target):
        if isinstance(d, str):
            sizes.append((1, (d,)))
        elif d == 0 and not allowzero and k < len(current):
            sizes.append(current[k])
        elif d == -1:
            sizes.append(None)
        elif d > 0:
            sizes.append((d, ()))
        else:
            raise _Uncomposable
    if sizes.count(None) > 1:
        raise _Uncomposable
    if None in sizes:
        known = _product(s for s in sizes if s is not None)
        sizes[sizes.index(None)] = _over(_product(layout.sizes.values()), known)
    return sizes  # type: ignore[return-value]


def _size(d: Dim) -> Size:
    """An IR dim as a size; an unknown one (or a negative one, as some exporters write) cannot be told from
    another, so no atom stands for it."""
    if d is None or (isinstance(d, int) and d < 1):
        raise _Uncomposable
    return (d, ()) if isinstance(d, int) else (1, (d,))


def _dim(s: Size) -> Dim:
    """A size as an IR dim: an int, a lone dim param, or unknown (a product with a dim param)."""
    if not s[1]:
        return s[0]
    return s[1][0] if s[0] == 1 and len(s[1]) == 1 else None
