"""Only proofs subst can trust are applied: made by the verifier from the current specs (`taso.rules.provenance`), at
the sizes and attribute values they cover (`taso.verify.lowering`, enforced in `taso.search.rewrite`). Each guard here has a
positive control, so a test fails when its guard is removed rather than passing because nothing applies."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import ROOT, prove_into, write_graph
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.errors import CheckFailed
from taso.optimize import Settings, optimize
from taso.rules import SPECS_DIR, AttrIs, Rule, SizeIs, find_matches, parse_rules, provenance, store
from taso.search import Declined, apply, instantiate
from taso.verify import Prover, load_specs, pending, verify_rows

DISTRIBUTE = """
rule a MatMul distributes over the sum of two weights
graph(%x: float32[2,4], %w1: float32[4,5] weight, %w2: float32[4,5] weight):
  %a = MatMul(%x, %w1) : float32[2,5]
  %b = MatMul(%x, %w2) : float32[2,5]
  %y = Add(%a, %b) : float32[2,5]
  return %y
=>
graph(%x: float32[2,4], %w1: float32[4,5] weight, %w2: float32[4,5] weight):
  %w = Add(%w1, %w2) : float32[4,5]
  %y = MatMul(%x, %w) : float32[2,5]
  return %y
"""

SIBLING_CONVS = """
rule sibling convs as one conv over the concatenated kernels, for every group
free: group
graph(%X: float32[2,6,9,7], %K: float32[4,6,3,3] weight, %V: float32[5,6,3,3] weight):
  %a = Conv(%X, %K) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[2,4,9,7]
  %b = Conv(%X, %V) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[2,5,9,7]
  %y = Concat(%a, %b) {axis=1} : float32[2,9,9,7]
  return %y
=>
graph(%X: float32[2,6,9,7], %K: float32[4,6,3,3] weight, %V: float32[5,6,3,3] weight):
  %w = Concat(%K, %V) {axis=0} : float32[9,6,3,3]
  %y = Conv(%X, %w) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[2,9,9,7]
  return %y
"""
"""True for group 1 only (each group of the merged conv would read other input channels); `free: group` claims
every group, and the example's group 1 is what a proof needs."""


def _two_matmuls(tmp: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 40)) / 6).astype(np.float32), f"w{i}") for i in (0, 1)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]) for i in (0, 1)]
    nodes.append(helper.make_node("Add", ["m0", "m1"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 40])],
        initializer=inits,
    )
    return write_graph(graph, tmp / "two.onnx")


def _sibling_convs(tmp: Path, group: int) -> Path:
    """Two convs over one input, of ``group`` groups each, concatenated along the channels."""
    rng = np.random.default_rng(group)
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 32 // group, 3, 3)) / 9).astype(np.float32), f"k{i}")
        for i in (0, 1)
    ]
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": group}
    nodes = [helper.make_node("Conv", ["x", f"k{i}"], [f"c{i}"], **conv) for i in (0, 1)]
    nodes.append(helper.make_node("Concat", ["c0", "c1"], ["y"], axis=1))
    graph = helper.make_graph(
        nodes,
        "siblings",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 12, 12])],
        initializer=inits,
    )
    return write_graph(graph, tmp / f"siblings{group}.onnx")


@pytest.fixture(scope="module")
def prover() -> Prover:
    return Prover(load_specs(SPECS_DIR))


def _forge(db_path: Path, how: str) -> None:
    """Tamper with the one rule of the store the way ``how`` says."""
    db = store.open_store(db_path)
    row = next(db["rules"].rows)
    detail = json.loads(row["detail"])
    if how == "status set by hand":
        db["rules"].update(row["id"], {"status": "proved", "detail": "{}"})
    elif how == "proved under other specs":
        db["rules"].update(row["id"], {"detail": json.dumps({**detail, "proof": {**detail["proof"], "specs": "0"}})})
    elif how == "proved by another verifier":
        old = {**detail["proof"], "verifier": "0" * 32}
        db["rules"].update(row["id"], {"detail": json.dumps({**detail, "proof": old})})
    elif how != "verified":
        db["rules"].update(row["id"], {"status": how})


@pytest.mark.parametrize(
    "how",
    [
        "verified",
        "status set by hand",
        "proved under other specs",
        "proved by another verifier",
        "candidate",
        "unknown",
        "refuted",
    ],
)
def test_only_a_rule_the_verifier_proved_from_the_current_specs_is_applied(tmp_path: Path, how: str) -> None:
    """The positive control ("verified") applies the rule to this very model; every other way of marking it
    leaves the model as it was and, for a rule marked proved, says why in the report."""
    rule = replace(parse_rules(DISTRIBUTE)[0], status="candidate" if how == "status set by hand" else "proved")
    db = prove_into(tmp_path / "rules.db", [rule])
    _forge(db, how)
    report = optimize(_two_matmuls(tmp_path), tmp_path / "o.onnx", db, settings=Settings(device="estimate"))
    if how == "verified":
        assert report.rules_applied == {rule.id: {"name": rule.name, "count": 1}} and report.nodes_after == 1
    else:
        assert report.rules_applied == {} and report.nodes_after == report.nodes_before == 3
    lines = "\n".join(report.lines())
    assert ("marked proved but not applied" in lines) == how.startswith(("status set", "proved "))


def test_verify_refuses_to_prove_from_specs_with_a_false_axiom(tmp_path: Path) -> None:
    """A planted axiom (MatMul commutes) would prove false rules: verify checks the specs first and writes no
    verdict. The planted folder holds the MatMul spec and those it uses alone (Add, Concat, Split; Mul for the
    scale its per-head product lets through, and Transpose, which Mul's axioms name): a check of every other spec
    took 11 s of CPU and tells nothing here."""
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("add.py", "concat.py", "mul.py", "split.py", "transpose.py"):
        shutil.copy(SPECS_DIR / name, specs)
    matmul = specs / "matmul.py"
    matmul.write_text(
        (SPECS_DIR / "matmul.py")
        .read_text()
        .replace(
            "    return [\n",
            '    return [\n        Axiom("mm-commutes", f.mm(x, y), f.mm(y, x), {"x": (m, m), "y": (m, m)}),\n',
            1,
        )
    )
    planted = load_specs(specs)
    assert "mm-commutes" in {a.name for a in planted.axioms}
    db = store.create(tmp_path / "rules.db")
    store.add_rules(db, parse_rules(DISTRIBUTE))
    with pytest.raises(CheckFailed, match="mm-commutes"):
        verify_rows(db, pending(db), planted)
    assert [r["status"] for r in db["rules"].rows] == ["candidate"]
    assert verify_rows(db, pending(db), load_specs(SPECS_DIR)).counts["proved"] == 1  # the control


def test_a_proof_that_needs_the_examples_group_carries_it_as_a_condition(prover: Prover) -> None:
    """Sibling convs merged are one conv only for group 1; under `free: group` the proof over symbolic sizes
    holds only where the kernels read every input channel, which pins the group to 1."""
    v = prover.verdict(parse_rules(SIBLING_CONVS)[0])
    assert v.status == "proved" and v.detail["sizes"] == "symbolic", v.detail
    assert v.detail["conditions"], "a proof for every group would be a proof of a false rule"


@pytest.mark.parametrize("group", [1, 2])
def test_a_rule_is_applied_only_where_its_proofs_conditions_hold(tmp_path: Path, prover: Prover, group: int) -> None:
    """The merge proved above binds a group-2 model's convs (group is free) but is declined there; at group 1
    it applies and the result matches onnxruntime's run of the original."""
    rule = parse_rules(SIBLING_CONVS)[0]
    v = prover.verdict(rule)
    proved = replace(rule, status=v.status, detail=v.detail)
    path = _sibling_convs(tmp_path, group)
    g = onnx_io.load_model(path)
    match = next(find_matches(g, proved))
    if group == 2:
        with pytest.raises(Declined, match="outside what the rule's proof covers"):
            instantiate(g, match)
        return
    out = apply(g, match)
    assert [n.op for n in out.nodes] == ["Conv"]
    saved = onnx_io.save_model(out, tmp_path / "merged.onnx")
    x = {"x": np.random.default_rng(0).standard_normal((1, 32, 12, 12)).astype(np.float32)}
    want = ort.InferenceSession(str(path)).run(None, x)[0]
    got = ort.InferenceSession(str(saved)).run(None, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_unmet_condition_is_never_applied_even_without_the_check(tmp_path: Path, prover: Prover) -> None:
    """The audit's case: with the onnxruntime check off, a group-2 model optimized with the merge in its store
    is written unchanged, not merged wrong."""
    rule = replace(parse_rules(SIBLING_CONVS)[0], status="proved")
    db = prove_into(tmp_path / "rules.db", [rule])
    path = _sibling_convs(tmp_path, 2)
    out = tmp_path / "o.onnx"
    report = optimize(path, out, db, run_check=False, settings=Settings(device="estimate", alpha=2.0))
    assert report.rules_applied == {}
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Conv", "Conv", "Concat"]


def test_a_condition_on_a_free_attribute_is_enforced(tmp_path: Path) -> None:
    """A proof that needed a free attribute's example value applies only where the model has that value."""
    rule = parse_rules(SIBLING_CONVS)[0]
    pinned = replace(rule, status="proved", detail={"sizes": "symbolic", "conditions": [["attr", "group", 1]]})
    assert pinned.covered == (AttrIs("group", 1),)
    for group, applies in ((1, True), (2, False)):
        g = onnx_io.load_model(_sibling_convs(tmp_path, group))
        match = next(find_matches(g, pinned))
        if applies:
            instantiate(g, match)
        else:
            with pytest.raises(Declined, match="group"):
                instantiate(g, match)


def test_a_per_channel_operand_must_stay_per_channel(tmp_path: Path, prover: Prover) -> None:
    """The Mul folded into a BatchNorm was proved for a (C, 1, 1) operand; a (C, H, W) one of the same rank
    binds the same source but broadcasts otherwise, and is declined."""
    files = sorted((ROOT / "specs" / "rules").glob("*.rules"))
    rule = next(r for f in files for r in parse_rules(f.read_text()) if r.name.startswith("fold a per-channel Mul"))
    v = prover.verdict(rule)
    proved = replace(rule, status=v.status, detail=v.detail)
    assert proved.covered is not None
    rng = np.random.default_rng(0)
    for shape, applies in (((8, 1, 1), True), ((8, 5, 5), False)):
        vec = [numpy_helper.from_array((np.abs(rng.standard_normal(8)) + 0.5).astype(np.float32), n) for n in "sbmv"]
        c = numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), "c")
        nodes = [
            helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["z"], epsilon=1e-3),
            helper.make_node("Mul", ["z", "c"], ["y"]),
        ]
        graph = helper.make_graph(
            nodes,
            "bn",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 5, 5])],
            initializer=[*vec, c],
        )
        g = onnx_io.load_model(write_graph(graph, tmp_path / "bn.onnx"))
        match = next(find_matches(g, proved))
        if applies:
            instantiate(g, match)
        else:
            with pytest.raises(Declined, match="broadcasts otherwise"):
                instantiate(g, match)


SEAM = """
rule a MatMul of two stacked inputs split back at the seam
graph(%x0: float32[2,4], %x1: float32[3,4], %w: float32[4,5] weight, %s: int64[2] = [2, 3]):
  %c = Concat(%x0, %x1) {axis=0} : float32[5,4]
  %m = MatMul(%c, %w) : float32[5,5]
  %a, %b = Split(%m, %s) {axis=0} : float32[2,5], float32[3,5]
  return %a, %b
=>
graph(%x0: float32[2,4], %x1: float32[3,4], %w: float32[4,5] weight):
  %a = MatMul(%x0, %w) : float32[2,5]
  %b = MatMul(%x1, %w) : float32[3,5]
  return %a, %b
"""


@pytest.mark.parametrize(("sizes", "applies"), [((6, 2), True), ((5, 3), False)])
def test_a_split_the_proof_covers_only_at_the_seam(
    tmp_path: Path, prover: Prover, sizes: tuple[int, int], applies: bool
) -> None:
    """Proved over symbolic sizes with no condition: the Split's sizes are variables tied to the target's by
    the output types the rewrite checks. A model that splits elsewhere than the seam binds the source but is
    declined; at the seam it is rewritten exactly."""
    rule = parse_rules(SEAM)[0]
    v = prover.verdict(rule)
    assert v.status == "proved" and v.detail["conditions"] == [], v.detail
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w")
    split = numpy_helper.from_array(np.array(sizes, np.int64), "s")
    nodes = [
        helper.make_node("Concat", ["x0", "x1"], ["c"], axis=0),
        helper.make_node("MatMul", ["c", "w"], ["m"]),
        helper.make_node("Split", ["m", "s"], ["a", "b"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "seam",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, 4]) for x, n in (("x0", 6), ("x1", 2))],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [n, 5]) for y, n in zip("ab", sizes)],
        initializer=[w, split],
    )
    g = onnx_io.load_model(write_graph(graph, tmp_path / "seam.onnx"))
    match = next(find_matches(g, replace(rule, status="proved", detail=v.detail)))
    if not applies:
        with pytest.raises(Declined, match="output"):
            instantiate(g, match)
        return
    assert [n.op for n in apply(g, match).nodes] == ["MatMul", "MatMul"]


def test_a_rule_with_a_constant_generator_is_proved_one_way_only(prover: Prover) -> None:
    """A source constant is matched at its literal shape and a target one is built at the model's sizes: the
    proof covers the rule as written, not read backwards, and the search does not reverse it."""
    from taso.search import both_directions

    db = store.open_store(store.DEFAULT_PATH)
    row = next(db["rules"].rows_where("ops LIKE '%ConvIdentity%' AND status = 'proved' AND dst_ops > 0", order_by="id"))
    r = Rule.from_row(row)
    assert r.detail["reversible"] is False and not r.reversible
    assert [v.name for v in both_directions([r])] == [r.name]
    assert prover.verdict(r).detail["reversible"] is False


def test_a_lifted_rule_moves_its_conditions_past_the_batch_dims() -> None:
    """A condition on an activation's axis 1 is on axis 2 of the rule lifted by one batch dim; one on a weight
    stays where it was."""
    from taso.rules import SameSize, Size, lifted

    rule = replace(
        parse_rules(DISTRIBUTE)[0],
        status="proved",
        detail={"sizes": "symbolic", "conditions": [["same", "x", 1, "w1", 0], ["size", "out:0", 1, 5]]},
    )
    up = lifted(rule, 1)
    assert up is not None
    assert up.covered == (SameSize(Size("x", 2), Size("w1", 0)), SizeIs(Size("out:0", 2), 5))


POOL_AS_CONV = """
rule average pooling counting padding is a depthwise conv over a constant kernel
graph(%x: float32[2,4,5,5]):
  %a = AveragePool(%x) {count_include_pad=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[2,4,5,5]
  return %a
=>
graph(%x: float32[2,4,5,5]):
  %k = PoolKernel() {dtype="float32", shape=[4, 1, 3, 3]} : float32[4,1,3,3]
  %a = Conv(%x, %k) {dilations=[1, 1], group=4, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[2,4,5,5]
  return %a
"""


def test_a_target_constant_takes_the_models_sizes_and_keeps_the_sizes_no_input_has(prover: Prover) -> None:
    """The kernel's 4 is the input's channels, mapped to the model's; its 1 and 3 are no input's size and stay
    the literals the proof used (the rewrite declined such a constant before). At 10 x 7 images and a batch of
    3 the rewrite equals the pooling it replaces."""
    from taso.ir import parse_graph
    from taso.verify import run_graph

    rule = parse_rules(POOL_AS_CONV)[0]
    v = prover.verdict(rule)
    assert v.status == "proved" and v.detail["reversible"] is False, v.detail
    model = parse_graph(
        "graph(%x: float32[3,4,10,7]):\n  %a = AveragePool(%x) {count_include_pad=1, kernel_shape=[3, 3], "
        "pads=[1, 1, 1, 1], strides=[1, 1]} : float32[3,4,10,7]\n  return %a"
    )
    out = apply(model, next(find_matches(model, replace(rule, status="proved", detail=v.detail))))
    assert [n.op for n in out.nodes] == ["Conv"]
    assert [out.types[w].shape for w in out.weights] == [(4, 1, 3, 3)]  # the folded kernel
    x = {"x": np.random.default_rng(0).standard_normal((3, 4, 10, 7))}
    np.testing.assert_allclose(run_graph(out, x)[0], run_graph(model, x)[0], rtol=1e-6, atol=1e-7)


# ---- a proof's digest: what it rested on, from the specs' content (`taso.verify.basis`) -------------------------

TANH_SPEC = '''"""Tanh: element-wise, so it moves through transposes (a spec for an op no proved rule uses)."""

from taso.verify import Axiom, D, R, Symbol, tensors

SYMBOLS = [Symbol("tanh", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Tanh")]


def axioms(f):
    (x,) = tensors("x")
    return [Axiom("tanh-transpose", f.tanh(f.tr(x)), f.tr(f.tanh(x)), {"x": (2, 3)}, generic=True)]
'''
MM_ADD_RIGHT = 'Axiom("mm-add-right", f.mm(x, f.add(y, z)), f.add(f.mm(x, y), f.mm(x, z)), right, generic=True),'
SPEC_EDITS: dict[str, tuple[str, str, str, bool]] = {
    # file, text, replacement, whether DISTRIBUTE's proof (mm-add-right over mm and add) stays trusted
    "a spec for another op": ("tanh.py", "", TANH_SPEC, True),
    "a comment, a docstring and an import line": (
        "matmul.py",
        '"""MatMul: the 2-D matrix product',
        'import math  # noqa: F401\n\n"""MatMul, as a comment says: the 2-D matrix product',
        True,
    ),
    "another axiom of the same spec": ("matmul.py", 'Axiom("mm-assoc", ', 'Axiom("mm-associative", ', True),
    "the axiom it used": (
        "matmul.py",
        MM_ADD_RIGHT,
        MM_ADD_RIGHT.replace(
            "f.mm(x, f.add(y, z)), f.add(f.mm(x, y), f.mm(x, z))", "f.mm(x, f.add(z, y)), f.add(f.mm(x, z), f.mm(x, y))"
        ),
        False,
    ),
    "the axiom it used, removed": ("matmul.py", MM_ADD_RIGHT, "", False),
    "the shape rule of a symbol in play": (
        "matmul.py",
        "If(i == 0, D(x, 0), D(y, 1))",
        "If(i != 1, D(x, 0), D(y, 1))",
        False,
    ),
    "the lowering of an op of the rule": (
        "matmul.py",
        "f.fact(D(args[0], 1) == D(args[1], 0))",
        "f.fact(D(args[1], 0) == D(args[0], 1))",
        False,
    ),
}


def _edited_specs(tmp: Path, edit: tuple[str, str, str, bool]) -> Path:
    """A copy of the shipped specs with one edit: ``text`` in ``file`` replaced (a new file where it is empty)."""
    specs = tmp / "specs"
    shutil.copytree(SPECS_DIR, specs)
    file, text, replacement, _ = edit
    path = specs / file
    if not text:
        path.write_text(replacement)
        return specs
    source = path.read_text()
    assert text in source, f"{file} no longer says {text!r}: update the edit"
    path.write_text(source.replace(text, replacement, 1))
    return specs


@pytest.mark.parametrize("what", sorted(SPEC_EDITS))
def test_a_proof_is_trusted_exactly_while_what_it_rested_on_is_unchanged(tmp_path: Path, what: str) -> None:
    """DISTRIBUTE is proved from the shipped specs (mm-add-right, over the symbols mm and add). optimize, run with
    a copy of the specs edited as ``what`` says, applies it where the edit leaves what the proof used as it was,
    and skips it, saying why, where the edit changed or removed it."""
    rule = replace(parse_rules(DISTRIBUTE)[0], status="proved")
    db = prove_into(tmp_path / "rules.db", [rule])
    assert json.loads(next(store.open_store(db)["rules"].rows)["detail"])["axioms"] == ["mm-add-right"]
    specs = _edited_specs(tmp_path, SPEC_EDITS[what])
    settings = Settings(device="estimate", specs=specs)
    report = optimize(_two_matmuls(tmp_path), tmp_path / "o.onnx", db, settings=settings)
    if SPEC_EDITS[what][3]:
        assert report.rules_applied == {rule.id: {"name": rule.name, "count": 1}}
    else:
        assert report.rules_applied == {} and report.search["untrusted_rules"] == {"proved under other specs": 1}


def test_a_new_op_spec_keeps_every_shipped_proof_trusted(tmp_path: Path) -> None:
    """Every proof of the shipped store is trusted under the shipped specs, and still is with a spec for a new
    op beside them: adding an operator does not ask for `subst verify --force` over the store."""
    from taso.search import rulecache
    from taso.verify.basis import for_folder

    rules = rulecache.proved_rules(store.open_store(store.DEFAULT_PATH))
    assert len(rules) > 1000
    for specs in (SPECS_DIR, _edited_specs(tmp_path, SPEC_EDITS["a spec for another op"])):
        kept, skipped = provenance.trusted(rules, for_folder(specs).digest_of)
        assert not skipped and len(kept) == len(rules), (specs, skipped)


def test_every_shipped_spec_function_is_digested_from_its_source() -> None:
    """A lowering or a symbol's semantics is digested from its syntax tree, which every Python reads alike; the
    bytecode fallback (for code with no source) would make the shipped proofs untrusted under another Python."""
    from taso.verify import content

    specs = load_specs(SPECS_DIR)
    functions = [*specs.lowerings.values()]
    functions += [f for s in specs.symbols.values() for f in (s.compute, *s.derived.values()) if f is not None]
    assert len(functions) > 10
    assert not [f for f in functions if "<code " in content.function(f)]


def test_the_shipped_basis_is_current() -> None:
    """The package's digests of the shipped specs are what loading them gives: else every cold start loads them."""
    from taso.verify import basis

    shipped = json.loads(basis.SHIPPED.read_text())
    assert shipped["key"] == basis.files_key(SPECS_DIR), "stale: run `make rulecache`"
    assert shipped["parts"] == basis.Basis.of(load_specs(SPECS_DIR)).parts


@pytest.mark.parametrize("what", ["the axiom it used", "the lowering of an op of the rule", "a spec for another op"])
def test_edited_specs_are_digested_anew_whatever_is_shipped_or_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """With the shipped digests in place and the shipped specs' in the user's cache, a copy of the specs edited
    is digested from its own content: DISTRIBUTE's proof reads untrusted exactly where the edit touched what it
    rested on."""
    from taso.verify import basis

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rule = replace(parse_rules(DISTRIBUTE)[0], detail={"axioms": ["mm-add-right"], "symbols": ["mm", "add"]})
    shipped = basis.for_folder(SPECS_DIR)
    assert not (tmp_path / "cache").exists()  # the shipped digests were read, not the specs loaded
    specs = _edited_specs(tmp_path, SPEC_EDITS[what])
    cached = basis.for_folder(specs)
    assert (cached.digest_of(rule) == shipped.digest_of(rule)) == SPEC_EDITS[what][3]
    assert cached.parts == basis.Basis.of(load_specs(specs)).parts
    assert basis.for_folder(specs).parts == cached.parts  # read back from the user's cache


def test_the_basis_key_follows_the_spec_files_not_the_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key changes with a spec file's bytes, a file added and a file renamed, and not with the Python version
    (the parts are digested from syntax trees and z3 terms: the shipped ones serve 3.12 too)."""
    import sys

    from taso.verify.basis import files_key

    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs)
    key = files_key(specs)
    assert key == files_key(SPECS_DIR)
    monkeypatch.setattr(sys, "version", "3.12.1 (main) [GCC 13.2.0]")
    monkeypatch.setattr(sys, "version_info", (3, 12, 1, "final", 0))
    assert files_key(specs) == key
    keys = {key}
    (specs / "matmul.py").write_text((specs / "matmul.py").read_text() + "\n")
    keys.add(files_key(specs))
    (specs / "tanh.py").write_text(TANH_SPEC)
    keys.add(files_key(specs))
    (specs / "tanh.py").rename(specs / "tanh2.py")
    keys.add(files_key(specs))
    assert len(keys) == 4
