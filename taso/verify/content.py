"""The content of a spec's parts as text, for digests that change exactly when what a part says changes.

A z3 term is written out from its syntax tree (function names, sorts, bound variables, patterns), not by z3's
printer, whose layout may change between versions. A Python function (a lowering, a symbol's semantics) is
written out from its syntax tree with docstrings, annotations and positions left out, followed by what it
reads from its module (helpers it calls, constants, closure cells), so a comment, a blank line, an import line
or a moved definition leave it as it was, and an edited body or constant changes it. A mapping it reads only by
constant keys (``OPS["Eye"]``, the op registry) counts by those entries alone: a catalogue entry for a new op
leaves every other function's digest, and so every shipped proof, as it was. Functions outside the
specs (the verifier's helpers) are named only: the verifier's own version covers them.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import types
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

import z3

SPEC_MODULES = "subst_specs."
"""The prefix of the module names `taso.verify.spec.load_specs` gives spec files."""
CATALOGUE_MODULES = "taso.ops."
"""The operator catalogue's modules: their code is digested by content too (`entry`)."""
_SKIPPED = frozenset({"ctx", "kind", "type_comment", "annotation", "returns", "lineno", "col_offset"})
"""Syntax-tree fields that say nothing of what code computes."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def term(e: z3.AstRef | bool) -> str:
    """``e`` written out from its syntax tree."""
    if isinstance(e, bool):
        return str(e)
    memo: dict[int, str] = {}

    def walk(x: z3.AstRef) -> str:
        key = x.get_id()
        if key in memo:
            return memo[key]
        if z3.is_quantifier(x):
            kind = "forall" if x.is_forall() else "exists" if x.is_exists() else "lambda"
            bound = " ".join(f"{x.var_name(i)}:{x.var_sort(i).name()}" for i in range(x.num_vars()))
            patterns = " ".join(
                "{" + " ".join(walk(c) for c in x.pattern(i).children()) + "}" for i in range(x.num_patterns())
            )
            out = f"({kind} [{bound}] {patterns} {walk(x.body())})"
        elif z3.is_var(x):
            out = f"#{z3.get_var_index(x)}"
        elif z3.is_int_value(x) or z3.is_rational_value(x):
            out = x.as_string()
        else:
            decl = x.decl()
            out = f"({decl.name()}:{decl.kind()}:{x.sort().name()} {' '.join(walk(c) for c in x.children())})"
        memo[key] = out
        return out

    return walk(e)


def function(fn: Callable) -> str:
    """``fn`` written out from its syntax tree, with what it reads from its module (see the module docstring)."""
    return _function(fn, frozenset())


def _function(fn: Callable, seen: frozenset[int]) -> str:
    if not isinstance(fn, types.FunctionType):
        return _value(fn, seen)
    if id(fn) in seen:
        return f"<recursion {fn.__qualname__}>"
    seen |= {id(fn)}
    node = _node(fn)
    if node is None:  # no source to read (made by exec): its bytecode, which only this Python reads the same
        return f"<code {fn.__code__.co_code.hex()} {fn.__code__.co_consts!r} {fn.__code__.co_names}>"
    whole, entries = _reads(node)
    reads = [f"{k}={_function(fn.__globals__[k], seen)}" for k in sorted(whole) if k in fn.__globals__]
    reads += [_entry(k, key, fn.__globals__[k], seen) for k, key in sorted(entries, key=repr) if k in fn.__globals__]
    cells = zip(fn.__code__.co_freevars, fn.__closure__ or ())
    reads += [f"{k}={_function(c.cell_contents, seen)}" for k, c in cells]
    defaults = [_value(d, seen) for d in (fn.__defaults__ or ())]
    return f"{_tree(node)} reads [{'; '.join(reads)}] defaults {defaults}"


def _reads(node: ast.AST) -> tuple[set[str], set[tuple[str, object]]]:
    """The names ``node`` reads whole, and the (name, key) entries it reads only by a constant subscript
    (``OPS["Eye"]``): a registry read entry by entry is digested only as far as those entries, so an entry added
    for another op leaves the digest as it was."""
    subscripted = {
        id(n.value): n.slice.value
        for n in ast.walk(node)
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and isinstance(n.slice, ast.Constant)
    }
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
    whole = {n.id for n in names if id(n) not in subscripted}
    entries = {(n.id, subscripted[id(n)]) for n in names if id(n) in subscripted and n.id not in whole}
    return whole, entries


def _entry(name: str, key: object, registry: object, seen: frozenset[int]) -> str:
    """One entry of a mapping a function reads by a constant key, or the lack of it."""
    if not isinstance(registry, Mapping):  # a constant index into a sequence or a string: read whole
        return f"{name}={_value(registry, seen)}"
    value = _value(registry[key], seen) if key in registry else "<missing>"
    return f"{name}[{key!r}]={value}"


def entry(op: object) -> str:
    """A catalogue entry (`taso.ops.OpDef`) by its content: its facts, and its rules' code as `function` writes
    it, following the catalogue's helpers. A proof binds the entries of the ops its rule uses this way
    (`taso.rules.provenance.bound`), so an entry added for another op leaves it as it was."""
    return _value(op, frozenset())


def _value(v: object, seen: frozenset[int]) -> str:
    """A value a function reads: spec and catalogue code by its content, plain data and catalogue entries by
    their value, anything else by name."""
    if isinstance(v, types.FunctionType) and v.__module__.startswith((SPEC_MODULES, CATALOGUE_MODULES)):
        return _function(v, seen)
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and type(v).__module__.startswith(CATALOGUE_MODULES):
        fields = (f.name for f in dataclasses.fields(v) if f.name != "doc")
        return f"{type(v).__qualname__}({', '.join(f'{k}={_value(getattr(v, k), seen)}' for k in fields)})"
    if isinstance(v, types.FunctionType | type | types.BuiltinFunctionType):
        return f"<{v.__module__}.{v.__qualname__}>"
    if isinstance(v, types.ModuleType):
        return f"<module {v.__name__}>"
    if v is None or isinstance(v, bool | int | float | str | bytes):
        return repr(v)
    if isinstance(v, tuple | list):
        return f"{type(v).__name__}({', '.join(_value(x, seen) for x in v)})"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_value(k, seen)}: {_value(x, seen)}" for k, x in sorted(v.items(), key=str)) + "}"
    if isinstance(v, set | frozenset):
        return "{" + ", ".join(sorted(_value(x, seen) for x in v)) + "}"
    return f"<{type(v).__module__}.{type(v).__qualname__}>"


def _node(fn: types.FunctionType) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    """The syntax-tree node that defined ``fn``: the def of its name at its first line, or the lambda whose
    span holds its code's positions (several lambdas may share a line)."""
    code = fn.__code__
    try:
        tree = _parsed(inspect.getsourcefile(fn) or "")
    except (OSError, TypeError, SyntaxError):
        return None
    if code.co_name != "<lambda>":
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == code.co_name:
                first = min([n.lineno, *(d.lineno for d in n.decorator_list)])
                if code.co_firstlineno in (first, n.lineno):
                    return n
        return None
    # instructions that stand for no source (the function's entry and return) have an empty span
    at = [
        (line, col) for line, _, col, end in code.co_positions() if line is not None and col is not None and end != col
    ]
    holding = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Lambda)
        and n.lineno == code.co_firstlineno
        and n.end_lineno is not None
        and n.end_col_offset is not None
        and all((n.lineno, n.col_offset) <= p <= (n.end_lineno, n.end_col_offset) for p in at)
    ]
    return min(holding, key=lambda n: (n.end_lineno, n.end_col_offset), default=None)  # type: ignore[arg-type, return-value]


def _parsed(path: str) -> ast.Module:
    return _parse(Path(path).read_text())


@cache
def _parse(source: str) -> ast.Module:
    """Keyed by the text, not the path: a spec edited and loaded again in one process is read anew."""
    return ast.parse(source)


def _tree(node: object) -> str:
    """A syntax tree as text: node types and fields, without positions, docstrings or annotations."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if name in _SKIPPED or value is None or value == []:
                continue
            if name == "body" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                value = _without_docstring(value)
            if name == "name" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue  # a renamed function computes the same
            fields.append(f"{name}={_tree(value)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_tree(x) for x in node) + "]"
    return repr(node)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body
