"""Issue 47's element-wise ops in the verifier: planted false rules over them (two Gelus taken for one, relu6 for
relu, neg for idempotent, sub commuted, hardswish for swish) are never proved, by z3 alone or with the pre-check,
and true ones (tests/data/elementwise-true.rules) are, so the planted verdicts are not vacuous; false axioms over
them fail `--check-specs`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from taso.ops import OPS
from taso.rules import SPECS_DIR, Rule, parse_rules
from taso.verify import Axiom, Prover, Specs, attr_int, check_axiom, ints, load_specs, refute, run_graph, tensors

DATA = Path(__file__).parent / "data"
FALSE_RULES = {r.name: r for r in parse_rules((DATA / "planted-elementwise.rules").read_text())}
TRUE_RULES = {r.name: r for r in parse_rules((DATA / "elementwise-true.rules").read_text())}


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


def _differ(rule: Rule) -> bool:
    """Whether the rule's sides differ on inputs from -8 to 8 (past relu6's bound, which the pre-check's small
    integers and normal floats do not reach)."""
    shapes = {i: rule.src.types[i].shape for i in (*rule.src.inputs, *rule.src.weights)}
    feeds = {i: np.linspace(-8, 8, int(np.prod(s))).reshape(s) for i, s in shapes.items()}
    feeds = {k: v if k == rule.src.inputs[0] else v[::-1].copy() for k, v in feeds.items()}
    return any(not np.allclose(a, b) for a, b in zip(run_graph(rule.src, feeds), run_graph(rule.dst, feeds)))


@pytest.mark.parametrize("name", sorted(FALSE_RULES))
def test_planted_false_rule_over_the_new_ops_is_never_proved(name: str, specs: Specs) -> None:
    rule = FALSE_RULES[name]
    assert _differ(rule), "the planted rule must be false"
    assert Prover(specs).verdict(rule).status in ("refuted", "unknown")
    alone = Prover(specs, precheck=False).verdict(rule)
    assert alone.status == "unknown", alone.detail


@pytest.mark.parametrize("name", sorted(TRUE_RULES))
def test_true_rule_over_the_new_ops_is_proved(name: str, specs: Specs) -> None:
    rule = TRUE_RULES[name]
    assert refute(rule) is None and not _differ(rule)
    verdict = Prover(specs, precheck=False).verdict(rule)
    assert verdict.status == "proved", verdict.detail


def test_every_unary_elementwise_symbol_moves_through_transpose_concat_and_slice(specs: Specs) -> None:
    """Each unary element-wise symbol has the three axioms of `elementwise_axioms`, except hardswish, which its
    spec defines by hardsigmoid: a spec that forgot them leaves such rules unproved."""
    names = {a.name for a in specs.axioms}
    unary = [n for n, s in specs.symbols.items() if s.arity == 1 and s.op in OPS and OPS[s.op].elementwise]
    missing = [f"{n}-{k}" for n in unary if n != "hardswish" for k in ("transpose", "cat", "slice")]
    assert len(unary) >= 10 and not [m for m in missing if m not in names]


def _false_axioms(f) -> list[Axiom]:  # noqa: ANN001
    x, y = tensors("x y")
    m, n, lo, hi = ints("m n lo hi")
    same = {"x": (m, n), "y": (m, n)}
    bounds = {"lo": tuple(attr_int(v) for v in (-1.0, 0.0, 1.0)), "hi": tuple(attr_int(v) for v in (0.5, 2.0, 6.0))}
    return [
        Axiom("neg-idempotent", f.neg(f.neg(x)), f.neg(x), same, generic=True),
        Axiom("sub-comm", f.sub(x, y), f.sub(y, x), same, generic=True),
        Axiom("gelu-is-gelu-tanh", f.gelu(x), f.gelu_tanh(x), same, generic=True),
        Axiom("hardswish-is-swish", f.hardswish(x), f.mul(x, f.sigmoid(x)), same, generic=True),
        Axiom("clip-is-relu", f.clip(x, min=lo, max=hi), f.relu(x), same, when=(lo >= 0,), domains=bounds),
        Axiom(
            "relu-clip-any-bound", f.relu(f.clip(x, min=lo, max=hi)), f.clip(x, min=lo, max=hi), same, domains=bounds
        ),
    ]


@pytest.mark.parametrize("index", range(6))
def test_planted_false_axiom_over_the_new_ops_fails_the_spec_check(index: int, specs: Specs) -> None:
    ax = _false_axioms(specs.f)[index]
    report = check_axiom(ax, specs)
    assert report.instances > 0 and not report.ok, ax.name


X_LESS_X = """
rule two zeros
graph(%X0: float32[2,4,5,5], %X1: float32[2,4,5,5], %s0: float32[] weight):
  %t0 = Add(%X0, %X1) : float32[2,4,5,5]
  %t1 = Mul(%t0, %s0) : float32[2,4,5,5]
  %t2 = Sub(%t1, %t1) : float32[2,4,5,5]
  return %t2
=>
graph(%X0: float32[2,4,5,5], %X1: float32[2,4,5,5], %s0: float32[] weight):
  %t0 = Sub(%X0, %X0) : float32[2,4,5,5]
  return %t0
"""


def test_an_x_less_x_rule_is_proved_by_the_zeros_it_is(specs: Specs) -> None:
    """x - x = y - y holds: each side is zeros of its shape (sub-self4), so such a rule (the generator finds
    many) is proved, within a small budget, where without a zero no axiom reached it."""
    verdict = Prover(specs, budget=2_000_000, precheck=False).verdict(parse_rules(X_LESS_X)[0])
    assert verdict.status == "proved" and "sub-self4" in verdict.detail["axioms"], verdict.detail
