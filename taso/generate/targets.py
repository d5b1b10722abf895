"""Targets of target-directed generation (`taso.generate.target`), read from a TOML file (`specs/targets.toml`):
each names a catalogue op, an example of its inputs and attributes, and the expression that defines it, in
Python's syntax over the input names: ``+ - * / **``, numbers, ``recip(v)``, ``sum(v, axis) mean(v, axis)`` (a
reduction kept as size 1) and the functions the catalogue's op meanings name (`OpDef.meaning`: Erf's ``erf(a)``
makes ``erf`` one; sqrt, exp, tanh, sigmoid likewise). Any catalogue op is a target by such an entry alone; the
expression is parsed (`ast`), never run. The same reader gives each op's meaning its term (`read`)."""

from __future__ import annotations

import ast
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from taso import ops
from taso.errors import BadInput
from taso.generate import abstract as ab
from taso.ops import numbers

SHIPPED = Path(__file__).resolve().parents[2] / "specs" / "targets.toml"
"""The shipped targets (`subst generate --target OP` reads them unless --targets names another file)."""

Shape = tuple[int, ...]
_BUILT_IN = frozenset({"recip", "sum", "mean"})


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


def read(
    where: str, expr: str, leaves: Mapping[str, ab.Term], shape: Sequence[int], axis: int | None = None
) -> ab.Term:
    """``expr``'s normal form over ``leaves`` (name -> term); a reduction's axis counts in ``shape`` (a mean is a
    sum times 1/size), and the name ``axis`` stands for ``axis`` (an op meaning's). BadInput naming ``where``
    for anything outside the language."""
    return _Reader(where, expr, leaves, tuple(shape), axis).term(_parsed(expr))


@dataclass(frozen=True)
class Target:
    name: str
    op: str
    attrs: tuple[tuple[str, object], ...]
    inputs: tuple[tuple[str, Shape, str], ...]
    """(name, shape, 'activation' or 'weight') in the op's input order."""
    expr: str
    max_ops: int

    def expression(self) -> ab.Term:
        """The defining expression's normal form."""
        leaves = {n: ab.leaf(n) for n, _, _ in self.inputs}
        return read(f"target {self.name!r}", self.expr, leaves, self.inputs[0][1])

    def axes(self) -> list[int]:
        """The axes the expression reduces along."""
        return sorted({int(p[2][0]) for p in ab.pieces(self.expression()) if p[0] == "f" and p[2]})

    def numbers(self) -> list[float]:
        """The expression's numbers, in order of first appearance."""
        out: list[float] = []
        for n in ast.walk(_parsed(self.expr)):
            if isinstance(n, ast.Constant) and float(n.value) not in out:
                out.append(float(n.value))
        return out

    def pool_constants(self) -> list[tuple[str, float]]:
        """The generator's constants: each number of the expression, its reciprocal (a division by it) and 2 (a
        square written as Pow), each once, named ``c0``, ``c1``, ..., as the numbers `taso.ops.numbers` reads
        their float32 roundings as (the reciprocal of 1.4142135 is 1/sqrt 2, whose float32 is 0.70710677)."""
        values: list[float] = []
        for v in [*self.numbers(), 2.0]:
            n = numbers.read(float(np.float32(v)))
            for w in (n.value, n.inverse().value if v else None):
                if w is not None and all(ab.const(w) != ab.const(u) for u in values):
                    values.append(w)
        return [(f"c{i}", v) for i, v in enumerate(values)]

    def input_text(self, name: str) -> str:
        shape, kind = next((s, k) for n, s, k in self.inputs if n == name)
        return f"%{name}: float32[{','.join(map(str, shape))}]" + (" weight" if kind == "weight" else "")

    def graph_text(self) -> str:
        """The target op alone, in the rule format, its output shape from the catalogue's numpy rule."""
        xs = [np.ones(s, np.float32) for _, s, _ in self.inputs]
        shape = np.shape(ops.OPS[self.op].run(xs, dict(self.attrs))[0])
        attrs = ", ".join(f"{k}={json.dumps(list(v) if isinstance(v, tuple) else v)}" for k, v in self.attrs)
        head = ", ".join(self.input_text(n) for n, _, _ in self.inputs)
        args = ", ".join(f"%{n}" for n, _, _ in self.inputs)
        node = f"%y = {self.op}({args})" + (f" {{{attrs}}}" if attrs else "")
        return f"graph({head}):\n  {node} : float32[{','.join(map(str, shape))}]\n  return %y"


class _Reader:
    """An expression's syntax tree as a normal-form term; anything outside the small language is BadInput."""

    def __init__(self, where: str, expr: str, leaves: Mapping[str, ab.Term], shape: Shape, axis: int | None) -> None:
        self.where, self.expr, self.leaves, self.shape, self.axis = where, expr, leaves, shape, axis

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
        if f in ("sum", "mean") and len(args) in (1, 2):
            rank = len(self.shape)
            axis = self.axis if len(args) == 2 and isinstance(args[1], ast.Name) and args[1].id == "axis" else None
            if axis is None:
                axis = args[1].value if len(args) == 2 and isinstance(args[1], ast.Constant) else -1
            if not isinstance(axis, int) or not -rank <= axis < rank:
                raise self.fail(f"the axis of {f} must be an integer axis of a rank-{rank} input")
            total = ab.fn("sum", self.term(args[0]), axis % rank)
            return total if f == "sum" else ab.mul(total, ab.const(1 / self.shape[axis]))
        raise self.fail(f"{f}() with {len(args)} argument(s) is not a known function")


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
        or set(e) - {"op", "attrs", "inputs", "expr", "max_ops"}
        or not {"op", "inputs", "expr"} <= set(e)
    ):
        raise BadInput(f"{where}: give op, inputs, expr and optionally attrs and max_ops")
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
    return Target(name, e["op"], tuple(sorted(attrs.items())), tuple(inputs), str(e["expr"]), max_ops)
