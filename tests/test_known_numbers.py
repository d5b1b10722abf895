"""Known numbers (`taso.ops.numbers`, specs/numbers.py): a float that rounds sqrt 2, sqrt(2/pi), 0.044715 or 1.702
is read as that number by the fingerprint and by z3, so erf-GELU's exporter spellings pair with Gelu and are
proved (real z3), while a wrong constant, the tanh form, and QuickGelu never pair nor prove; and a rule's float
constant binds only to model data read as the same number."""

from __future__ import annotations

import math

import numpy as np
import pytest

from taso.generate.fingerprint import fingerprint
from taso.ir import parse_graph
from taso.ops import field as ff
from taso.ops import numbers
from taso.rules import SPECS_DIR, Rule
from taso.rules.match import find_matches
from taso.verify import Prover, load_specs, refute

F32 = np.float32
R2 = float(F32(math.sqrt(2)))
"""1.4142135 as an exporter writes sqrt 2."""


def _gelu_spelled(div: str, mul: str = "0.5", first: str = "Div") -> str:
    """x * 0.5 * (1 + erf(x / ``div``)), or x * ``div`` inside the erf where ``first`` is Mul."""
    return f"""graph(%x: float32[2,4], %h: float32[] = {mul}, %one: float32[] = 1.0, %r: float32[] = {div}):
  %t0 = Mul(%x, %h) : float32[2,4]
  %t1 = {first}(%x, %r) : float32[2,4]
  %t2 = Erf(%t1) : float32[2,4]
  %t3 = Add(%t2, %one) : float32[2,4]
  %y = Mul(%t0, %t3) : float32[2,4]
  return %y"""


def _op(op: str, attrs: str = "") -> str:
    return f"graph(%x: float32[2,4]):\n  %y = {op}(%x){attrs} : float32[2,4]\n  return %y"


GELU = _op("Gelu", ' {approximate="none"}')
GELU_TANH = _op("Gelu", ' {approximate="tanh"}')
QUICK = _op("QuickGelu", " {alpha=1.702}")
DIV_SQRT2 = _gelu_spelled(repr(R2))
MUL_RSQRT2 = _gelu_spelled(repr(float(F32(1 / math.sqrt(2)))), first="Mul")
DIV_WRONG = _gelu_spelled("1.5")
TANH_SPELLED = """graph(%x: float32[2,4], %h: float32[] = 0.5, %one: float32[] = 1.0, %k: float32[] = 0.7978846,
      %d: float32[] = 0.044715, %three: float32[] = 3.0):
  %t0 = Mul(%x, %h) : float32[2,4]
  %t1 = Pow(%x, %three) : float32[2,4]
  %t2 = Mul(%t1, %d) : float32[2,4]
  %t3 = Add(%x, %t2) : float32[2,4]
  %t4 = Mul(%t3, %k) : float32[2,4]
  %t5 = Tanh(%t4) : float32[2,4]
  %t6 = Add(%t5, %one) : float32[2,4]
  %y = Mul(%t0, %t6) : float32[2,4]
  return %y"""
QUICK_SPELLED = """graph(%x: float32[2,4], %a: float32[] = 1.702):
  %t0 = Mul(%x, %a) : float32[2,4]
  %t1 = Sigmoid(%t0) : float32[2,4]
  %y = Mul(%x, %t1) : float32[2,4]
  return %y"""
QUICK_DIV = QUICK_SPELLED.replace("Mul(%x, %a)", "Div(%x, %a)").replace("1.702", repr(float(F32(1 / 1.702))))
"""x * sigmoid(x / (1 / 1.702)): its division meets QuickGelu's scale only through the number axioms."""


def _fp(text: str) -> str:
    return fingerprint(parse_graph(text))


def test_roundings_of_known_numbers_are_read_as_them() -> None:
    """float16, float32 and float64 roundings of sqrt 2 are sqrt 2, over Z_p a root of 2 whose inverse is 1/sqrt
    2's reading (over Z_q, where 2 has no root, a stand-in); a float that rounds no known number (1.5, LayerNorm's 1e-5) is the dyadic it is."""
    for c in (R2, float(np.float16(math.sqrt(2))), math.sqrt(2)):
        assert numbers.read(c) == numbers.SQRT2
    assert numbers.read(-R2) == numbers.Number(numbers.Fraction(-1), 1)
    assert numbers.read(float(F32(0.044715))).rational == numbers.Fraction("0.044715")
    assert numbers.read(1.5).rational == numbers.Fraction(3, 2)
    assert numbers.read(float(F32(1e-5))).rational == numbers.Fraction(float(F32(1e-5)))
    root = ff.constant(R2)
    assert root * root % ff.P == 2
    assert root * ff.constant(float(F32(1 / math.sqrt(2)))) % ff.P == 1


def test_erf_gelu_spellings_share_gelu_fingerprint_and_wrong_ones_do_not() -> None:
    """x / 1.4142135 and x * 0.70710677 are Gelu; x / 1.5, the tanh form and QuickGelu are not (nor is the tanh
    Gelu the erf one, nor QuickGelu either)."""
    gelu = _fp(GELU)
    assert _fp(DIV_SQRT2) == _fp(MUL_RSQRT2) == gelu
    assert _fp(TANH_SPELLED) == _fp(GELU_TANH) != gelu
    assert _fp(QUICK_SPELLED) == _fp(QUICK) != gelu
    assert _fp(DIV_WRONG) != gelu


@pytest.fixture(scope="module")
def z3_alone() -> Prover:
    return Prover(load_specs(SPECS_DIR), precheck=False)


@pytest.mark.parametrize(
    "src, dst",
    [
        (DIV_SQRT2, GELU),
        (MUL_RSQRT2, GELU),
        (TANH_SPELLED, GELU_TANH),
        (QUICK_SPELLED, QUICK),
        (QUICK_DIV, QUICK),
    ],
    ids=["x/sqrt2", "x*rsqrt2", "tanh", "quickgelu", "quickgelu-div"],
)
def test_spelled_out_gelus_are_proved(src: str, dst: str, z3_alone: Prover) -> None:
    """Each from its relevant axioms: what a number axiom rewrites the spelling into (x / (1 / 1.702) into
    x * 1.702, then QuickGelu's scale) counts as the rule's own (`Axiom.eager`), not left to the last stage."""
    v = z3_alone.verdict(Rule(parse_graph(src), parse_graph(dst)))
    assert v.status == "proved", v.detail
    assert v.detail["stage"] == "relevant axioms", v.detail


@pytest.mark.parametrize(
    "src, dst",
    [(DIV_WRONG, GELU), (TANH_SPELLED, GELU), (DIV_SQRT2, GELU_TANH), (QUICK_SPELLED, GELU)],
    ids=["x/1.5", "tanh-as-erf", "erf-as-tanh", "quickgelu-as-gelu"],
)
def test_planted_gelu_mixups_are_refuted_and_never_proved(src: str, dst: str, z3_alone: Prover) -> None:
    rule = Rule(parse_graph(src), parse_graph(dst))
    assert refute(rule) is not None, "the planted rule must be false (the pre-check finds it so)"
    assert z3_alone.verdict(rule).status != "proved"


def test_a_rule_constant_binds_only_to_the_same_number() -> None:
    """The proved GELU rule matches a model dividing by 1.4142135, not one dividing by 1.5 (its proof rested on
    sqrt 2), nor one whose divisor is an input."""
    rule = Rule(parse_graph(DIV_SQRT2), parse_graph(GELU))
    assert list(find_matches(parse_graph(DIV_SQRT2), rule))
    assert not list(find_matches(parse_graph(DIV_WRONG), rule))
    free = DIV_SQRT2.replace(f"%r: float32[] = {R2!r}", "%r: float32[] weight")
    assert not list(find_matches(parse_graph(free), rule))
