"""LayerNorm and RMSNorm as exporters spell them, their epsilon a 0-d constant (issue 48): the constant lowers to
the ``num`` term of its value (specs/numbers.py), the very term the fused op's epsilon names (specs/layernorm.py),
so a spelling at the norm's own epsilon is proved by z3 alone, and the planted ones (another epsilon, none, the
wrong axis, one norm as the other: tests/data/norm-spellings.rules) are refuted by the pre-check and never proved
by z3 alone.
A rule proved at one epsilon binds only a model constant of that value."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from planted import assert_never_proved, assert_proved, rule

from taso.ir import WeightData
from taso.rules import SPECS_DIR, parse_rules
from taso.rules.match import find_matches
from taso.verify import Prover, Specs, load_specs

RULES = {r.name: r for r in parse_rules((Path(__file__).parent / "data" / "norm-spellings.rules").read_text())}
TRUE = [n for n in RULES if not n.startswith("planted") and "over the root" not in n]
SCALE_FIRST = [n for n in RULES if not n.startswith("planted") and "over the root" in n]
PLANTED = [n for n in RULES if n.startswith("planted")]


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


@pytest.mark.parametrize("name", TRUE)
def test_a_norm_spelled_at_its_epsilon_is_proved(name: str, specs: Specs) -> None:
    """From its relevant axioms: a root spelled as a Pow by 0.5 meets the definition's Sqrt through the eager
    spow axioms (specs/numbers.py), not only in the verifier's last stage."""
    assert_proved(RULES[name], specs)
    assert Prover(specs, precheck=False).verdict(RULES[name]).detail["stage"] == "relevant axioms"


@pytest.mark.parametrize("name", SCALE_FIRST)
def test_a_norm_spelled_with_its_scale_over_the_root_is_proved(name: str, specs: Specs) -> None:
    """The scale [D] divided by the per-row root [N, 1] broadcasts both (`taso.verify.spread_both`): proved by
    z3 alone, over a witness of the quotient's shape that only the expand axioms tie to the norm's own spread."""
    assert_proved(RULES[name], specs)


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_norm_spelling_is_never_proved(name: str, specs: Specs) -> None:
    assert_never_proved(RULES[name], specs)


@pytest.mark.parametrize(("value", "binds"), [(1e-5, True), (1e-6, False)])
def test_a_spelling_binds_only_a_constant_of_its_epsilon(value: float, binds: bool) -> None:
    """The rule is proved at 1e-5: a model that adds 1e-6 is another function, and the matcher leaves it alone."""
    rule = RULES["layernorm spelled with a product and a root"]
    model = replace(rule.src, data={**rule.src.data, "e": WeightData(np.array(value, np.float32))})
    assert any(True for _ in find_matches(model, rule)) == binds


def test_a_div_broadcasting_otherwise_is_unknown_by_its_shapes(specs: Specs) -> None:
    """A dividend [4, 1] over [2, 4, 3] is neither of the quotient's rank nor its trailing shape: numpy aligns it
    with the last two axes, which no spread models, so the rule stays unknown and its reason says why."""
    planted = rule(
        "graph(%a: float32[4,1], %b: float32[2,4,3]):\n  %y = Div(%a, %b) : float32[2,4,3]\n  return %y",
        "graph(%a: float32[4,1], %b: float32[2,4,3]):\n  %r = Reciprocal(%b) : float32[2,4,3]\n"
        "  %y = Mul(%a, %r) : float32[2,4,3]\n  return %y",
    )
    v = Prover(specs, precheck=False).verdict(planted)
    assert v.status == "unknown" and "Div of shapes (4, 1) and (2, 4, 3)" in v.detail["reason"], v.detail
