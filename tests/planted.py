"""Planted rules, shared by the tests that plant them: a false rule is never proved, and its true version is, so
the false one fails for being false and not because the axioms cannot reach its ops."""

from __future__ import annotations

from taso.ir import parse_graph
from taso.rules import Rule
from taso.verify import Prover, Specs, refute


def rule(src: str, dst: str, name: str = "") -> Rule:
    return Rule(parse_graph(src), parse_graph(dst), name)


ALONE_SECONDS = 30.0
"""What z3 alone is given on a planted rule: with add-assoc and mul-assoc oriented, a LayerNorm over the wrong axis
keeps z3 matching past verify's 120 s safety net before its unit budget is spent (slow instances, few units)."""


def assert_never_proved(planted: Rule, specs: Specs) -> None:
    """The pre-check finds ``planted`` false and refutes it; z3 alone, without the pre-check, proves nothing: it
    runs out of axioms, or of its budget or time where the axioms it is given keep matching (a LayerNorm of a
    scaled input spends it on the scalar axioms)."""
    assert refute(planted) is not None, "the planted rule must be false (the pre-check finds it so)"
    assert Prover(specs).verdict(planted).status == "refuted"
    alone = Prover(specs, precheck=False, timeout=ALONE_SECONDS).verdict(planted)
    reason = alone.detail["reason"]
    assert alone.status == "unknown", alone.detail
    assert any(reason.startswith(r) for r in ("no proof from the axioms", "budget spent", "wall-clock")), alone.detail


def assert_proved(control: Rule, specs: Specs) -> None:
    """A positive control: true by the pre-check and proved by z3 alone."""
    assert refute(control) is None
    v = Prover(specs, precheck=False).verdict(control)
    assert v.status == "proved", v.detail
