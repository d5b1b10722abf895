"""The IR's text form: one line per node, FX-style; ``parse_graph(format_graph(g)) == g`` for catalogue graphs
whose weights are symbolic or small enough to print inline."""

from __future__ import annotations

import json
import re

import numpy as np

from taso.ir.graph import Graph, IRError, Node, lint
from taso.ir.types import AttrValue, Dim, TensorType, make_attrs, quote_name
from taso.ir.weights import WeightData

_INLINE_LIMIT = 16


def _ref(name: str) -> str:
    return "%" + quote_name(name) if name else "_"


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
