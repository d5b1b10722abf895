"""The corpus of real exporter output (models/corpus/): every model loads valid, imports, optimizes as the
regression runs it (committed cost table, bounded search), passes the check, and what subst writes passes onnx's
full check; the quick ones also hold their predicted cost ratio in models/baseline.json.

A few models that span the corpus run always; the rest are marked slow: CI runs those whose baseline run took
the `CI_MODELS` fastest, SUBST_FULL=1 (`make test-full`) and `make zoo` every one.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, bounded
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.rules import store

sys.path.insert(0, str(ROOT / "models"))

import corpus  # noqa: E402
import regress  # noqa: E402

QUICK = [
    "squeezenet1_1_ts",
    "squeezenet1_1_ts_fp16",
    "gpt2_dynamo",
    "bert_dynamo",
    "whisper_encoder_ts",
    "mobilenet_v3_large_dynamo",
    "t5_encoder_dynamo",
    "distilbert_ts",
    "mixer_s16_dynamo",
]
"""Quick, and between them: both exporters, float16, opset 20's Split and LayerNormalization, convs, attention,
and an MLP-only net."""

CI_MODELS = 9
"""CI's bounded form: the other models' fastest by their baseline run (models/baseline.json, the quiet 2-core
machine), so many whatever the store makes each take; SUBST_FULL=1 runs them all."""
_SECONDS = {n: e["seconds"] for n, e in json.loads(regress.BASELINE.read_text())["models"].items()}
SLOW = bounded(sorted((n for n in corpus.NAMES if n not in QUICK), key=lambda n: _SECONDS.get(n, 0.0)), CI_MODELS)


@pytest.fixture(scope="module")
def store_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "store.db"
    shutil.copy(store.DEFAULT_PATH, path)
    return path


def test_the_corpus_spans_exporters_opsets_families_and_float16() -> None:
    entries = [corpus.MANIFEST[n] for n in corpus.NAMES]
    assert len({e["model"] for e in entries}) >= 16
    assert {e["exporter"] for e in entries} == {"torch.onnx TorchScript", "torch.onnx dynamo"}
    assert {e["opset"] for e in entries} >= {17, 20}
    assert sum(e["dtype"] == "float16" for e in entries) >= 3
    assert sum((corpus.CORPUS / f"{n}.onnx").stat().st_size for n in corpus.NAMES) < 5 * 2**20


def test_loading_fills_every_stripped_tensor_deterministically() -> None:
    name = "whisper_encoder_ts"
    raw = onnx.load(str(corpus.CORPUS / f"{name}.onnx"))
    stripped = {t.name for t in raw.graph.initializer if t.doc_string == "stripped"}
    assert stripped
    a, b, c = corpus.load(name), corpus.load(name), corpus.load(name, seed=1)
    onnx.checker.check_model(a, full_check=True)
    arrays = [{t.name: numpy_helper.to_array(t) for t in m.graph.initializer} for m in (a, b, c)]
    for t in stripped:
        assert np.array_equal(arrays[0][t], arrays[1][t])
        assert not np.array_equal(arrays[0][t], arrays[2][t])
        assert np.isfinite(arrays[0][t]).all() and np.std(arrays[0][t]) > 0
    kept = {t.name for t in raw.graph.initializer} - stripped
    for t in raw.graph.initializer:  # shapes, indices and small constants stay as exported
        if t.name in kept:
            assert np.array_equal(arrays[0][t.name], numpy_helper.to_array(t))


def test_batchnorm_variances_filled_positive_also_behind_an_identity() -> None:
    """DenseNet's TorchScript export writes a fresh BatchNorm's variance as an Identity of its scale (both
    ones): the scale filled like any vector made every output NaN."""
    m = corpus.load("densenet121_ts")
    data = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    aliases = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Identity"}
    variances = [n.input[4] for n in m.graph.node if n.op_type == "BatchNormalization"]
    assert any(v in aliases for v in variances)
    for v in variances:
        assert (data[aliases.get(v, v)] > 0).all()


def test_an_equal_split_keeps_its_part_count_from_opset_18(tmp_path: Path) -> None:
    """GPT-2's dynamo export splits Q/K/V with ``num_outputs``: from opset 18 a Split needs it (or sizes), and
    an export that dropped it was invalid."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2, 2]) for i in range(3)]
    split = helper.make_node("Split", ["x"], ["s0", "s1", "s2"], axis=1, num_outputs=3)
    relus = [helper.make_node("Relu", [f"s{i}"], [f"y{i}"]) for i in range(3)]
    graph = helper.make_graph([split, *relus], "g", [x], outs)
    for opset in (13, 18, 21):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        if opset == 13:
            del model.graph.node[0].attribute[1]  # num_outputs does not exist before opset 18
        path = tmp_path / f"split{opset}.onnx"
        onnx.save_model(model, str(path))
        exported = onnx_io.to_proto(onnx_io.load_model(path))
        onnx.checker.check_model(exported, full_check=True)


@pytest.mark.parametrize("name", ["gpt2_dynamo", "t5_encoder_dynamo", "llama_dynamo"])
def test_bound_dims_size_every_value(name: str, tmp_path: Path) -> None:
    """At the sizes the corpus is costed at, every value has a static shape, so every unit can be measured:
    position ids and masks made from Shape, Range and the like over the inputs' dims stayed unknown to onnx's
    shape inference (48 to 115 values in these models), and every activation that broadcast against them."""
    path = corpus.write(name, tmp_path / f"{name}.onnx")
    fixed = onnx_io.concretize(onnx_io.load_model(path), corpus.dims(name))
    assert [v for n in fixed.nodes for v in n.outputs if v and not fixed.types[v].is_static] == []


def _optimize(name: str, store_path: Path, tmp_path: Path) -> dict:
    """The regression's run of ``name`` (models/regress.py: committed costs, bounded search), with its output
    checked by onnx's full check too."""
    row = regress.run_model(name, store_path, tmp_path)
    assert row["check_ok"], row["check"]
    onnx.checker.check_model(onnx.load(str(tmp_path / f"{name}.opt.onnx")), full_check=True)
    return row


@pytest.mark.parametrize("name", QUICK)
def test_corpus_model_optimizes_checks_exports_valid_and_holds_its_baseline(
    name: str, store_copy: Path, tmp_path: Path
) -> None:
    row = _optimize(name, store_copy, tmp_path)
    base = json.loads(regress.BASELINE.read_text())["models"][name]
    assert row["cost_ratio"] <= base["cost_ratio"] * (1 + regress.TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_slow_corpus_model_optimizes_checks_and_exports_valid(name: str, store_copy: Path, tmp_path: Path) -> None:
    _optimize(name, store_copy, tmp_path)
