"""onnxruntime's fused kernels as proved rewrite targets (issue 48): the hand-written rules "decomposition =
fused op" (specs/rules/fused.rules) are proved by z3 from specs/fused.py, and the planted mix-ups
(tests/data/planted-fused.rules: RMSNorm as LayerNorm, a norm over the wrong axis, tanh-GELU as erf-GELU,
QuickGelu's alpha, the skip added after the norm) are refuted by the pre-check and never proved by z3 alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from taso.rules import SPECS_DIR, parse_rules
from taso.verify import Prover, load_specs, refute

TARGETS = {r.name: r for r in parse_rules((ROOT / "specs" / "rules" / "fused.rules").read_text())}
PLANTED = {r.name: r for r in parse_rules((Path(__file__).parent / "data" / "planted-fused.rules").read_text())}


@pytest.fixture(scope="module")
def z3_alone() -> Prover:
    return Prover(load_specs(SPECS_DIR), precheck=False)


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_fused_mixup_is_never_proved(name: str, z3_alone: Prover) -> None:
    rule = PLANTED[name]
    assert refute(rule) is not None, "the planted rule must be false (the pre-check finds it so)"
    v = z3_alone.verdict(rule)
    assert v.status != "proved", v.detail


@pytest.mark.parametrize("name", TARGETS)
def test_a_fused_kernel_is_proved_equal_to_its_decomposition(name: str, z3_alone: Prover) -> None:
    rule = TARGETS[name]
    assert refute(rule) is None
    v = z3_alone.verdict(rule)
    assert v.status == "proved", v.detail
