"""The Python API (`taso.api`, exported by `taso`): real models, a real store, costs from the reference table."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import ROOT, zoo
from onnx import TensorProto, helper
from test_optimize import MERGE_MATMULS

import taso
from taso.rules import store

COSTS = str(ROOT / "taso" / "cost" / "reference_costs.json")
FAST = {"costs": COSTS, "budget": 10}
"""Nothing measured, a small search: the zoo NasRNN's matmul merges are found within it (BERT-tiny's Q/K/V
merges no longer pay where its units are estimated by the kernels onnxruntime runs)."""


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped store, so that no test can write into it."""
    path = tmp_path_factory.mktemp("store") / "substitutions.db"
    shutil.copyfile(ROOT / "substitutions.db", path)
    return path


@pytest.fixture(scope="module")
def bert(bert_path: Path) -> onnx.ModelProto:
    return onnx.load(str(bert_path))


@pytest.fixture(scope="module")
def nasrnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nasrnn") / "nasrnn.onnx"
    onnx.save(zoo.ZOO["nasrnn"](), str(path))
    return path


@pytest.fixture(scope="module")
def nasrnn(nasrnn_path: Path) -> onnx.ModelProto:
    return onnx.load(str(nasrnn_path))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Optimized:
    """NasRNN's proto optimized once for the module's checks of that one run, with what the proto and the
    store were before it (each run of it took some 5 s of CPU)."""

    out: onnx.ModelProto
    report: taso.optimize.Report
    proto_before: bytes
    store_before: tuple[str, int]


@pytest.fixture(scope="module")
def optimized(nasrnn: onnx.ModelProto, rules: Path) -> Optimized:
    proto_before, store_before = nasrnn.SerializeToString(), (_digest(rules), rules.stat().st_mtime_ns)
    out, report = taso.optimize(nasrnn, store=rules, **FAST)
    return Optimized(out, report, proto_before, store_before)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)


def test_optimize_returns_a_valid_rewrite_that_computes_the_same(nasrnn: onnx.ModelProto, optimized: Optimized) -> None:
    out, report = optimized.out, optimized.report
    onnx.checker.check_model(out, full_check=True)
    assert report.rules_applied and report.nodes_after < report.nodes_before  # it did rewrite
    assert len(out.graph.node) < len(nasrnn.graph.node)
    assert report.check is not None and report.check.ok
    assert (report.input, report.output) == ("<ModelProto>", "<ModelProto>")
    assert nasrnn.SerializeToString() == optimized.proto_before  # the caller's proto is left as it was
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal((1, 512), dtype=np.float32) for i in nasrnn.graph.input}
    for want, got in zip(_run(nasrnn, feeds), _run(out, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_proto_and_its_path_give_the_same_bytes(optimized: Optimized, nasrnn_path: Path, rules: Path) -> None:
    from_path, report = taso.optimize(nasrnn_path, store=rules, **FAST)
    assert optimized.out.SerializeToString() == from_path.SerializeToString()
    assert report.input == str(nasrnn_path)


def test_nothing_is_written_to_the_store_unless_asked(optimized: Optimized, rules: Path) -> None:
    """Costs from a table: the store is read, never written (its bytes and its mtime stay)."""
    assert (_digest(rules), rules.stat().st_mtime_ns) == optimized.store_before
    assert sorted(p.name for p in rules.parent.iterdir()) == ["substitutions.db"]  # no journal, no temp file


def test_a_failed_check_raises_with_the_report(nasrnn: onnx.ModelProto, rules: Path) -> None:
    """Element-wise at zero tolerance, the merged matmuls' last-bit differences fail the check."""
    with pytest.raises(taso.CheckFailed, match="differs from the original") as e:
        taso.optimize(nasrnn, store=rules, rtol=0.0, atol=0.0, **FAST)
    assert e.value.report.rules_applied and not e.value.report.check.ok
    assert e.value.report.input == "<ModelProto>"


def _broken() -> onnx.ModelProto:
    """A model whose only node reads a value nothing defines."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (b"not a model", "expected an onnx.ModelProto or a path, got bytes"),
        (42, "expected an onnx.ModelProto or a path, got int"),
        ("no/such/model.onnx", "no such file"),
        (_broken(), "<ModelProto>: .*nowhere"),
    ],
    ids=["bytes", "int", "missing file", "invalid proto"],
)
def test_bad_input_raises_bad_input(model: object, message: str, rules: Path) -> None:
    digest = _digest(rules)
    with pytest.raises(taso.BadInput, match=message):
        taso.optimize(model, store=rules, **FAST)
    with pytest.raises(taso.BadInput, match=message):
        taso.load(model)
    assert _digest(rules) == digest


def test_a_proto_with_external_data_it_does_not_hold_is_refused(bert_path: Path, tmp_path: Path) -> None:
    shutil.copyfile(bert_path, tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    onnx.save_model(model, str(tmp_path / "x.onnx"), save_as_external_data=True, size_threshold=0)
    outside = onnx.load(str(tmp_path / "x.onnx"), load_external_data=False)
    with pytest.raises(taso.BadInput, match="external data it does not hold"):
        taso.load(outside)
    assert taso.load(onnx.load(str(tmp_path / "x.onnx"))) == taso.load(bert_path)  # loaded, it is the same model


def test_load_and_save(bert: onnx.ModelProto, bert_path: Path, tmp_path: Path) -> None:
    graph = taso.load(bert)
    assert graph == taso.load(bert_path)
    saved = taso.save(graph, tmp_path / "bert.onnx")
    onnx.checker.check_model(str(saved), full_check=True)
    assert taso.load(saved) == graph


def test_verify_proves_the_candidates_in_the_store(tmp_path: Path) -> None:
    path = tmp_path / "rules.db"
    store.add_rules(store.create(path), [replace(MERGE_MATMULS, status="candidate")])
    summary = taso.verify(path, workers=1)
    assert summary.counts["proved"] == 1
    assert [r.status for r in store.load_rules(store.open_store(path))] == ["proved"]
    assert taso.verify(path, workers=1).skipped == 1  # decided: not again without force
    with pytest.raises(taso.BadInput, match="no such store"):
        taso.verify(tmp_path / "missing.db")


def test_generate_writes_only_where_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = taso.generate(max_ops=2, ops=["matmul", "add"], workers=1)
    assert result.rules and list(tmp_path.iterdir()) == []
    again = taso.generate(max_ops=2, ops="matmul,add", workers=1, store="g.db")
    assert [r.to_row() for _, r in again.rules] == [r.to_row() for _, r in result.rules]  # same settings, same rules
    assert store.open_store(tmp_path / "g.db")["rules"].count == len(result.rules)
    with pytest.raises(taso.BadInput, match="does not exist"):
        taso.generate(max_ops=1, ops="matmul", store=tmp_path / "no" / "g.db")


def test_import_is_light_and_the_modules_stay_modules() -> None:
    """``import taso`` loads neither onnxruntime nor z3; importing a submodule first keeps ``taso.optimize``
    callable, and ``import taso.verify`` still gives the module."""
    code = (
        "import sys, taso; assert not {'onnx', 'onnxruntime', 'z3'} & set(sys.modules), sorted(sys.modules)\n"
        "from taso.optimize import Report, Settings\n"
        "import taso.verify as v\n"
        "from taso import generate\n"
        "assert callable(taso.optimize) and callable(taso.verify) and callable(generate)\n"
        "assert taso.optimize.Report is Report and v.Summary and generate.Result and sorted(taso.__all__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
