"""A proof must rest on its goal: an unsat core without the goal means the premises and axioms contradict each
other, which would prove every rule, true or false. Two guards: such a check is no proof, and shape rules say
nothing about a dimension at or past the rank (where a transpose's ``1 - i`` and a constant's last size once
disagreed, so that ``ones-transpose`` over a non-square matrix made the premises contradictory)."""

from __future__ import annotations

import shutil
from pathlib import Path

from taso.ir import parse_graph
from taso.rules import SPECS_DIR, Rule
from taso.verify import Prover, load_specs, refute

DATA = Path(__file__).parent / "data"


def _rule(src: str, dst: str) -> Rule:
    return Rule(parse_graph(src), parse_graph(dst), "planted")


# false: a softmax column's mean is 1/2, not the column's sum. Its softmax-mean step makes ones2(2, 4).
MEAN_AS_SUM = _rule(
    "graph(%x: float32[2,4]):\n  %a = Softmax(%x) {axis=0} : float32[2,4]\n"
    "  %b = ReduceMean(%a) {axes=[0], keepdims=1} : float32[1,4]\n  return %b",
    "graph(%x: float32[2,4]):\n  %b = ReduceSum(%x) {axes=[0], keepdims=1} : float32[1,4]\n  return %b",
)
# false: a matrix transposed twice is itself, not its relu
TWICE_AS_RELU = _rule(
    "graph(%x: float32[2,4]):\n  %a = Transpose(%x) {perm=[1, 0]} : float32[4,2]\n"
    "  %b = Transpose(%a) {perm=[1, 0]} : float32[2,4]\n  return %b",
    "graph(%x: float32[2,4]):\n  %b = Relu(%x) : float32[2,4]\n  return %b",
)


def test_shape_rules_out_of_range_leave_the_premises_consistent() -> None:
    """With ones2(2, 4) and the transpose in play, the axioms stay consistent: the false rule is open, not
    'proved' (nor caught) as a contradiction."""
    assert refute(MEAN_AS_SUM) is not None
    v = Prover(load_specs(SPECS_DIR), precheck=False).verdict(MEAN_AS_SUM)
    assert v.status == "unknown" and v.detail["reason"].startswith("no proof from the axioms"), v.detail


def test_a_contradiction_is_no_proof(tmp_path: Path) -> None:
    """A planted generic axiom (a 1x1 transpose is the identity, said of every matrix) contradicts the
    transpose's shape rule on a 2x4 matrix: the check is unsat without the goal, and the rule stays unknown."""
    root = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(DATA / "planted_axioms.py", root / "planted_axioms.py")
    assert refute(TWICE_AS_RELU) is not None
    v = Prover(load_specs(root), precheck=False).verdict(TWICE_AS_RELU)
    assert v.status == "unknown" and "contradict" in v.detail["reason"], v.detail
