"""A substitution rule is data: two graphs over the same inputs whose outputs correspond by position.

``src.outputs[i]`` and ``dst.outputs[i]`` are claimed equal for every value of the shared inputs (activations
and weights alike, named the same in both graphs). ``conditions`` are side conditions the claim needs, as text
the verifier and matcher both read. A rule's ``status`` says how far it got: ``candidate`` (fingerprints
agree), then ``proved``, ``refuted`` or ``unknown`` (see `taso.store`); only proved rules are ever applied.

Attributes are fixed unless a condition frees them: ``free: strides pads`` makes every ``strides`` and
``pads`` of the source a variable, the values written in the graphs being one example (the one the
pre-check runs), and equal example values one variable. A target value equal to a source example is that
variable; one that no source node has is a literal (a grouped conv made plain writes ``group=1`` in the
target under ``free: group``). The verifier then proves the rule for every value of the variables
(`taso.lowering`), and matching binds them to the model's values (`taso.match`).

The condition ``always`` marks a rule `taso.optimize` applies wherever it matches before the search: one the
cost model prices at nothing because onnxruntime makes it itself at load (a BatchNorm folded into its Conv),
and that opens matches for others, or one never costlier that opens a fusion onnxruntime makes at load over
more nodes than one cost unit (a product by a reciprocal made the quotient its RMSNorm fusion matches).
Searching it would only spend the budget on rewrites whose worth the unit costs cannot show.

A rule's ``id`` (`rule_id`) is a digest of what it says, so a report's count names one rule of the store
(`subst rules show ID`) where the generator's names, op censuses, each covered hundreds; its `Rule.title`
states the algebra (`algebra`), derived from the graphs, unless a name was written by hand.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import cached_property

from taso.ir import AttrValue, Graph, IRError, Kind, Node, TensorType, format_graph, make_attrs, parse_graph

STATUSES = ("candidate", "proved", "refuted", "unknown")
OUTPUT = "out:"
"""Prefix naming a rule's output by position in a `Size` (the names differ between the sides, positions not)."""


@dataclass(frozen=True)
class Size:
    """One dimension the matcher binds: of a rule input or weight by name, or of output K as ``out:K``."""

    value: str
    axis: int


@dataclass(frozen=True)
class SameSize:
    """Two bound dimensions are equal."""

    a: Size
    b: Size


@dataclass(frozen=True)
class SizeIs:
    """A bound dimension has this size."""

    a: Size
    n: int


@dataclass(frozen=True)
class AttrIs:
    """A free attribute binds its example value (the proof needed that value)."""

    attr: str
    example: AttrValue


Condition = SameSize | SizeIs | AttrIs
"""What a proof over symbolic sizes and attributes needed of the example (`taso.lowering`); the rule is applied
only where each holds (`taso.rewrite`)."""


def condition_to_json(c: Condition) -> list:
    if isinstance(c, SameSize):
        return ["same", c.a.value, c.a.axis, c.b.value, c.b.axis]
    if isinstance(c, SizeIs):
        return ["size", c.a.value, c.a.axis, c.n]
    return ["attr", c.attr, list(c.example) if isinstance(c.example, tuple) else c.example]


def condition_from_json(j: list) -> Condition:
    if j[0] == "same":
        return SameSize(Size(j[1], j[2]), Size(j[3], j[4]))
    if j[0] == "size":
        return SizeIs(Size(j[1], j[2]), j[3])
    if j[0] == "attr":
        return AttrIs(j[1], tuple(j[2]) if isinstance(j[2], list) else j[2])
    raise IRError(f"unknown proof condition {j!r}")


FREE = "free:"
"""Prefix of the condition that names a rule's free attributes."""
ALWAYS = "always"
"""The condition of a rule applied everywhere before the search."""
REVERSE = "~reverse"
"""Suffix of the name and id of a rule read backwards (`taso.search.both_directions`)."""


@dataclass(frozen=True)
class Rule:
    src: Graph
    dst: Graph
    name: str = ""
    conditions: tuple[str, ...] = ()
    status: str = "candidate"
    detail: dict = field(default_factory=dict, compare=False, hash=False)
    """Verdict evidence: axioms used, a counterexample, or why it is unknown."""
    row: int | None = field(default=None, compare=False, hash=False)
    """The rule's row in its store (None for one built in memory): what `taso.verify` writes verdicts to."""
    id: str = field(default="", compare=False, hash=False)
    """What reports and `subst rules show` name the rule by: its `rule_id`, computed when not given (a store
    gives the one it saved). Variants the search makes keep it: a rule `lifted` is the same rule, one read
    backwards is ``ID~reverse`` (`taso.search.both_directions`). `dataclasses.replace` keeps it too: a rule
    made to say something else is built anew, or given ``id=""``."""

    def __post_init__(self) -> None:
        if len(self.src.outputs) != len(self.dst.outputs):
            raise IRError(
                f"rule {self.name!r}: {len(self.src.outputs)} source vs {len(self.dst.outputs)} target outputs"
            )
        for name in set(self.src.inputs) | set(self.src.weights) | set(self.dst.inputs) | set(self.dst.weights):
            a, b = self.src.types.get(name), self.dst.types.get(name)
            if a is not None and b is not None and a != b:
                raise IRError(f"rule {self.name!r}: input {name!r} typed {a} in source, {b} in target")
        if self.status not in STATUSES:
            raise IRError(f"rule {self.name!r}: unknown status {self.status!r}")
        if not self.id:
            object.__setattr__(self, "id", rule_id(self))

    @cached_property
    def free_attrs(self) -> frozenset[str]:
        """Attribute names that are variables in this rule (its ``free:`` condition); cached, since matching
        asks at every step."""
        return frozenset(name for c in self.conditions if c.startswith(FREE) for name in c.removeprefix(FREE).split())

    @cached_property
    def free_examples(self) -> frozenset[tuple[str, AttrValue]]:
        """(free attribute, example value) pairs of the source: the rule's variables. A target attribute is
        one of them when its pair is here, else a literal."""
        return frozenset((k, v) for n in self.src.nodes for k, v in n.attrs if k in self.free_attrs)

    @cached_property
    def covered(self) -> tuple[Condition, ...] | None:
        """The conditions the rule's proof recorded (`taso.lowering`); None for a rule the verifier has not
        proved (one built in memory), which `taso.optimize` never applies."""
        if self.detail.get("sizes") != "symbolic":
            return None
        return tuple(condition_from_json(j) for j in self.detail.get("conditions", []))

    @cached_property
    def reversible(self) -> bool:
        """Whether the proof covers the rule read backwards (`taso.lowering.Lowered.reversible`)."""
        return bool(self.detail.get("reversible", True))

    @cached_property
    def always(self) -> bool:
        return ALWAYS in self.conditions

    @cached_property
    def shrinks(self) -> bool:
        """Whether the target runs fewer ops on activations than the source (weight-only ops fold away): the
        rewrites that can repay one that costs (`taso.search`)."""
        return _live_ops(self.dst) < _live_ops(self.src)

    @property
    def title(self) -> str:
        """The rule's name in a report line: the one written by hand, else its `algebra` (the generator's
        name, an op `census`, says less and is shared by hundreds of rules)."""
        return algebra(self) if self.name in ("", census(self.src, self.dst)) else self.name

    @property
    def ops(self) -> list[str]:
        return sorted({n.op for n in (*self.src.nodes, *self.dst.nodes)})

    def __str__(self) -> str:
        return f"rule {self.id} {self.title} [{self.status}]\n{format_graph(self.src)}\n=>\n{format_graph(self.dst)}"

    def to_row(self) -> dict:
        return {
            "rule_id": self.id,
            "name": self.name,
            "src": format_graph(self.src),
            "dst": format_graph(self.dst),
            "conditions": json.dumps(list(self.conditions)),
            "src_ops": len(self.src.nodes),
            "dst_ops": len(self.dst.nodes),
            "ops": " ".join(self.ops),
            "status": self.status,
            "detail": json.dumps(self.detail, sort_keys=True, default=str),
        }

    @classmethod
    def from_row(cls, row: dict) -> Rule:
        return cls(
            parse_graph(row["src"]),
            parse_graph(row["dst"]),
            row.get("name") or "",
            tuple(json.loads(row.get("conditions") or "[]")),
            row.get("status") or "candidate",
            json.loads(row.get("detail") or "{}"),
            row.get("id"),
            row.get("rule_id") or "",
        )


ID_LENGTH = 10
"""Hex digits of a rule id: 40 bits, so ~5,000 rules collide with odds of about 1 in 100,000 (a test checks the
shipped store), and a report line stays short."""


def rule_id(rule: Rule) -> str:
    """A digest of what the rule says: both sides' computation (ops, attributes, types, constants, and which
    input each reads), its free attributes and whether it is ``always``; not its verdict, name or store row.
    Names of intermediate values and the order of independent nodes do not count (`_side`); inputs count by
    their position in the source's signature, so a rule written again with other names keeps its id."""
    return _content(rule).hexdigest()[:ID_LENGTH]


def rule_digest(rule: Rule) -> str:
    """The whole digest of what the rule says (`rule_id` is its first `ID_LENGTH` digits), with every condition
    it is written with: what a proof's record binds (`taso.rules.provenance.bound`), where an id's 40 bits
    could be matched by a forger's search."""
    h = _content(rule)
    h.update(repr(sorted(rule.conditions)).encode())
    return h.hexdigest()


def _content(rule: Rule) -> hashlib._Hash:
    leaves: dict[str, str] = {}
    for g in (rule.src, rule.dst):
        for v in (*g.inputs, *g.weights):
            if v not in leaves:
                data = g.data[v].digest if v in g.data else ""
                leaves[v] = f"v{len(leaves)}:{g.types.get(v)}:{data}"
    text = repr((_side(rule.src, leaves), _side(rule.dst, leaves), sorted(rule.free_attrs), rule.always))
    return hashlib.sha256(text.encode())


def _side(g: Graph, leaves: dict[str, str]) -> tuple[list[str], list[str]]:
    """One side as keys: each node output's is a digest of its node (op, attributes, the keys it reads by
    position, its output types) and its position among the node's outputs; the outputs' keys in order, and
    every node's, sorted (a node no output reads still counts)."""
    keys = dict(leaves)
    for n in g.nodes:
        types = [str(g.types.get(o)) for o in n.outputs]
        node = repr((n.op, n.domain, n.attrs, [keys.get(i, i) for i in n.inputs], types))
        digest = hashlib.sha256(node.encode()).hexdigest()
        keys.update({o: f"{digest}:{k}" for k, o in enumerate(n.outputs) if o})
    return [keys[o] for o in g.outputs], sorted(keys[o] for n in g.nodes for o in n.outputs if o)


def census(src: Graph, dst: Graph) -> str:
    """The name the generator gives a rule: the ops of each side in order."""
    return f"{','.join(n.op for n in src.nodes)} => {','.join(n.op for n in dst.nodes) or 'inputs'}"


def algebra(rule: Rule) -> str:
    """The rule as two expressions, ``Split(MatMul(x0, Concat(w0, w1)), sizes) => MatMul(x0, w0), MatMul(x0,
    w1)``: each output's term over the inputs, attributes left out (`subst rules show` prints them). A node
    whose outputs are all outputs, in order, is written once; another output of a several-output node as
    ``Op(...)[k]``. Derived, never stored: it cannot drift from the graphs."""
    return f"{_expressions(rule.src)} => {_expressions(rule.dst)}"


def _expressions(g: Graph) -> str:
    producers = g.producers

    def call(n: Node) -> str:
        return f"{n.op}({', '.join(term(v) for v in n.inputs if v)})"

    def term(v: str) -> str:
        n = producers.get(v)
        if n is None:
            return v
        return call(n) if len(n.outputs) == 1 else f"{call(n)}[{n.outputs.index(v)}]"

    parts, i = [], 0
    while i < len(g.outputs):
        n = producers.get(g.outputs[i])
        width = len(n.outputs) if n is not None else 1
        if n is not None and width > 1 and g.outputs[i : i + width] == n.outputs:
            parts.append(call(n))
            i += width
        else:
            parts.append(term(g.outputs[i]))
            i += 1
    return ", ".join(parts)


def _live_ops(g: Graph) -> int:
    kinds = g.kinds
    return sum(any(kinds.get(o) is Kind.ACTIVATION for o in n.outputs) for n in g.nodes)


def parse_rules(text: str) -> list[Rule]:
    """Rules written by hand, as blocks of ``rule NAME``, condition lines (``free: ATTR ...``, ``always``),
    the source graph, ``=>`` and the target graph (graph text as `format_graph` writes it); ``#`` starts a
    comment line."""
    rules: list[Rule] = []
    text = _strip_comments(text)
    blocks = ("\n" + text).split("\nrule ")[1:]
    if text.strip() and not blocks:
        raise IRError("no rule in the text (each starts with a line `rule NAME`)")
    for block in blocks:
        head, _, body = block.partition("\n")
        lines = body.split("\n")
        first = next((i for i, line in enumerate(lines) if line.startswith("graph(")), len(lines))
        conditions = tuple(line.strip() for line in lines[:first] if line.strip())
        unknown = [c for c in conditions if c != ALWAYS and not c.startswith(FREE)]
        if unknown:
            raise IRError(
                f"rule {head.strip()!r}: unknown condition {unknown[0]!r} (want `free: ATTR ...` or `always`)"
            )
        sides = "\n".join(lines[first:]).split("\n=>\n")
        if len(sides) != 2:
            raise IRError(f"rule {head.strip()!r}: want a source graph, a line `=>` and a target graph")
        rules.append(Rule(parse_graph(sides[0]), parse_graph(sides[1]), head.strip(), conditions))
    return rules


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


_PLACEHOLDER = 97
"""Size given to lifted leading dims: sizes are free when matching; 97 keeps them out of the rule's dim map."""


def lifted(rule: Rule, extra: int) -> Rule | None:
    """``rule`` with ``extra`` leading (batch) dims on every value derived from its activation inputs, axes
    shifted to match; None unless every op is batch-polymorphic and every activation is 2-D.

    Sound because each side of the lifted rule computes the original rule on every batch slice: a rule proved
    on matrices holds for stacks of them (how a 2-D rule reaches a transformer's [batch, seq, hidden] tensors).
    """
    from taso import ops  # here: rules are data, and only this transform needs shape rules

    polymorphic = ops.having(ops.BATCH_POLYMORPHIC)
    sides = []
    for g in (rule.src, rule.dst):
        if any(n.op not in polymorphic for n in g.nodes) or any(g.types[i].rank != 2 for i in g.inputs):
            return None
        types = dict(g.types)
        live = set(g.inputs)
        for i in g.inputs:
            types[i] = TensorType(types[i].dtype, (_PLACEHOLDER,) * extra + tuple(types[i].shape or ()))
        nodes = []
        for n in g.nodes:
            attrs = n.attr
            if any(v in live for v in n.inputs):
                rank = max(g.types[v].rank or 0 for v in n.inputs if v in live)
                if "axis" in attrs:
                    attrs["axis"] = int(attrs["axis"]) % rank + extra  # type: ignore[operator]
                if "axes" in attrs:  # a reduction's, counted from the end: the hidden axis stays the last
                    attrs["axes"] = tuple(int(a) % rank + extra for a in attrs["axes"])  # type: ignore[union-attr]
                if "perm" in attrs:
                    attrs["perm"] = (*range(extra), *(p + extra for p in attrs["perm"]))  # type: ignore[union-attr]
                live.update(o for o in n.outputs if o)
            consts = [g.data[v].array if v in g.data else None for v in n.inputs]
            try:
                outs = ops.infer(n.op, [types[v] for v in n.inputs], attrs, consts, len(n.outputs))
            except ops.OpError:
                return None
            types.update(zip(n.outputs, outs))
            nodes.append(replace(n, attrs=make_attrs(attrs)))
        sides.append(replace(g, nodes=tuple(nodes), types=types))
        if g is rule.src:
            shifted = live | {f"{OUTPUT}{k}" for k, o in enumerate(g.outputs) if o in live}
    detail = rule.detail
    if rule.covered is not None:  # the proof's conditions name axes of the unlifted values
        moved = [_shift(c, shifted, extra) for c in rule.covered]
        detail = {**detail, "conditions": [condition_to_json(c) for c in moved]}
    return replace(rule, src=sides[0], dst=sides[1], detail=detail)


def _shift(c: Condition, live: set[str], extra: int) -> Condition:
    """``c`` on the lifted rule: axes of values derived from activations move past the ``extra`` batch dims."""

    def at(s: Size) -> Size:
        return Size(s.value, s.axis + extra) if s.value in live else s

    if isinstance(c, SameSize):
        return SameSize(at(c.a), at(c.b))
    if isinstance(c, SizeIs):
        return SizeIs(at(c.a), c.n)
    return c
