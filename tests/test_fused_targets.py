"""onnxruntime's fused kernels as proved rewrite targets (issue 48): the hand-written rules "decomposition =
fused op" (specs/rules/fused.rules) are proved by z3 from specs/fused.py, and the planted mix-ups
(tests/data/planted-fused.rules: RMSNorm as LayerNorm, a norm over the wrong axis, tanh-GELU as erf-GELU,
QuickGelu's alpha, the skip added after the norm) are refuted by the pre-check and never proved by z3 alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, prove_into, write_graph
from onnx import TensorProto, helper

import taso
from taso import cost, ops
from taso.rules import SPECS_DIR, Rule, parse_rules
from taso.verify import Prover, load_specs, refute

TARGETS = {r.name: r for r in parse_rules((ROOT / "specs" / "rules" / "fused.rules").read_text())}
COSTS = Path(cost.__file__).parent / "reference_costs.json"
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


def _silu(path: Path) -> Path:
    """x * Sigmoid(x) over a transformer's [batch, seq, hidden] (SiLU, as exporters write it; opset 17)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8, 16]) for n in ("x", "y")]
    return write_graph(helper.make_graph(nodes, "silu", values[:1], values[1:]), path)


@pytest.mark.slow  # 3 s each (40 s for the first where the specs changed since the shipped spec check)
@pytest.mark.parametrize("backwards", [False, True], ids=["rule", "rule-read-backwards"])
@pytest.mark.parametrize("standard", [False, True], ids=["onnxruntime", "standard-onnx"])
def test_standard_onnx_keeps_the_fused_kernels_out_which_are_targets_otherwise(
    standard: bool, backwards: bool, tmp_path: Path
) -> None:
    """The rule (at [3, 4], lifted here) turns SiLU into QuickGelu in onnxruntime's domain, run and checked by
    onnxruntime; with ``standard_onnx`` it is not used and the model stays as it was, nor is the rule written
    the other way round (QuickGelu = SiLU), which the search reads backwards."""
    rule = TARGETS["SiLU as QuickGelu at alpha 1"]
    if backwards:
        rule = Rule(rule.dst, rule.src, rule.name)
    db = prove_into(tmp_path / "rules.db", [replace(rule, status="proved")])
    src = _silu(tmp_path / "silu.onnx")
    out, report = taso.optimize(str(src), store=db, costs=str(COSTS), standard_onnx=standard)
    assert report.check is not None and report.check.ok
    written = sorted((n.domain, n.op_type) for n in out.graph.node)
    if standard:
        assert written == [("", "Mul"), ("", "Sigmoid")]
    else:
        assert written == [(ops.CONTRIB, "QuickGelu")]
        assert (ops.CONTRIB, 1) in {(o.domain, o.version) for o in out.opset_import}
