"""Targets of target-directed generation (`taso.generate.target`), read from a TOML file (`specs/targets.toml`):
each names a catalogue op, an example of its inputs and attributes, and the expression that defines it, in
Python's syntax over the input names: ``+ - * / **``, numbers, ``recip(v)``, ``sum(v, axis) mean(v, axis)`` (a
reduction kept as size 1), ``matmul(u, v)``, ``transpose(v, (0, 2, 1, 3))`` and the functions the catalogue's op
meanings name (`OpDef.meaning`: Erf's ``erf(a)`` makes ``erf`` one; sqrt, exp, tanh, sigmoid likewise; Softmax's
``softmax(a, axis)`` makes ``softmax(v, 3)`` one with a parameter). Any catalogue op is a target by such an entry
alone; the expression is parsed (`ast`), never run. The same reader gives each op's meaning its term (`read`).

A target's right side is its op alone, or, where the fused op needs its inputs in another layout, the small graph
``rhs`` (rule format) that the op sits in: attention's query merged to (B, S, N*H) by a Reshape, its key's heads
moved, its output split back (`specs/targets.toml`). The graph reads the target's inputs, in order, then its own
constants."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from taso import ops
from taso.errors import BadInput
from taso.generate import abstract as ab
from taso.ir import IRError, parse_graph
from taso.ops import numbers

SHIPPED = Path(__file__).resolve().parents[2] / "specs" / "targets.toml"
"""The shipped targets (`subst generate --target OP` reads them unless --targets names another file)."""

Shape = tuple[int, ...]
_BUILT_IN = frozenset({"recip", "sum", "mean", "matmul", "transpose"})
_WITH_ATTRIBUTE = frozenset({"sum", "mean", "transpose"})
"""Built-in functions whose arguments after the first are attributes (an axis, a perm), not numbers."""
ATTRIBUTES = frozenset({"axis", "perm"})
"""The attribute names an op's meaning may read (a reduction's or Softmax's axis, a Transpose's perm)."""


@cache
def _parsed(expr: str) -> ast.expr:
    return ast.parse(expr, mode="eval").body


def variables(expr: str) -> frozenset[str]:
    """The names ``expr`` reads (an op meaning's ``a``, ``b``, ``axis``), functions left out."""
    called = {n.func.id for n in ast.walk(_parsed(expr)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return frozenset(n.id for n in ast.walk(_parsed(expr)) if isinstance(n, ast.Name) and n.id not in called)


@cache
def functions() -> frozenset[str]:
    """The language's functions of one element: ``f`` for each catalogue op whose meaning is ``f(a)``."""
    out = set()
    for d in ops.OPS.values():
        tree = _parsed(d.meaning) if d.meaning else None
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and len(tree.args) == 1:
            out.add(tree.func.id)
    return frozenset(out - _BUILT_IN)


def called(expr: str) -> str | None:
    """The function ``expr`` applies at its root (an op meaning's ``softmax`` or ``sum``), None for an operator."""
    tree = _parsed(expr)
    return tree.func.id if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) else None


@cache
def parametrised() -> frozenset[str]:
    """The language's functions with a parameter: ``f`` for each catalogue op whose meaning is ``f(a, attr)``
    (Softmax's ``softmax(a, axis)``), opaque to the normal form like the functions of one element."""
    out = set()
    for d in ops.OPS.values():
        tree = _parsed(d.meaning) if d.meaning else None
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and len(tree.args) == 2:
            if isinstance(tree.args[1], ast.Name) and tree.args[1].id in ATTRIBUTES:
                out.add(tree.func.id)
    return frozenset(out - _BUILT_IN)


def read(
    where: str,
    expr: str,
    leaves: Mapping[str, ab.Term],
    shape: Sequence[int],
    attrs: Mapping[str, object] | None = None,
) -> ab.Term:
    """``expr``'s normal form over ``leaves`` (name -> term); an axis counts in ``shape`` (a mean is a sum times
    1/size), and the names ``axis`` and ``perm`` stand for those of ``attrs`` (an op meaning's). BadInput naming
    ``where`` for anything outside the language."""
    return _Reader(where, expr, leaves, tuple(shape), dict(attrs or {})).term(_parsed(expr))


@dataclass(frozen=True)
class Target:
    name: str
    op: str
    attrs: tuple[tuple[str, object], ...]
    inputs: tuple[tuple[str, Shape, str], ...]
    """(name, shape, 'activation' or 'weight') in the op's input order."""
    expr: str
    max_ops: int
    rhs: str = ""
    """The right side where it is more than the op alone (attention's Reshape -> MultiHeadAttention -> Reshape)."""
    constant_shape: Shape = ()
    """The pool constants' shape: () a scalar, (1,) as TorchScript writes attention's scale."""
    per_use: bool = False
    """One pool constant per use of a number in the expression (timm's scale: a (1,) weight for Q, one for K)."""

    def expression(self) -> ab.Term:
        """The defining expression's normal form."""
        leaves = {n: ab.leaf(n) for n, _, _ in self.inputs}
        return read(f"target {self.name!r}", self.expr, leaves, self.inputs[0][1])

    def axes(self) -> list[int]:
        """The axes the expression reduces along."""
        return sorted({int(p[2][0]) for p in ab.pieces(self.expression()) if p[0] == "f" and p[1] == "sum"})

    def params(self, function: str) -> list[object]:
        """The parameters the expression applies ``function`` with (Softmax's axes, Transpose's perms)."""
        return sorted({p[2][0] for p in ab.pieces(self.expression()) if p[0] == "f" and p[1] == function}, key=repr)

    def numbers(self) -> list[float]:
        """The expression's numbers, in order of first appearance; an axis or a perm is an attribute, not one."""
        return list(dict.fromkeys(self.uses()))

    def uses(self) -> list[float]:
        """The expression's numbers, once per use, in order."""
        tree = _parsed(self.expr)
        attrs = {
            id(a)
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in _WITH_ATTRIBUTE | parametrised()
            for arg in n.args[1:]
            for a in ast.walk(arg)
        }
        return [float(n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in attrs]

    def pool_constants(self) -> list[tuple[str, float]]:
        """The generator's constants: each number of the expression, its reciprocal (a division by it) and 2 (a
        square written as Pow), each once, named ``c0``, ``c1``, ..., as the numbers `taso.ops.numbers` reads
        their float32 roundings as (the reciprocal of 1.4142135 is 1/sqrt 2, whose float32 is 0.70710677); with
        ``per_use``, a number the expression uses twice is there twice (an exporter's weight per operand)."""
        values: list[float] = []
        for v in [*self.numbers(), 2.0]:
            n = numbers.read(float(np.float32(v)))
            for w in (n.value, n.inverse().value if v else None):
                if w is not None and all(ab.const(w) != ab.const(u) for u in values):
                    values.append(w)
        if self.per_use:
            uses = self.uses()
            values += [numbers.read(float(np.float32(v))).value for i, v in enumerate(uses) if v in uses[:i]]
        return [(f"c{i}", v) for i, v in enumerate(values)]

    def input_text(self, name: str) -> str:
        shape, kind = next((s, k) for n, s, k in self.inputs if n == name)
        return f"%{name}: float32[{','.join(map(str, shape))}]" + (" weight" if kind == "weight" else "")

    def graph_text(self) -> str:
        """The right side, in the rule format: ``rhs``, or the op alone, its output shape from the catalogue's numpy
        rule."""
        if self.rhs:
            return self.rhs
        xs = [np.ones(s, np.float32) for _, s, _ in self.inputs]
        shape = np.shape(ops.OPS[self.op].run(xs, dict(self.attrs))[0])
        attrs = ", ".join(f"{k}={json.dumps(list(v) if isinstance(v, tuple) else v)}" for k, v in self.attrs)
        head = ", ".join(self.input_text(n) for n, _, _ in self.inputs)
        args = ", ".join(f"%{n}" for n, _, _ in self.inputs)
        node = f"%y = {self.op}({args})" + (f" {{{attrs}}}" if attrs else "")
        return f"graph({head}):\n  {node} : float32[{','.join(map(str, shape))}]\n  return %y"


class _Reader:
    """An expression's syntax tree as a normal-form term; anything outside the small language is BadInput."""

    def __init__(self, where: str, expr: str, leaves: Mapping[str, ab.Term], shape: Shape, attrs: dict) -> None:
        self.where, self.expr, self.leaves, self.shape, self.attrs = where, expr, leaves, shape, attrs

    def fail(self, what: str) -> BadInput:
        return BadInput(f"{self.where}: {what} in its expression {self.expr!r}")

    def term(self, n: ast.expr) -> ab.Term:
        if isinstance(n, ast.Name) and n.id in self.leaves:
            return self.leaves[n.id]
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            return ab.const(n.value)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return ab.mul(self.term(n.operand), ab.const(-1.0))
        if isinstance(n, ast.BinOp):
            a, b = self.term(n.left), self.term(n.right)
            if isinstance(n.op, ast.Add):
                return ab.add(a, b)
            if isinstance(n.op, ast.Sub):
                return ab.add(a, ab.mul(b, ab.const(-1.0)))
            if isinstance(n.op, ast.Mult):
                return ab.mul(a, b)
            if isinstance(n.op, ast.Div):
                return ab.mul(a, ab.inv(b))
            if isinstance(n.op, ast.Pow) and b[0] == "c":
                return ab.power(a, b[1])
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and not n.keywords:
            return self.call(n.func.id, n.args)
        raise self.fail(f"{ast.unparse(n)!r} is not understood")

    def call(self, f: str, args: list[ast.expr]) -> ab.Term:
        if f in functions() and len(args) == 1:
            return ab.fn(f, self.term(args[0]))
        if f == "recip" and len(args) == 1:
            return ab.inv(self.term(args[0]))
        if f == "matmul" and len(args) == 2:
            return ab.matmul(self.term(args[0]), self.term(args[1]))
        if f == "transpose" and len(args) == 2:
            perm = self.param(args[1], "perm")
            if not isinstance(perm, tuple) or sorted(perm) != list(range(len(perm))):
                raise self.fail("transpose's perm must be a permutation, e.g. (0, 2, 1, 3)")
            return ab.transpose(self.term(args[0]), perm)
        if (f in ("sum", "mean") or f in parametrised()) and len(args) in (1, 2):
            rank = len(self.shape)
            axis = self.param(args[1], "axis") if len(args) == 2 else -1
            if not isinstance(axis, int) or not -rank <= axis < rank:
                raise self.fail(f"the axis of {f} must be an integer axis of a rank-{rank} input")
            if f in parametrised():
                return ab.fn(f, self.term(args[0]), axis % rank)
            total = ab.fn("sum", self.term(args[0]), axis % rank)
            return total if f == "sum" else ab.mul(total, ab.const(1 / self.shape[axis]))
        raise self.fail(f"{f}() with {len(args)} argument(s) is not a known function")

    def param(self, n: ast.expr, name: str) -> object:
        """An attribute argument: the op's own (the name ``axis`` or ``perm`` in a meaning), or a literal integer
        or tuple of them."""
        if isinstance(n, ast.Name) and n.id == name and name in self.attrs:
            return self.attrs[name]
        try:
            value = ast.literal_eval(n)
        except (ValueError, TypeError, SyntaxError):
            raise self.fail(f"{ast.unparse(n)!r} is not a {name}") from None
        return tuple(value) if isinstance(value, (tuple, list)) else value


def load_targets(path: Path = SHIPPED) -> dict[str, Target]:
    """The targets of a TOML file, by name, each checked: a catalogue op, inputs with shapes, a readable
    expression."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise BadInput(f"{path}: cannot read targets ({e.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not valid TOML ({e})") from None
    out: dict[str, Target] = {}
    for name, entry in data.items():
        out[name] = t = _target(path, name, entry)
        t.expression()
    return out


def _target(path: Path, name: str, e: object) -> Target:
    where = f"{path}: target {name!r}"
    if (
        not isinstance(e, dict)
        or set(e) - {"op", "attrs", "inputs", "expr", "max_ops", "rhs", "constant_shape", "constant_per_use"}
        or not {"op", "inputs", "expr"} <= set(e)
    ):
        raise BadInput(
            f"{where}: give op, inputs, expr and optionally attrs, max_ops, rhs, constant_shape and constant_per_use"
        )
    if e["op"] not in ops.OPS:
        raise BadInput(f"{where}: {e['op']!r} is not a catalogue op")
    inputs = []
    for i in e["inputs"] if isinstance(e["inputs"], list) else [None]:
        if not isinstance(i, dict) or not isinstance(i.get("name"), str) or not isinstance(i.get("shape"), list):
            raise BadInput(f"{where}: each input is {{name, shape, kind}}")
        if not all(isinstance(d, int) and d > 0 for d in i["shape"]) or i.get("kind", "activation") not in (
            "activation",
            "weight",
        ):
            raise BadInput(f"{where}: input {i['name']!r} needs positive sizes and kind activation or weight")
        inputs.append((i["name"], tuple(i["shape"]), i.get("kind", "activation")))
    attrs = e.get("attrs", {})
    max_ops = e.get("max_ops", 6)
    if not isinstance(attrs, dict) or not isinstance(max_ops, int) or not 1 <= max_ops <= 12:
        raise BadInput(f"{where}: attrs is a table, max_ops an integer 1..12")
    shape, per_use = e.get("constant_shape", []), e.get("constant_per_use", False)
    if not isinstance(shape, list) or len(shape) > 4 or any(d != 1 for d in shape) or not isinstance(per_use, bool):
        raise BadInput(f"{where}: constant_shape is a list of 1s (one number), constant_per_use true or false")
    target = Target(name, e["op"], tuple(sorted(attrs.items())), tuple(inputs), str(e["expr"]), max_ops)
    return _with_rhs(where, dataclasses.replace(target, constant_shape=tuple(shape), per_use=per_use), e.get("rhs", ""))


def _with_rhs(where: str, target: Target, rhs: object) -> Target:
    """``target`` with its right side graph, checked: it parses, reads the target's inputs first, in order, and
    computes with the target's op."""
    if rhs == "":
        return target
    if not isinstance(rhs, str):
        raise BadInput(f"{where}: rhs is a graph in the rule format")
    try:
        g = parse_graph(rhs)
    except IRError as e:
        raise BadInput(f"{where}: rhs is not a graph ({e})") from None
    heads = [(n, s) for n, s, _ in target.inputs]
    if [(v, g.types[v].shape) for v in (*g.inputs, *g.weights)][: len(heads)] != heads:
        raise BadInput(f"{where}: rhs must read the inputs {', '.join(n for n, _ in heads)} first, of their shapes")
    if target.op not in {n.op for n in g.nodes}:
        raise BadInput(f"{where}: rhs does not compute with {target.op}")
    own = [v for v in (*g.inputs, *g.weights)[len(heads) :] if re.fullmatch(r"[tc]\d+|y", v)]
    if own:
        raise BadInput(f"{where}: rhs names {own[0]!r} as the spelled-out side names its values; rename it")
    return dataclasses.replace(target, rhs=rhs)
