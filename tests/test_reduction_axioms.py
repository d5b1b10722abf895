"""The axioms that close the shipped store's unknowns (reductions of softmax, ones and concats, a bias over a
scaled tensor): each proves rules the store left unknown, and a planted false variant of each fails the spec
check, the guard that keeps a wrong axiom from proving wrong rules. A rule true only at its example's size
stays unproved."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from taso.rules import SPECS_DIR, parse_rules
from taso.verify import Prover, Specs, check_axiom, load_specs, refute

DATA = Path(__file__).parent / "data"
RULES = {r.name: r for r in parse_rules((DATA / "closed-unknowns.rules").read_text())}
SIZE_BOUND = "a mean of four copies taken for a sum: true only where the axis has four rows"
NEW_AXIOMS = {
    "bias-shape2",
    "bias-shape3",
    "bias-shape4",
    "convid-bias",
    "poolk-bias",
    "softmax-mean",
    "rmean-cat-swap",
    "rmean-cat-mean",
    "rsum-mm-ones-rows",
    "rsum-mm-ones-columns",
    "rsum-single",
    "rmean-single",
    "rmean-cat-self",
    "rmean-ones",
    "softmax-sum",
    "softmax-single",
    "softmax-bias-rows",
    "rmean-cat-inner-swap",
    "transpose-single",
}


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Specs:
    root = tmp_path_factory.mktemp("specs") / "specs"
    shutil.copytree(SPECS_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(DATA / "planted_reduction_axioms.py", root / "planted_reduction_axioms.py")
    return load_specs(root)


@pytest.mark.parametrize("name", sorted(set(RULES) - {SIZE_BOUND}))
def test_a_rule_left_unknown_is_proved_by_the_new_axioms(name: str, specs: Specs) -> None:
    v = Prover(specs, precheck=False).verdict(RULES[name])
    assert v.status == "proved", v.detail
    assert NEW_AXIOMS & set(v.detail["axioms"]), v.detail


def test_a_rule_true_only_at_its_examples_size_is_never_proved(specs: Specs) -> None:
    rule = RULES[SIZE_BOUND]
    assert refute(rule) is None, "true at the example's size: the pre-check cannot refute it"
    v = Prover(specs, precheck=False).verdict(rule)
    assert v.status == "unknown", v.detail


def test_the_new_axioms_pass_the_spec_check(specs: Specs) -> None:
    by_name = {a.name: a for a in specs.axioms}
    assert NEW_AXIOMS <= set(by_name)
    for name in sorted(NEW_AXIOMS):
        report = check_axiom(by_name[name], specs)
        assert report.ok, report


def test_every_planted_variant_fails_the_spec_check(planted: Specs) -> None:
    variants = [a for a in planted.axioms if a.spec == "planted_reduction_axioms"]
    assert len(variants) == 16
    failing = [a.name for a in variants if not check_axiom(a, planted).ok]
    assert sorted(failing) == sorted(a.name for a in variants)
