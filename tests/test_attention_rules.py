"""Issue 48: attention as onnxruntime's MultiHeadAttention. z3 proves the exporters' spellings
(tests/data/attention-hand-written.rules, the spellings first written by hand) equal to it from specs/attention.py's lowering and the 4-D axioms (tp4, bmm,
reshape4) at every size, with no condition; false variants (the scale dropped, the softmax over the wrong axis,
K not transposed, a batch broadcast) are never proved, and false axioms over the new symbols fail the spec check."""

from __future__ import annotations

import shutil
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.execute import Runner
from taso.ir import parse_graph
from taso.rules import SPECS_DIR, Rule, parse_rules
from taso.search import apply_everywhere
from taso.verify import Prover, check_axiom, load_specs

RULES = parse_rules((ROOT / "tests" / "data" / "attention-hand-written.rules").read_text())


@cache
def _prover(precheck: bool) -> Prover:
    return Prover(load_specs(SPECS_DIR), precheck=precheck)


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_each_spelling_is_proved_by_z3_alone_at_every_size(rule: Rule) -> None:
    v = _prover(False).verdict(rule)
    assert v.status == "proved", v.detail
    assert v.detail["sizes"] == "symbolic" and not v.detail["conditions"]


_Q, _K, _V = "float32[2,3,4,5]", "float32[2,5,4,5]", "float32[2,4,5,5]"
"""A TorchScript spelling's inputs where H = L = 5, so that K used untransposed still type-checks."""


def _spelled(body: str, constants: str = "") -> str:
    return f"graph(%q: {_Q}, %k: {_K}, %v: {_V}{constants}):\n{body}\n  return %y"


_SCALED = (
    ", %c: float32[] = 0.3535533845424652",
    """  %qh = Transpose(%q) {perm=[0, 2, 1, 3]} : float32[2,4,3,5]
  %qs = Mul(%qh, %c) : float32[2,4,3,5]
  %kt = Transpose(%k) {perm=[0, 2, 3, 1]} : float32[2,4,5,5]
  %ks = Mul(%kt, %c) : float32[2,4,5,5]
  %s = MatMul(%qs, %ks) : float32[2,4,3,5]""",
)
_TAIL = """  %p = Softmax(%s) {axis=3} : float32[2,4,3,5]
  %o = MatMul(%p, %v) : float32[2,4,3,5]
  %y = Transpose(%o) {perm=[0, 2, 1, 3]} : float32[2,3,4,5]"""


def _fused(scale: float) -> str:
    return f"""graph(%q: {_Q}, %k: {_K}, %v: {_V}, %t1: int64[3] = [2, 3, 20], %t2: int64[4] = [2, 3, 4, 5]):
  %q3 = Reshape(%q, %t1) {{allowzero=0}} : float32[2,3,20]
  %kh = Transpose(%k) {{perm=[0, 2, 1, 3]}} : float32[2,4,5,5]
  %a = MultiHeadAttention(%q3, %kh, %v) {{num_heads=0, scale={scale}}} : float32[2,3,20]
  %y = Reshape(%a, %t2) {{allowzero=0}} : float32[2,3,4,5]
  return %y"""


_SCALE = 0.1249999925494194
PLANTED = {
    "the scale dropped": (_spelled(_SCALED[1] + "\n" + _TAIL, _SCALED[0]), _fused(1.0)),
    "a scale the spelling does not apply": (
        _spelled(
            """  %qh = Transpose(%q) {perm=[0, 2, 1, 3]} : float32[2,4,3,5]
  %kt = Transpose(%k) {perm=[0, 2, 3, 1]} : float32[2,4,5,5]
  %s = MatMul(%qh, %kt) : float32[2,4,3,5]
"""
            + _TAIL
        ),
        _fused(_SCALE),
    ),
    "the softmax over the queries": (
        _spelled(_SCALED[1] + "\n" + _TAIL.replace("{axis=3}", "{axis=2}"), _SCALED[0]),
        _fused(_SCALE),
    ),
    "a (1,) scale dropped": (
        _spelled(_SCALED[1] + "\n" + _TAIL, ", %c: float32[1] = [0.3535533845424652]"),
        _fused(1.0),
    ),
    "K not transposed": (
        _spelled(_SCALED[1].replace("perm=[0, 2, 3, 1]", "perm=[0, 2, 1, 3]") + "\n" + _TAIL, _SCALED[0]),
        _fused(_SCALE),
    ),
}


def test_the_planted_rules_true_version_is_proved() -> None:
    """Positive control: the planted rules' spelling with its own scale is proved, so their failures are not the
    sizes' or the text's."""
    rule = Rule(parse_graph(PLANTED["the scale dropped"][0]), parse_graph(_fused(_SCALE)))
    assert _prover(False).verdict(rule).status == "proved"


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_false_attention_is_never_proved(name: str) -> None:
    rule = Rule(*(parse_graph(side) for side in PLANTED[name]))
    assert _prover(True).verdict(rule).status == "refuted"
    assert _prover(False).verdict(rule).status != "proved"


def test_a_product_whose_batch_broadcasts_is_not_modelled() -> None:
    """bmm's lowering states one batch and head count for both operands: a broadcasting product is refused, or
    that statement would be a false premise."""
    src = """graph(%x: float32[1,4,3,5], %y: float32[2,4,5,6]):
  %a = MatMul(%x, %y) : float32[2,4,3,6]
  %b = Relu(%a) : float32[2,4,3,6]
  return %b"""
    dst = """graph(%x: float32[1,4,3,5], %y: float32[2,4,5,6]):
  %a = MatMul(%x, %y) : float32[2,4,3,6]
  %b = Relu(%a) : float32[2,4,3,6]
  %c = Relu(%b) : float32[2,4,3,6]
  return %c"""
    v = _prover(False).verdict(Rule(parse_graph(src), parse_graph(dst)))
    assert v.status == "unknown" and "batch axes broadcast" in v.detail["reason"], v.detail


@pytest.mark.parametrize(
    ("kv", "scale", "reason"),
    [("float32[2,6,20]", 1.0, "not split into heads"), (_K, 0.0, "default scale"), (_K, -0.25, "negative")],
    ids=["3-D key", "default scale", "negative scale"],
)
def test_what_the_attention_spec_does_not_lower_is_unknown_with_its_reason(kv: str, scale: float, reason: str) -> None:
    key = "float32[2,6,20]" if kv != _K else "float32[2,4,5,5]"
    side = f"""graph(%q: float32[2,3,20], %k: {key}, %v: {key}):
  %a = MultiHeadAttention(%q, %k, %v) {{num_heads={4 if kv != _K else 0}, scale={scale}}} : float32[2,3,20]
  %y = Relu(%a) : float32[2,3,20]
  return %y"""
    other = side.replace("%y = Relu(%a)", "%r = Relu(%a) : float32[2,3,20]\n  %y = Relu(%r)")
    v = _prover(False).verdict(Rule(parse_graph(side), parse_graph(other)))
    assert v.status == "unknown" and reason in v.detail["reason"], v.detail


PLANTED_AXIOMS = """
from taso.verify import Axiom, ints, tensors


def axioms(f):
    (x,) = tensors("x")
    a, b, c, d, p, q, n = ints("a b c d p q n")
    return [
        Axiom(  # composed the wrong way round: r[p[i]] for p[r[i]]
            "planted-tp4-composed-backwards",
            f.tp4(f.tp4(x, perm=(0, 2, 3, 1)), perm=(0, 2, 1, 3)),
            f.tp4(x, perm=(0, 1, 3, 2)),
            {"x": (a, b, c, d)},
        ),
        Axiom("planted-tp4-swap-is-identity", f.tp4(x, perm=(0, 1, 3, 2)), x, {"x": (a, b, c, c)}),
        Axiom(  # heads merged from (B, N, S, H) without moving them back first
            "planted-heads-merged-in-place",
            f.reshape4(f.reshape3(f.tp4(x, perm=(0, 2, 1, 3)), shape=(p, q, n)), shape=(a, b, c, d)),
            x,
            {"x": (a, b, c, d)},
            when=(p * q * n == a * b * c * d,),
            domains={"a": (1, 2), "b": (2, 3), "c": (2, 3), "d": (1, 2)},
        ),
    ]
"""


def test_false_axioms_over_the_4d_symbols_fail_the_spec_check(tmp_path: Path) -> None:
    """Each new axiom holds on its instances and a planted false variant of each fails."""
    root = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, root)
    (root / "planted_attention.py").write_text(PLANTED_AXIOMS)
    specs = load_specs(root)
    checked = {
        a.name: check_axiom(a, specs) for a in specs.axioms if a.name.startswith(("planted", "tp4", "reshape-back-4"))
    }
    assert len(checked) == 6, sorted(checked)
    for name, check in checked.items():
        assert check.instances > 0, name
        assert bool(check.failures) == name.startswith("planted"), (name, check.failures)


# ---- applied to a model of an encoder layer's attention, as TorchScript exports it ----------------------------

S, N, H = 7, 3, 8


def _encoder_attention(path: Path) -> Path:
    """x (batch, S, N*H) -> Q, K, V projections, heads split by Reshape (+ Transpose), softmax(Q K^T) V, heads
    merged, out projection: the unscaled spelling (Whisper's encoder scales Q's projection instead), with the
    batch symbolic as exporters leave it."""
    rng = np.random.default_rng(0)
    width = N * H
    weights = [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) / 4, w) for w in "QKVO"]
    weights += [
        numpy_helper.from_array(np.array([0, S, N, H], np.int64), "split"),
        numpy_helper.from_array(np.array([0, S, width], np.int64), "merge"),
    ]
    nodes = [helper.make_node("MatMul", ["x", w], [w.lower()]) for w in "QKV"]
    nodes += [helper.make_node("Reshape", [w.lower(), "split"], [f"{w.lower()}4"]) for w in "QKV"]
    nodes += [
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ob"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ob", "merge"], ["m"]),
        helper.make_node("MatMul", ["m", "O"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", S, width]) for n in ("x", "y")]
    g = helper.make_graph(nodes, "attention", io[:1], io[1:], weights)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_rule_rewrites_an_encoder_attention_and_onnxruntime_agrees(tmp_path: Path) -> None:
    """One MultiHeadAttention where the spelling was (the Reshapes around it written with 0 for the symbolic
    batch), written to ``com.microsoft`` with its head count, and onnxruntime computes what the original does."""
    src = _encoder_attention(tmp_path / "attention.onnx")
    g = onnx_io.load_model(src)
    rewritten, applied = apply_everywhere(g, RULES[:1])
    assert sum(applied.values()) == 1
    assert Counter(n.op for n in rewritten.nodes)["MultiHeadAttention"] == 1
    assert not {"Softmax", "Transpose"} - {n.op for n in g.nodes} and "Softmax" not in {n.op for n in rewritten.nodes}
    out = onnx_io.save_model(rewritten, tmp_path / "fused.onnx")
    node = next(n for n in onnx.load(str(out)).graph.node if n.op_type == "MultiHeadAttention")
    assert node.domain == "com.microsoft" and helper.get_attribute_value(node.attribute[0]) == N
    x = {"x": np.random.default_rng(1).standard_normal((2, S, N * H)).astype(np.float32)}
    np.testing.assert_allclose(Runner(out)(x)["y"], Runner(src)(x)["y"], rtol=1e-4, atol=1e-5)


def test_only_a_known_number_of_shape_1_scales_as_a_scalar() -> None:
    """A (1,) constant with data is a ``num`` and a Mul by it ``smul`` (the TorchScript scale above); a (1,)
    weight without data stays a tensor, whose broadcasting the spec does not model."""
    src = """graph(%x: float32[2,3], %w: float32[1] weight):
  %y = Mul(%x, %w) : float32[2,3]
  return %y"""
    dst = src.replace("Mul(%x, %w)", "Mul(%w, %x)")
    v = _prover(False).verdict(Rule(parse_graph(src), parse_graph(dst)))
    assert v.status == "unknown" and "Mul with broadcasting" in v.detail["reason"], v.detail
