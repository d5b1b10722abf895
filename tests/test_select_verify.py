"""Slice, Gather and Where under the verifier (specs/slice.py, specs/gather.py, specs/where.py), with real z3:
planted false rules over them are never proved (with the pre-check, and by z3 alone), their true versions are,
and planted false axioms over them fail `--check-specs`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from planted import assert_never_proved, assert_proved, rule

from taso.rules import SPECS_DIR
from taso.verify import Specs, check_axiom, load_specs

XY = "graph(%x: float32[2,3], %y: float32[2,3]):"
CAT = "  %t = Concat(%x, %y) {axis=1} : float32[2,6]"
SQ = "graph(%x: float32[4,4]):"
TR = "  %t = Transpose(%x) {perm=[1, 0]} : float32[4,4]"
MASK = "graph(%c: bool[2,4], %x: float32[2,4], %y: float32[2,4]):"


def _slice(arg: str, axes: str, starts: str, ends: str, out: str, to: str = "%s") -> str:
    steps = ", ".join("1" for _ in axes.split(","))
    return (
        f"  {to} = Slice({arg}) {{axes=[{axes}], ends=[{ends}], starts=[{starts}], steps=[{steps}]}} : float32[{out}]"
    )


def _g(*lines: str) -> str:
    return "\n".join(lines)


FALSE = {
    "slice of a concat taken as its other part": (
        _g(XY, CAT, _slice("%t", "1", "0", "3", "2,3"), "  return %s"),
        _g(XY, "  return %y"),
    ),
    "slice moved through a transpose without permuting its axes": (
        _g(SQ, TR, _slice("%t", "0, 1", "0, 1", "2, 3", "2,2"), "  return %s"),
        _g(
            SQ,
            _slice("%x", "0, 1", "0, 1", "2, 3", "2,2", "%u"),
            "  %s = Transpose(%u) {perm=[1, 0]} : float32[2,2]",
            "  return %s",
        ),
    ),
    "gather of index 1 taken as index 2": (
        _g(SQ, "  %s = Gather(%x) {axis=0, indices=1} : float32[4]", "  return %s"),
        _g(SQ, "  %s = Gather(%x) {axis=0, indices=2} : float32[4]", "  return %s"),
    ),
    "gather of the last index taken as the first": (
        _g(SQ, "  %s = Gather(%x) {axis=1, indices=3} : float32[4]", "  return %s"),
        _g(SQ, "  %s = Gather(%x) {axis=1, indices=0} : float32[4]", "  return %s"),
    ),
    "where with its operands swapped": (
        _g(MASK, "  %w = Where(%c, %x, %y) : float32[2,4]", "  return %w"),
        _g(MASK, "  %w = Where(%c, %y, %x) : float32[2,4]", "  return %w"),
    ),
    "where taken as an add": (
        _g(MASK, "  %w = Where(%c, %x, %y) : float32[2,4]", "  return %w"),
        _g(MASK, "  %w = Add(%x, %y) : float32[2,4]", "  return %w"),
    ),
}
TRUE = {
    "slice of a concat is its first part": (
        _g(XY, CAT, _slice("%t", "1", "0", "3", "2,3"), "  return %s"),
        _g(XY, "  return %x"),
    ),
    "slice to the end of a concat is its second part": (
        _g(XY, CAT, _slice("%t", "1", "3", "6", "2,3"), "  return %s"),
        _g(XY, "  return %y"),
    ),
    "slice through a transpose with its axes permuted": (
        _g(SQ, TR, _slice("%t", "0, 1", "0, 1", "2, 3", "2,2"), "  return %s"),
        _g(
            SQ,
            _slice("%x", "0, 1", "1, 0", "3, 2", "2,2", "%u"),
            "  %s = Transpose(%u) {perm=[1, 0]} : float32[2,2]",
            "  return %s",
        ),
    ),
    "slice of a matmul's columns is the matmul by the sliced weight": (
        _g(
            "graph(%x: float32[2,4], %w: float32[4,6]):",
            "  %m = MatMul(%x, %w) : float32[2,6]",
            _slice("%m", "1", "0", "3", "2,3"),
            "  return %s",
        ),
        _g(
            "graph(%x: float32[2,4], %w: float32[4,6]):",
            _slice("%w", "1", "0", "3", "4,3", "%v"),
            "  %s = MatMul(%x, %v) : float32[2,3]",
            "  return %s",
        ),
    ),
    "gather of consecutive indices is a slice": (
        _g(SQ, "  %s = Gather(%x) {axis=0, indices=[1, 2]} : float32[2,4]", "  return %s"),
        _g(SQ, _slice("%x", "0", "1", "3", "2,4"), "  return %s"),
    ),
    "gather of one row of a sum is the sum of the rows": (
        _g(
            "graph(%x: float32[4,4], %y: float32[4,4]):",
            "  %a = Add(%x, %y) : float32[4,4]",
            "  %s = Gather(%a) {axis=0, indices=3} : float32[4]",
            "  return %s",
        ),
        _g(
            "graph(%x: float32[4,4], %y: float32[4,4]):",
            "  %p = Gather(%x) {axis=0, indices=3} : float32[4]",
            "  %q = Gather(%y) {axis=0, indices=3} : float32[4]",
            "  %s = Add(%p, %q) : float32[4]",
            "  return %s",
        ),
    ),
    "where of one value either way is the value": (
        _g(MASK, "  %w = Where(%c, %x, %x) : float32[2,4]", "  return %w"),
        _g(MASK, "  return %x"),
    ),
    "slice of a where is the where of the slices": (
        _g(MASK, "  %w = Where(%c, %x, %y) : float32[2,4]", _slice("%w", "1", "1", "3", "2,2"), "  return %s"),
        _g(
            MASK,
            _slice("%c", "1", "1", "3", "2,2", "%d").replace("float32", "bool"),
            _slice("%x", "1", "1", "3", "2,2", "%a"),
            _slice("%y", "1", "1", "3", "2,2", "%b"),
            "  %s = Where(%d, %a, %b) : float32[2,2]",
            "  return %s",
        ),
    ),
}


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


@pytest.mark.parametrize("name", sorted(FALSE))
def test_planted_false_rule_over_the_selection_ops_is_never_proved(name: str, specs: Specs) -> None:
    assert_never_proved(rule(*FALSE[name], name), specs)


@pytest.mark.parametrize("name", sorted(TRUE))
def test_true_version_is_proved(name: str, specs: Specs) -> None:
    """Positive controls: the axioms reach these ops, so the planted rules fail for being false."""
    assert_proved(rule(*TRUE[name], name), specs)


PLANTED = '''"""False axioms over the selection ops (tests/test_select_verify.py)."""

from taso.verify import Axiom, ints, tensors


def axioms(f):
    c, x, y = tensors("c x y")
    m, n, a = ints("m n a")
    two = {"c": (m, n), "x": (m, n), "y": (m, n)}
    return [
        Axiom("planted-where-swapped", f.where(c, x, y), f.where(c, y, x), two, generic=True),
        Axiom("planted-where-add", f.where(c, x, y), f.add(x, y), two, generic=True),
        Axiom("planted-drop-wrong-axis", f.drop(f.tr(x), axis=a), f.drop(x, axis=a), {"x": (m, n)},
              domains={"a": (0, 1)}),
        Axiom("planted-where-twice-other", f.where(c, f.where(c, x, y), y), x, two, generic=True),
    ]
'''


def test_planted_false_axioms_over_the_selection_ops_fail_the_spec_check(tmp_path: Path) -> None:
    root = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "planted_select.py").write_text(PLANTED)
    specs = load_specs(root)
    planted = [a for a in specs.axioms if a.spec == "planted_select"]
    assert len(planted) == 4
    for axiom in planted:
        assert not check_axiom(axiom, specs).ok, axiom.name
