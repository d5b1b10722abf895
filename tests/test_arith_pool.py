"""The arith pool's ops (specs/pools/unshipped/arith.toml: Sub, Neg, Exp, Sqrt among Add, Mul, Div, MatMul): planted false
rules over them (the square root of a square as the identity, exp of a sum as the sum of exps, a difference
commuted) are never proved, by z3 alone or with the pre-check, and their true versions are."""

from __future__ import annotations

import pytest
from planted import assert_never_proved, assert_proved, rule

from taso.rules import SPECS_DIR
from taso.verify import Specs, load_specs

HEAD = "graph(%x0: float32[2,4], %x1: float32[2,4]):\n"

PLANTED = {
    "sqrt of a square is the identity": (
        "%t0 = Mul(%x0, %x0) : float32[2,4]\n  %t1 = Sqrt(%t0) : float32[2,4]\n  %t2 = Add(%t1, %x1) : float32[2,4]",
        "%t2 = Add(%x0, %x1) : float32[2,4]",
    ),
    "exp of a sum is the sum of exps": (
        "%t0 = Add(%x0, %x1) : float32[2,4]\n  %t2 = Exp(%t0) : float32[2,4]",
        "%t0 = Exp(%x0) : float32[2,4]\n  %t1 = Exp(%x1) : float32[2,4]\n  %t2 = Add(%t0, %t1) : float32[2,4]",
    ),
    "a difference commutes": ("%t2 = Sub(%x0, %x1) : float32[2,4]", "%t2 = Sub(%x1, %x0) : float32[2,4]"),
}
CONTROLS = {
    "sqrt moves through a transpose": (
        "%t0 = Transpose(%x0) {perm=[1,0]} : float32[4,2]\n  %t2 = Sqrt(%t0) : float32[4,2]",
        "%t0 = Sqrt(%x0) : float32[2,4]\n  %t2 = Transpose(%t0) {perm=[1,0]} : float32[4,2]",
    ),
    "exp of a sum is the product of exps": (
        "%t0 = Add(%x0, %x1) : float32[2,4]\n  %t2 = Exp(%t0) : float32[2,4]",
        "%t0 = Exp(%x0) : float32[2,4]\n  %t1 = Exp(%x1) : float32[2,4]\n  %t2 = Mul(%t0, %t1) : float32[2,4]",
    ),
    "a difference is a sum with the negation": (
        "%t2 = Sub(%x0, %x1) : float32[2,4]",
        "%t0 = Neg(%x1) : float32[2,4]\n  %t2 = Add(%x0, %t0) : float32[2,4]",
    ),
}


def _graph(body: str) -> str:
    """A graph over two [2, 4] activations whose last node, %t2, is its output."""
    return f"{HEAD}  {body}\n  return %t2"


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_false_arith_rule_is_never_proved(name: str, specs: Specs) -> None:
    src, dst = PLANTED[name]
    assert_never_proved(rule(_graph(src), _graph(dst), name), specs)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_true_version_is_proved(name: str, specs: Specs) -> None:
    src, dst = CONTROLS[name]
    assert_proved(rule(_graph(src), _graph(dst), name), specs)
