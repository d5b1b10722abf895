"""A substitution rule is data: two graphs over the same inputs whose outputs correspond by position.

``src.outputs[i]`` and ``dst.outputs[i]`` are claimed equal for every value of the shared inputs (activations
and weights alike, named the same in both graphs). ``conditions`` are side conditions the claim needs, as text
the verifier and matcher both read. A rule's ``status`` says how far it got: ``candidate`` (fingerprints
agree), then ``proved``, ``refuted`` or ``unknown`` (see `taso.store`); only proved rules are ever applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from taso.ir import Graph, IRError, format_graph, parse_graph

STATUSES = ("candidate", "proved", "refuted", "unknown")


@dataclass(frozen=True)
class Rule:
    src: Graph
    dst: Graph
    name: str = ""
    conditions: tuple[str, ...] = ()
    status: str = "candidate"
    detail: dict = field(default_factory=dict, compare=False, hash=False)
    """Verdict evidence: axioms used, a counterexample, or why it is unknown."""
    id: int | None = field(default=None, compare=False, hash=False)

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

    @property
    def ops(self) -> list[str]:
        return sorted({n.op for n in (*self.src.nodes, *self.dst.nodes)})

    def __str__(self) -> str:
        return f"rule {self.name or '?'} [{self.status}]\n{format_graph(self.src)}\n=>\n{format_graph(self.dst)}"

    def to_row(self) -> dict:
        return {
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
        )
