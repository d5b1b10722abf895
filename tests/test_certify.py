"""Every rewrite certified (`taso.optimize.steps`, `taso.optimize.certify`, `subst certify`): a pass application
that changes an output is declined; `certify` passes a real optimized model and fails each kind of tampering
with the model or its certificate, naming the step."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import subst, write_graph
from onnx import TensorProto, helper, numpy_helper
from test_optimize import CONCAT_OF_SPLIT, MERGE_MATMULS, RELU_OF_SPLIT, _store

from taso import onnx as onnx_io
from taso.errors import BadInput
from taso.ir import Graph, parse_graph
from taso.optimize import Settings, optimize, rewrites, steps
from taso.optimize import certify as cert_mod
from taso.optimize.report import Report, quiet
from taso.optimize.run import Checking, Run


def _model(tmp: Path) -> Path:
    """Two sibling MatMul+Relu branches into a Concat (the rules merge them), each kernel a Transpose of a weight
    (precomputed) and the result reshaped twice (a chain of axis moves to compose): pass and rule steps both."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((40, 32)) / 6).astype("float32"), f"wt{i}") for i in (0, 1)]
    inits += [numpy_helper.from_array(np.array(s, np.int64), f"s{k}") for k, s in enumerate(([-1, 8, 10], [-1, 80]))]
    nodes = [helper.make_node("Transpose", [f"wt{i}"], [f"w{i}"], name=f"t{i}", perm=[1, 0]) for i in (0, 1)]
    nodes += [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"], name=f"mm{i}") for i in (0, 1)]
    nodes += [helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}") for i in (0, 1)]
    nodes += [
        helper.make_node("Concat", ["r0", "r1"], ["c"], name="cat", axis=1),
        helper.make_node("Reshape", ["c", "s0"], ["c3"], name="split_heads"),
        helper.make_node("Reshape", ["c3", "s1"], ["y"], name="merge_heads"),
    ]
    graph = helper.make_graph(
        nodes,
        "certified",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 80])],
        initializer=inits,
    )
    return write_graph(graph, tmp / "model.onnx")


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path, Report]:
    """The model optimized once with its certificate: (original, rewrite, certificate, store, report)."""
    tmp = tmp_path_factory.mktemp("certified")
    db = _store(tmp, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    src, out, cert = _model(tmp), tmp / "out.onnx", tmp / "out.cert.json"
    settings = Settings(device="estimate", alpha=2.0, dims={"batch": 64})
    report = optimize(src, out, db, settings=settings, certificate=cert)
    return src, out, cert, db, report


def _tampered(tmp: Path, cert: Path, edit) -> Path:  # noqa: ANN001 (a function editing the certificate's dict)
    data = json.loads(cert.read_text())
    edit(data)
    path = tmp / "tampered.cert.json"
    path.write_text(json.dumps(data))
    return path


def test_optimize_lists_every_step_and_certify_accounts_for_each(optimized) -> None:  # noqa: ANN001
    src, out, cert, db, report = optimized
    written = json.loads(cert.read_text())
    assert written == json.loads(json.dumps(report.certificate, default=str))
    assert [s["name"] for s in written["steps"]] == [
        "precompute weight-only nodes",
        "compose chains of axis moves",
        "search",
    ]
    precomputed, composed, searched = written["steps"]
    assert precomputed["removed"] == ["t0", "t1"] and precomputed["evidence"]["how"] == "evaluated"
    assert precomputed["evidence"]["sizes"] == [{"batch": 64}, {"batch": 65}]
    assert {"split_heads", "merge_heads"} <= set(composed["removed"])
    assert {r["id"] for r in searched["rules"]} == {MERGE_MATMULS.id, RELU_OF_SPLIT.id, CONCAT_OF_SPLIT.id}
    assert all(r["proof"]["specs"] for r in searched["rules"])
    assert any(line.startswith("steps     3: 1 by proved rules, 2 by passes") for line in report.lines())
    verdict = cert_mod.certify(src, out, cert, db)
    assert verdict.ok, verdict.failure
    assert [c["name"] for c in verdict.checked] == [s["name"] for s in written["steps"]]
    assert "CERTIFIED" in verdict.lines()[-2]


def test_a_pass_step_that_changes_an_output_fails_its_validation() -> None:
    """A composition that transposes where the chain only reshaped: same shape, other values."""
    before = parse_graph(
        """graph(%x: float32[b,6], %t: int64[3] = [-1, 2, 3], %u: int64[2] = [-1, 6]):
          %s = Reshape(%x, %t) : float32[b,2,3]
          %y = Reshape(%s, %u) : float32[b,6]
          return %y"""
    )
    wrong = parse_graph(
        """graph(%x: float32[b,6], %t: int64[3] = [-1, 2, 3], %u: int64[2] = [-1, 6]):
          %s = Reshape(%x, %t) : float32[b,2,3]
          %p = Transpose(%s) {perm=[0,2,1]} : float32[b,3,2]
          %y = Reshape(%p, %u) : float32[b,6]
          return %y"""
    )
    with pytest.raises(steps.Invalid, match="output y at sizes"):
        steps.Validator({}).validate(before, wrong)
    assert steps.Validator({}).validate(before, before)["max_abs_diff"] == 0.0


def test_a_fold_that_holds_at_one_size_only_fails_at_the_other(tmp_path: Path) -> None:
    """A dynamic dim folded as if it were static (the batch read as 2): right at the first set of sizes, wrong at
    the second, which is why a step is validated at two."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    shape = [helper.make_node("Shape", ["x"], ["n"]), helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT)]
    before = write_graph(helper.make_graph(shape, "g", [x], [y]), tmp_path / "before.onnx")
    c = numpy_helper.from_array(np.array([2.0, 6.0], np.float32), "c")
    folded = [helper.make_node("Identity", ["c"], ["y"])]
    after = write_graph(helper.make_graph(folded, "g", [x], [y], initializer=[c]), tmp_path / "after.onnx")
    validator = steps.Validator({})
    with pytest.raises(steps.Invalid, match="at sizes {'b': 3}"):
        validator.validate(onnx_io.import_model(before)[0], onnx_io.import_model(after)[0])
    assert validator.at == [{"b": 2}, {"b": 3}]


def _run(g: Graph, tmp: Path) -> Run:
    """An optimize run whose model so far is ``g``: what a pass is handed."""
    return Run(
        tmp / "m.onnx",
        tmp / "o.onnx",
        tmp,
        Settings(),
        Checking(),
        tmp,
        quiet,
        Report("", "", 0, 0, 0, 0),
        imported=g,
        graph=g,
    )


def test_the_pipeline_declines_a_pass_application_its_validation_fails(tmp_path: Path) -> None:
    g, _ = onnx_io.import_model(_model(tmp_path))
    run = _run(g, tmp_path)
    wrong = replace(g, outputs=("c",), types={**g.types, "c": g.types["y"]})  # the chain dropped, not composed
    declined = rewrites.validated(run, "compose chains of axis moves", wrong, 2)
    assert declined.graph is g and not declined.steps and not declined.applied
    assert declined.declined[0]["name"] == "compose chains of axis moves"
    right, _ = steps.PASSES["compose chains of axis moves"](g)
    made = rewrites.validated(run, "compose chains of axis moves", right, 1)
    assert made.graph is right and [s.name for s in made.steps] == ["compose chains of axis moves"]


def test_certify_fails_on_a_tampered_output(optimized, tmp_path: Path) -> None:  # noqa: ANN001
    """The rewrite changed after optimize wrote it (one weight element): the search's step no longer ends at
    it; and where the certificate is rewritten to agree, the step's graphs no longer compute the same."""
    src, out, cert, db, _ = optimized
    model = onnx.load(str(out))
    w = model.graph.initializer[0]
    array = numpy_helper.to_array(w).copy()
    array.flat[0] += 1.0
    w.CopyFrom(numpy_helper.from_array(array, w.name))
    bad = tmp_path / "bad.onnx"
    onnx.save_model(model, str(bad))
    verdict = cert_mod.certify(src, bad, cert, db)
    assert not verdict.ok and verdict.failure.startswith("step 3 (search): replayed, it makes another graph")
    digest = steps.digest(onnx_io.import_model(bad)[0])

    def agree(c: dict) -> None:
        c["steps"][-1]["after"] = c["output"] = digest

    verdict = cert_mod.certify(src, bad, _tampered(tmp_path, cert, agree), db)
    assert not verdict.ok and verdict.failure.startswith("step 3 (search): its graphs differ: MISMATCH")


def _drop_search(c: dict) -> None:
    c["steps"].pop()


def _unproved_rule(c: dict) -> None:
    c["steps"][-1]["rules"][0]["id"] = "0123456789"


def _other_proof(c: dict) -> None:
    c["steps"][-1]["rules"][0]["proof"]["specs"] = "0" * 64


def _other_pass(c: dict) -> None:
    c["steps"][1]["name"] = "drop operations their operand's content makes idle"


def _other_start(c: dict) -> None:
    c["steps"][0]["before"] = c["steps"][0]["after"]


def _other_nodes(c: dict) -> None:
    c["steps"][0]["removed"] = ["t0"]


def _other_model(c: dict) -> None:
    c["input"] = "0" * 64


def _search_not_last(c: dict) -> None:
    precomputed, composed, searched = c["steps"]
    c["steps"] = [precomputed, {**searched, "before": precomputed["after"]}, composed]


@pytest.mark.parametrize(
    "edit, failure",
    [
        (_drop_search, "the steps do not lead to"),
        (_unproved_rule, "step 3 (search): rule 0123456789 is not a proved rule"),
        (_other_proof, f"step 3 (search): rule {MERGE_MATMULS.id}: its proof record is not the store's"),
        (_other_pass, "step 2 (drop operations their operand's content makes idle): replayed, it makes another"),
        (_other_start, "step 1 (precompute weight-only nodes): does not start from"),
        (_other_nodes, "step 1 (precompute weight-only nodes): the nodes it names"),
        (_other_model, "the certificate is of another model"),
        (_search_not_last, "step 2 (search): found by a search, it is not replayed, so it must be the last step"),
    ],
)
def test_certify_fails_on_a_tampered_certificate(optimized, tmp_path: Path, edit, failure: str) -> None:  # noqa: ANN001
    src, out, cert, db, _ = optimized
    verdict = cert_mod.certify(src, out, _tampered(tmp_path, cert, edit), db)
    assert not verdict.ok and verdict.failure.startswith(failure), verdict.failure


def test_certify_revalidates_a_pass_step_it_replays(optimized, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A pass that writes a wrong graph, with a certificate that says so consistently: only the validation
    of the replayed step can refuse it."""
    src, _, _, db, _ = optimized
    g, _ = onnx_io.import_model(src)
    wrong = replace(g, outputs=("c",), types={**g.types, "c": g.types["y"]})
    broken = "compose chains of axis moves"
    monkeypatch.setitem(steps.PASSES, broken, lambda h: (wrong, 2))
    out = onnx_io.save_model(wrong, tmp_path / "wrong.onnx")
    cert = tmp_path / "wrong.cert.json"
    cert_mod.write(cert, cert_mod.certificate(g, wrong, [steps.step(steps.PASS, broken, g, wrong)], [], {}))
    verdict = cert_mod.certify(src, out, cert, db)
    assert not verdict.ok and verdict.failure.startswith(f"step 1 ({broken}): its graphs differ")


def test_cli_certify_exit_codes(optimized, tmp_path: Path) -> None:  # noqa: ANN001
    src, out, cert, db, _ = optimized
    shutil.copy(cert, tmp_path / "out.onnx.certificate.json")  # the default: beside the rewrite
    shutil.copy(out, tmp_path / "out.onnx")
    ok = subst("certify", src, tmp_path / "out.onnx", "--store", db, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    failed = subst("certify", src, out, "--certificate", _tampered(tmp_path, cert, _drop_search), "--store", db)
    assert failed.returncode == 1 and "NOT CERTIFIED" in failed.stdout
    assert failed.stderr.startswith("subst: check failed: not certified: the steps do not lead to")
    bad = subst("certify", src, tmp_path / "missing.onnx", "--certificate", cert, "--store", db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such model file" in bad.stderr, bad.stderr


def test_a_file_that_is_no_certificate_is_bad_input(optimized, tmp_path: Path) -> None:  # noqa: ANN001
    src, out, _, db, _ = optimized
    for text, message in [
        (None, "cannot read the certificate"),
        ("{", "not JSON"),
        ('{"format": "other"}', "its format is not"),
        (json.dumps({"format": cert_mod.FORMAT, "input": "", "output": "", "dims": {}}), "malformed"),
        (json.dumps({"format": cert_mod.FORMAT, "steps": [{"kind": "magic"}]}), "malformed"),
    ]:
        path = tmp_path / "c.json"
        path.unlink(missing_ok=True)
        if text is not None:
            path.write_text(text)
        with pytest.raises(BadInput, match=message):
            cert_mod.certify(src, out, path, db)


def _unrunnable(tmp: Path) -> Graph:
    """x -> an op of a domain onnxruntime does not know -> Relu -> y."""
    x, y = (helper.make_tensor_value_info(v, TensorProto.FLOAT, ["b", 4]) for v in "xy")
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["b", 4])
    nodes = [helper.make_node("Mystery", ["x"], ["a"], domain="test.certify"), helper.make_node("Relu", ["a"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], value_info=[a]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.certify", 1)],
    )
    onnx.save_model(model, str(tmp / "unrunnable.onnx"))
    return onnx_io.import_model(tmp / "unrunnable.onnx")[0]


def test_a_step_that_cannot_be_run_is_made_unvalidated_and_certify_refuses_it(
    optimized,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """onnxruntime cannot run the graph before (a custom op): the pass is not refuted, so it is made, its evidence
    saying it was not evaluated; `certify` does not certify what it could not check."""
    g, db, name = _unrunnable(tmp_path), optimized[3], "drop operations their operand's content makes idle"
    after = replace(g, nodes=g.nodes[:1], outputs=("a",))
    made = rewrites.validated(_run(g, tmp_path), name, after, 1)
    assert made.graph is after and made.steps[0].evidence["how"] == "not evaluated"
    monkeypatch.setitem(steps.PASSES, name, lambda h: (after, 1))
    out, cert = onnx_io.save_model(after, tmp_path / "after.onnx"), tmp_path / "c.json"
    cert_mod.write(cert, cert_mod.certificate(g, after, made.steps, [], {}))
    verdict = cert_mod.certify(tmp_path / "unrunnable.onnx", out, cert, db)
    assert not verdict.ok and verdict.failure.startswith(f"step 1 ({name}): cannot be validated"), verdict.failure


def test_optimize_refuses_a_certificate_path_it_cannot_write(optimized, tmp_path: Path) -> None:  # noqa: ANN001
    src, _, _, db, _ = optimized
    out = tmp_path / "o.onnx"
    for where, message in [
        (tmp_path / "nowhere" / "c.json", "does not exist"),
        (tmp_path, "is a folder"),
        (src, "reads or writes"),
    ]:
        with pytest.raises(BadInput, match=message):
            optimize(src, out, db, settings=Settings(device="estimate"), certificate=where)
        assert not out.exists()
    r = subst("optimize", src, "-o", out, "--store", db, "--certificate", tmp_path, "--device", "estimate")
    assert r.returncode == 2 and "--certificate" in r.stderr and not out.exists(), r.stderr
