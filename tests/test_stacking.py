"""subst on what onnxruntime's transformers optimizer wrote (issue 46): its contrib ops pass through, and the
rewrite is checked. BERT-tiny here; bench/bench_stacking.py runs every transformer of the corpus.

Slow (8 s of CPU, most of it reading the shipped rules, longer on a busy machine); the search's 10 s limit is a
safety net, its work bound ends it first."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from conftest import ROOT

import taso
from taso import cost
from taso import onnx as onnx_io

sys.path.insert(0, str(ROOT / "bench"))

import bench_stacking  # noqa: E402


@pytest.mark.slow
def test_subst_optimizes_and_checks_bert_tiny_after_the_transformers_optimizer(
    tmp_path: Path, bert_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:  # removed again after the test
        monkeypatch.setitem(sys.modules, "torch", bench_stacking.torch_stand_in())
    ort = tmp_path / "bert_tiny.ort.onnx"
    bench_stacking.ort_optimize(bert_path, ort, "bert")
    assert bench_stacking.unknown_ops(ort).keys() >= {"com.microsoft:SkipLayerNormalization", "com.microsoft:BiasGelu"}
    untyped = [o.node for o in onnx_io.opaque_reasons(ort) if o.reason == "input type unknown"]
    assert not untyped  # every op after a contrib op was opaque: onnx types nothing past one
    costs = Path(cost.__file__).parent / "reference_costs.json"
    optimized, report = taso.optimize(str(ort), costs=str(costs), dims={"batch": 1, "seq": 16}, time_limit=10)
    assert report.check is not None and report.check.ok and report.opaque_nodes > 0
    kept = [n.op_type for n in optimized.graph.node if n.domain == "com.microsoft"]
    assert sorted(kept) == sorted(n.op_type for n in onnx.load(str(ort)).graph.node if n.domain == "com.microsoft")
