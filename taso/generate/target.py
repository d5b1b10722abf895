"""Target-directed generation: every spelling, in catalogue ops, of one catalogue op's defining expression, up to
``max_ops`` ops, each paired with the op by the exact fingerprint (Mirage's abstract-expression pruning).

Patterns of 5-15 ops (erf-GELU, LayerNorm, RMSNorm, softmax spelled out) are beyond exhaustive enumeration.
A target names a catalogue op, an example of its inputs and attributes, and the expression that defines it
(`specs/targets.toml`). Graphs grow one node at a time, as in `taso.generate.driver`; a node is kept only if
its abstract expression (`taso.generate.abstract`, a normal form modulo the algebra exporters' spellings
differ by) is a piece of the target's, the graph does not compute one expression twice, and its loose ends can
still meet within the ops left. A graph whose one sink is the target's expression is a candidate; it becomes a
rule (candidate -> target op) only where its fingerprint equals the target's (two exact evaluations over the
field, `taso.generate.fingerprint`), and z3 proves it or not (`subst verify`).

Rules are written in the catalogue's normal form (`taso.verify.admit.normalised`: an axis of -1 as its index),
the form `subst verify` admits.

The vocabulary is the catalogue ops with a meaning (`OpDef.meaning`, read by `taso.generate.targets.read`): adding
an op to it touches its entry alone; a reduction runs along each axis the target's expression reduces, a Softmax
along each axis it takes one, a Transpose by each perm it names (a perm spelled as two transposes is not found:
the first is no piece of the expression), a Pow's exponent is a pool constant. Every constant of the target's
expression, and its reciprocal (a division by it), and 2 (a square as Pow) are in the pool as weights with
their data. A target's right side may be a small graph around its op (attention's Reshapes, `Target.rhs`). A
level's graphs are sharded over the executor's workers (`Executor.map`, as the exhaustive driver does); children
are merged in job order and deduplicated by structure, so the rules do not depend on how many workers ran them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from taso import ops
from taso.errors import BadInput
from taso.generate import abstract as ab
from taso.generate.executor import Executor, Inputs, LocalExecutor, chunks
from taso.generate.fingerprint import fingerprint
from taso.generate.forms import InputClass, Settings
from taso.generate.targets import ATTRIBUTES, Target, called, read, variables
from taso.ir import TensorType, parse_graph
from taso.rules import Rule
from taso.verify.admit import normalised

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Move:
    """A catalogue op as the generator applies it: its arity and attributes; `meaning` gives its expression."""

    op: str
    arity: int
    attrs: tuple[tuple[str, object], ...] = ()
    commutative: bool = False
    reduces: int | None = None
    """The axis a reduction runs along (kept as size 1), None for an element-wise op."""
    shape: Shape = ()
    """The shape that axis counts in (a mean is a sum times the inverse of its size)."""


def meaning(move: Move, args: Sequence[ab.Term]) -> ab.Term:
    """The abstract expression of ``move`` on arguments of expressions ``args``: its entry's `OpDef.meaning`."""
    where = f"{move.op}'s meaning"
    attrs = {"axis": move.reduces} if move.reduces is not None else dict(move.attrs)
    return read(where, ops.OPS[move.op].meaning, dict(zip("ab", args)), move.shape, attrs)


def _moves(target: Target) -> list[Move]:
    """The vocabulary for ``target``: the catalogue ops with a meaning, a reduction once per axis the target's
    expression reduces along, an op with an attribute (Softmax's axis, Transpose's perm) once per value the
    expression applies its function with."""
    shape = target.inputs[0][1]
    out = []
    for name, d in ops.OPS.items():
        names = variables(d.meaning) if d.meaning else frozenset()
        (attr,) = names & ATTRIBUTES or {None}
        if attr and called(d.meaning) in ("sum", "mean"):
            axes = target.axes()
            out += [Move(name, 1, (("axes", (a,)), ("keepdims", 1)), reduces=a, shape=shape) for a in axes]
        elif attr:
            values = target.params(called(d.meaning) or "")
            out += [Move(name, 1, ((attr, v),), shape=shape) for v in values]
        elif names:
            out.append(Move(name, 2 if "b" in names else 1, commutative=d.commutative))
    return out


# ---- a graph: leaves (inputs, constants) and nodes --------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    term: ab.Term
    shape: Shape
    key: str
    """The value's structure (op, attributes, arguments' keys; commutative arguments sorted): equal keys, equal
    graphs, whatever the order their nodes were added in."""
    constant: float | None = None
    """A pool constant's value, exact (the term's is rounded to compare spellings): what its graph writes."""


Node = tuple[int, tuple[int, ...]]
"""(move index, argument value indices); values are the leaves, then one per node."""


@dataclass
class Problem:
    """What every worker needs: the target, its leaves, its vocabulary and the pieces of its expression."""

    target: Target
    max_ops: int
    leaves: list[Value] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    goal: ab.Term = ()
    allowed: frozenset = frozenset()
    memo: dict = field(default_factory=dict, repr=False)
    """Values by (move, arguments' keys): a worker meets the same application in many graphs."""

    def __post_init__(self) -> None:
        t = self.target
        self.goal = t.expression()
        for name, shape, _ in t.inputs:
            self.leaves.append(Value(ab.leaf(name), shape, name))
        for name, v in t.pool_constants():
            self.leaves.append(Value(ab.const(v), t.constant_shape, name, constant=v))
        scalars = [ab.const(w) for v in t.numbers() for w in (v, 1 / v if v else v)]
        self.allowed = ab.pieces(self.goal, tuple(scalars))
        self.moves = _moves(t)

    def values(self, nodes: tuple[Node, ...]) -> list[Value]:
        out = list(self.leaves)
        for m, args in nodes:
            out.append(self.apply(m, [out[a] for a in args]))  # type: ignore[arg-type]
        return out

    def apply(self, m: int, args: list[Value]) -> Value | None:
        """The value of move ``m`` on ``args``, or None where it does not apply (shapes, a non-constant exponent)."""
        memo_key = (m, *(a.key for a in args))
        if memo_key not in self.memo:
            self.memo[memo_key] = self._apply(self.moves[m], args)
        return self.memo[memo_key]

    def _apply(self, move: Move, args: list[Value]) -> Value | None:
        if move.op == "Pow" and args[1].constant is None:
            return None
        try:
            shape = _shape(move, [a.shape for a in args])
        except (ValueError, ops.OpError):
            return None
        if move.reduces is not None:
            if move.reduces >= len(shape) or shape[move.reduces] == 1:
                return None
            shape = tuple(1 if i == move.reduces else d for i, d in enumerate(shape))
        keys = [a.key for a in args]
        if move.commutative:
            keys.sort()
        key = f"{move.op}{dict(move.attrs) or ''}({','.join(keys)})"
        return Value(meaning(move, [a.term for a in args]), tuple(shape), key)


def _shape(move: Move, shapes: list[Shape]) -> Shape:
    """The shape ``move`` gives arguments of ``shapes``: broadcast for an element-wise op or a reduction (which
    keeps its axis), the catalogue's shape rule for the others (MatMul, Transpose, Softmax)."""
    d = ops.OPS[move.op]
    if d.elementwise or move.reduces is not None:
        return np.broadcast_shapes(*shapes)
    (out,) = ops.infer(move.op, [TensorType("float32", s) for s in shapes], dict(move.attrs))
    return tuple(out.shape)  # type: ignore[arg-type]


# ---- extending a level: what the workers run --------------------------------------------------------------------


def _children(problem: Problem, nodes: tuple[Node, ...]) -> tuple[list[tuple[Node, ...]], list[tuple[Node, ...]]]:
    """The graphs one node larger than ``nodes`` worth growing, and those that are complete (one sink, the
    target's expression)."""
    values = problem.values(nodes)
    terms = {v.term for v in values}
    used = {a for _, args in nodes for a in args}
    n_leaves = len(problem.leaves)
    left = problem.max_ops - len(nodes) - 1
    grow: list[tuple[Node, ...]] = []
    done: list[tuple[Node, ...]] = []
    for m, move in enumerate(problem.moves):
        for args in _argument_tuples(len(values), move, values):
            v = problem.apply(m, [values[a] for a in args])
            if v is None or v.term in terms or v.term not in problem.allowed:
                continue
            sinks = {i for i in range(n_leaves, len(values)) if i not in used and i not in args} | {len(values)}
            child = (*nodes, (m, args))
            if v.term == problem.goal:
                if len(sinks) == 1:
                    done.append(child)
            elif left > 0 and len(sinks) - 1 <= left:  # an op joins at most two loose ends into one
                grow.append(child)
    return grow, done


def _argument_tuples(n: int, move: Move, values: list[Value]) -> list[tuple[int, ...]]:
    """Argument choices: not all constants (a constant expression is folded, never computed), commutative ops
    once per unordered pair."""
    if move.arity == 1:
        return [(a,) for a in range(n) if values[a].constant is None]
    out = []
    for a in range(n):
        for b in range(a if move.commutative else 0, n):
            if values[a].constant is None or values[b].constant is None:
                out.append((a, b))
    return out


def _work(ctx: object, data: tuple, job: tuple[int, int]) -> tuple[list, list]:
    """Extend the graphs ``frontier[start:stop]``; each complete child with whether its fingerprint is the
    target's."""
    problem, frontier, target_fp = data
    grow: list[tuple[Node, ...]] = []
    done: list[tuple[tuple[Node, ...], bool]] = []
    for nodes in frontier[slice(*job)]:
        g, d = _children(problem, nodes)
        grow += g
        done += [(c, fingerprint(parse_graph(graph_text(problem, c))) == target_fp) for c in d]
    return grow, done


# ---- the run ------------------------------------------------------------------------------------------------------


@dataclass
class Found:
    """A target run's spellings: all complete graphs, and the rules (those whose fingerprint is the target's)."""

    target: Target
    graphs: list[int]
    """Graphs kept per op count."""
    spellings: list[str]
    """Every complete graph (one sink, the target's expression), as text, in a fixed order."""
    rules: list[tuple[str, Rule]]
    """(the target's fingerprint, spelling -> target) for the spellings of the target's fingerprint."""


def generate_target(target: Target, max_ops: int, executor: Executor | None = None) -> Found:
    """Every spelling of ``target`` up to ``max_ops`` ops, level by level on ``executor`` (started and stopped
    here; default: this machine's processes)."""
    problem = Problem(target, max_ops)
    target_text = target.graph_text()
    target_fp = fingerprint(parse_graph(target_text))
    executor = executor or LocalExecutor()
    settings = Settings(0, ("add",), (InputClass("x", (1,), "activation", 1),))
    frontier: list[tuple[Node, ...]] = [()]
    counts, complete = [1], []
    executor.start()
    try:
        for _ in range(max_ops):
            jobs = chunks(len(frontier), executor.workers, 64, per_worker=4)
            seen: dict[frozenset, tuple[Node, ...]] = {}
            for grow, done in executor.map(_work, Inputs(settings, 1, (problem, frontier, target_fp)), jobs):
                for c in grow:
                    seen.setdefault(_key(problem, c), c)
                complete += [(c, ok) for c, ok in done]
            frontier = list(seen.values())
            counts.append(len(frontier))
    finally:
        executor.stop()
    unique: dict[frozenset, tuple[tuple[Node, ...], bool]] = {}
    for c, ok in complete:
        unique.setdefault(_key(problem, c), (c, ok))
    dst = parse_graph(target_text)
    rules = [
        (target_fp, normalised(Rule(parse_graph(graph_text(problem, c)), dst, name=f"{target.name} spelled out")))
        for c, ok in unique.values()
        if ok
    ]
    return Found(target, counts, [graph_text(problem, c) for c, _ in unique.values()], rules)


def _key(problem: Problem, nodes: tuple[Node, ...]) -> frozenset:
    values = problem.values(nodes)
    return frozenset(v.key for v in values[len(problem.leaves) :])


def graph_text(problem: Problem, nodes: tuple[Node, ...]) -> str:
    """The graph ``nodes`` spell, in the rule format: the target's inputs, the constants it reads (weights with
    their data), its nodes; the last node is the output."""
    values = problem.values(nodes)
    read = {a for _, args in nodes for a in args}
    t = problem.target
    heads = [t.input_text(name) for name, _, _ in t.inputs]
    heads += [
        f"%{v.key}: float32[{','.join(map(str, v.shape))}] = {_data(v)}"
        for i, v in enumerate(problem.leaves)
        if v.constant is not None and i in read
    ]
    body = []
    n = len(problem.leaves)
    for k, (m, args) in enumerate(nodes):
        move, out = problem.moves[m], values[n + k]
        name = "y" if k == len(nodes) - 1 else f"t{k}"
        attrs = " {" + ", ".join(f"{a}={list(v) if isinstance(v, tuple) else v}" for a, v in move.attrs) + "}"
        refs = ", ".join(f"%{_name(problem, values, a, n)}" for a in args)
        shape = ",".join(map(str, out.shape))
        body.append(f"  %{name} = {move.op}({refs}){attrs if move.attrs else ''} : float32[{shape}]")
    return f"graph({', '.join(heads)}):\n" + "\n".join(body) + "\n  return %y"


def _name(problem: Problem, values: list[Value], a: int, n: int) -> str:
    return values[a].key if a < n else f"t{a - n}"


def _data(v: Value) -> str:
    """A pool constant's data in the rule format: a number, or one in brackets per axis of size 1."""
    assert v.constant is not None
    return "[" * len(v.shape) + _number(v.constant) + "]" * len(v.shape)


def _number(v: float) -> str:
    return repr(float(np.float32(v))) if math.isfinite(v) else "0.0"


def resolve(targets: dict[str, Target], name: str) -> list[Target]:
    """The target called ``name``, else every target of the op ``name`` (Softmax: on matrices and on attention's
    4-D scores), or a clear error listing the known ones."""
    hits = [targets[name]] if name in targets else [t for t in targets.values() if t.op == name]
    if not hits:
        raise BadInput(f"--target {name!r} is not a target; known: {', '.join(sorted(targets))}")
    return hits
