"""Operations an operand's known content makes idle, replaced by their other operand.

The dynamo exporter writes transformers' causal mask with a test for packed sequences: with position ids
``arange(seq)``, ``(ids[1:] - ids[:-1] != 1).cumsum(-1)`` is zero everywhere, so the test is true everywhere and
the mask's And with it is the causal mask itself. Nothing says so before the run, and on a GPU those thirty
small nodes cost GPT-2 a fifth of its latency (bench/CORPUS.md). Where `taso.optimize.content` knows an operand
to be a splat of the op's identity (And with all-true, Where on a known condition), the op hands on its other
operand, where every reader broadcasts that to the shape it had (`_absorbed`), and the test is dead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from taso import ops
from taso.ir import Graph, Node, TensorType, eliminate_dead, lint
from taso.optimize.content import Content, contents

ABSORB_DEPTH = 8
"""Readers followed at most when a narrower operand's shape must be absorbed by later broadcasts."""


def drop_idle(g: Graph) -> tuple[Graph, int]:
    """``g`` with each op an operand's known content makes idle replaced by its other operand, where the
    shapes allow it; returns the graph and how many ops that removed (``g`` itself where none)."""
    g0, g = g, eliminate_dead(g)  # a dead reader reads nothing
    known = contents(g)
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in dict.fromkeys(n.inputs):
            readers.setdefault(i, []).append(n)
    renames: dict[str, str] = {}
    types = dict(g.types)
    for n in g.nodes:
        kept = _handed_on(n, known, g)
        if kept is None:
            continue
        kept = renames.get(kept, kept)
        reshaped: dict[str, TensorType] = {}
        if _absorbed(n.outputs[0], types.get(kept), types, readers, g.outputs, reshaped, ABSORB_DEPTH):
            renames[n.outputs[0]] = kept
            types.update(reshaped)
    if not renames:
        return g0, 0
    nodes = tuple(replace(n, inputs=tuple(renames.get(i, i) for i in n.inputs)) for n in g.nodes)
    out = lint(eliminate_dead(replace(g, nodes=nodes, types=types)))
    return out, len(g0.nodes) - len(out.nodes)


def _handed_on(n: Node, contents: Mapping[str, Content], g: Graph) -> str | None:
    """The operand ``n`` computes unchanged, given what the other operand holds everywhere."""
    if n.domain or len(n.outputs) != 1:
        return None
    c = [contents.get(i) for i in n.inputs]
    if n.op == "Where" and len(c) == 3 and c[0] is not None and c[0].splat and _holds(c[0], n.inputs[0], g):
        return n.inputs[1] if c[0].offset else n.inputs[2]
    identity = {"And": 1, "Or": 0, "Add": 0, "Mul": 1}.get(n.op)
    if identity is None or len(c) != 2:
        return None
    for k in (0, 1):
        other = c[1 - k]
        if other is not None and other.splat and other.offset == identity and _holds(other, n.inputs[1 - k], g):
            return n.inputs[k]
    return None


def _holds(c: Content, value: str, g: Graph) -> bool:
    """Whether ``c`` holds of ``value`` at every size: what it assumes of a dim, ``value`` is empty without."""
    t = g.types.get(value)
    return c.assumes <= {d for d in (t.shape or ()) if isinstance(d, str)} if t is not None else not c.assumes


def _absorbed(
    value: str,
    narrower: TensorType | None,
    types: Mapping[str, TensorType],
    readers: Mapping[str, list[Node]],
    outputs: tuple[str, ...],
    reshaped: dict[str, TensorType],
    depth: int,
) -> bool:
    """Whether ``value`` may be read as a tensor of type ``narrower``: the same, or one that every reader
    broadcasts, alone or through readers of theirs, to the shapes it had. The new types go to ``reshaped``."""
    old = types.get(value)
    if narrower is None or old is None or old.shape is None or narrower.shape is None or old.dtype != narrower.dtype:
        return False
    if narrower.shape == old.shape:
        return True
    if depth == 0 or value in outputs:
        return False
    for r in readers.get(value, []):
        if r.domain or ops.ELEMENTWISE not in ops.traits_of(r.op) or len(r.outputs) != 1:
            return False
        shapes = [narrower.shape if i == value else _shape(types.get(i)) for i in r.inputs]
        out = types.get(r.outputs[0])
        wide = _broadcast(shapes)
        if out is None or wide is None:
            return False
        if wide != out.shape:
            new = TensorType(out.dtype, wide)
            if not _absorbed(r.outputs[0], new, types, readers, outputs, reshaped, depth - 1):
                return False
            reshaped[r.outputs[0]] = new
    return True


def _shape(t: TensorType | None) -> tuple | None:
    return None if t is None else t.shape


def _broadcast(shapes: list[tuple | None]) -> tuple | None:
    """The broadcast of ``shapes`` where their dims decide it (equal, or 1), else None."""
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)  # type: ignore[arg-type]
    out = []
    for k in range(rank):
        dims = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0}  # type: ignore[arg-type,index]
        wide = dims - {1}
        if None in wide or len(wide) > 1:
            return None
        out.append(wide.pop() if wide else 1)
    return tuple(out)
