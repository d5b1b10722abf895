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
from planted import assert_never_proved, assert_proved

from taso.ir import WeightData
from taso.rules import SPECS_DIR, parse_rules
from taso.rules.match import find_matches
from taso.verify import Prover, Specs, load_specs

RULES = {r.name: r for r in parse_rules((Path(__file__).parent / "data" / "norm-spellings.rules").read_text())}
TRUE = [n for n in RULES if not n.startswith("planted")]
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


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_norm_spelling_is_never_proved(name: str, specs: Specs) -> None:
    assert_never_proved(RULES[name], specs)


@pytest.mark.parametrize(("value", "binds"), [(1e-5, True), (1e-6, False)])
def test_a_spelling_binds_only_a_constant_of_its_epsilon(value: float, binds: bool) -> None:
    """The rule is proved at 1e-5: a model that adds 1e-6 is another function, and the matcher leaves it alone."""
    rule = RULES["layernorm spelled with a product and a root"]
    model = replace(rule.src, data={**rule.src.data, "e": WeightData(np.array(value, np.float32))})
    assert any(True for _ in find_matches(model, rule)) == binds
