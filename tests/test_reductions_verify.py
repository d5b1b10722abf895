"""Softmax, LayerNormalization and the reductions under the verifier (specs/softmax.py, specs/layernorm.py,
specs/reduce.py), with real z3: planted false rules over them are never proved (with the pre-check, and by z3
alone), their true versions are, and a planted false axiom over them fails `--check-specs`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from planted import assert_never_proved, assert_proved, rule

from taso.rules import SPECS_DIR
from taso.verify import Specs, check_axiom, load_specs


def _unary(op: str, attrs: str, shape: str, out: str, before: str = "", after: str = "") -> str:
    """A graph of one input %x through ``op`` (optionally a Transpose, a Mul by %s or a Concat around it)."""
    lines = [f"graph(%x: float32[{shape}], %s: float32[]):"]
    arg = "%x"
    if before:
        lines.append(f"  %t = {before}")
        arg = "%t"
    lines.append(f"  %y = {op}({arg}{', %g, %b' if op == 'LayerNormalization' else ''}) {attrs} : float32[{out}]")
    res = "%y"
    if after:
        lines.append(f"  %z = {after}")
        res = "%z"
    lines.append(f"  return {res}")
    text = "\n".join(lines)
    return text.replace("%s: float32[])", "%s: float32[], %g: float32[4], %b: float32[4])") if "LayerN" in op else text


TR = "Transpose(%x) {perm=[1, 0]} : float32[4,2]"
LN = "{axis=1, epsilon=1e-05}"
FALSE = {
    "softmax through a transpose along the same axis number": (
        _unary("Softmax", "{axis=1}", "2,4", "4,2", before=TR),
        _unary("Softmax", "{axis=1}", "2,4", "2,4", after="Transpose(%y) {perm=[1, 0]} : float32[4,2]"),
    ),
    "layernorm without its epsilon": (
        _unary("LayerNormalization", LN, "2,4", "2,4"),
        _unary("LayerNormalization", "{axis=1, epsilon=0.0}", "2,4", "2,4"),
    ),
    "layernorm of a scaled input is the layernorm": (
        _unary("LayerNormalization", LN, "2,4", "2,4", before="Mul(%x, %s) : float32[2,4]"),
        _unary("LayerNormalization", LN, "2,4", "2,4"),
    ),
    "sum through a transpose along the same axis": (
        _unary("ReduceSum", "{axes=[0], keepdims=0}", "4,4", "4", before=TR.replace("4,2", "4,4")),
        _unary("ReduceSum", "{axes=[0], keepdims=0}", "4,4", "4"),
    ),
    "mean as the sum": (
        _unary("ReduceMean", "{axes=[1], keepdims=1}", "2,4", "2,1"),
        _unary("ReduceSum", "{axes=[1], keepdims=1}", "2,4", "2,1"),
    ),
    "mean over the other axis": (
        _unary("ReduceMean", "{axes=[0], keepdims=0}", "4,4", "4"),
        _unary("ReduceMean", "{axes=[1], keepdims=0}", "4,4", "4"),
    ),
    "division distributed over an addition": (
        """graph(%x: float32[2,4], %y: float32[2,4], %z: float32[2,4]):
  %a = Add(%y, %z) : float32[2,4]
  %b = Div(%x, %a) : float32[2,4]
  return %b""",
        """graph(%x: float32[2,4], %y: float32[2,4], %z: float32[2,4]):
  %a = Div(%x, %y) : float32[2,4]
  %c = Div(%x, %z) : float32[2,4]
  %b = Add(%a, %c) : float32[2,4]
  return %b""",
    ),
}
TRUE = {
    "softmax through a transpose to the other axis": (
        _unary("Softmax", "{axis=0}", "2,4", "4,2", before=TR),
        _unary("Softmax", "{axis=1}", "2,4", "2,4", after="Transpose(%y) {perm=[1, 0]} : float32[4,2]"),
    ),
    "sum through a transpose to the other axis": (
        _unary("ReduceSum", "{axes=[0], keepdims=1}", "2,4", "1,2", before=TR),
        _unary("ReduceSum", "{axes=[1], keepdims=1}", "2,4", "2,1", after="Transpose(%y) {perm=[1, 0]} : float32[1,2]"),
    ),
    "global average pool as the mean over both spatial axes": (
        _unary("GlobalAveragePool", "", "2,3,4,4", "2,3,1,1"),
        _unary("ReduceMean", "{axes=[2, 3], keepdims=1}", "2,3,4,4", "2,3,1,1"),
    ),
    "a scalar Mul after a layernorm folds into its scale and bias": (
        _unary("LayerNormalization", LN, "2,4", "2,4", after="Mul(%y, %s) : float32[2,4]"),
        """graph(%x: float32[2,4], %s: float32[], %g: float32[4], %b: float32[4]):
  %h = Mul(%g, %s) : float32[4]
  %c = Mul(%b, %s) : float32[4]
  %y = LayerNormalization(%x, %h, %c) {axis=1, epsilon=1e-05} : float32[2,4]
  return %y""",
    ),
}


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


@pytest.mark.parametrize("name", sorted(FALSE))
def test_planted_false_rule_over_the_new_ops_is_never_proved(name: str, specs: Specs) -> None:
    assert_never_proved(rule(*FALSE[name], name), specs)


@pytest.mark.parametrize("name", sorted(TRUE))
def test_true_version_is_proved(name: str, specs: Specs) -> None:
    """Positive controls: the axioms do reach these ops, so the planted rules fail for being false."""
    assert_proved(rule(*TRUE[name], name), specs)


PLANTED = '''"""False axioms over the new ops (tests/test_reductions_verify.py)."""

from taso.verify import Axiom, attr_int, ints, tensors


def axioms(f):
    x, y, c = tensors("x y c")
    m, n, a, k = ints("m n a k")
    two = {"x": (m, n), "y": (m, n), "c": ()}
    dom = {"a": (0, 1), "k": (0, 1)}
    eps = attr_int(1e-5)
    rsum = lambda t: f.rsum(t, axis=a, keepdims=k)
    return [
        Axiom("planted-mean-is-sum", f.rmean(x, axis=a, keepdims=k), rsum(x), two, domains=dom),
        Axiom("planted-lnorm-scale", f.lnorm(f.smul(x, c), axis=1, epsilon=eps), f.lnorm(x, axis=1, epsilon=eps), two),
        Axiom("planted-softmax-axis", f.softmax(f.tr(x), axis=a), f.tr(f.softmax(x, axis=a)), two, domains=dom),
        # specs/reduce.py's rsum-add without its side condition: read backwards it sums unequal axes
        Axiom("planted-rsum-add-unguarded", rsum(f.add(x, y)), f.add(rsum(x), rsum(y)), two, domains=dom, generic=True),
    ]
'''


def test_planted_false_axioms_over_the_new_ops_fail_the_spec_check(tmp_path: Path) -> None:
    root = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "planted_reduce.py").write_text(PLANTED)
    specs = load_specs(root)
    planted = [a for a in specs.axioms if a.spec == "planted_reduce"]
    assert len(planted) == 4
    for axiom in planted:
        assert not check_axiom(axiom, specs).ok, axiom.name
