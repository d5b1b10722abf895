"""The differential fuzz of `optimize --no-check` (issue 45): random models (`fuzz_models`) through `taso.optimize`
with the check off, each result run in onnxruntime beside its original at two sets of sizes for the symbolic dims.

The findings each stand here as the minimal model that showed them (tests/data/, as the fuzz wrote them, or built
below); the slow test runs `FUZZ_GRAPHS` random models (12 in CI, 30 with SUBST_FULL=1), bench/bench_fuzz.py the full
2,000.
"""

from __future__ import annotations

from pathlib import Path

import fuzz_models
import onnx
import pytest
from conftest import FULL

import taso
from taso.search import rulecache

DATA = Path(__file__).parent / "data"
FUZZ_GRAPHS = 30 if FULL else 12
"""Random models in CI's bounded run (about 0.7 s each on one core; bench/bench_fuzz.py runs the full 2,000)."""


def _optimized(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` optimized as the fuzz does: the shipped store, the shipped cost table, no check."""
    params = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    out, _ = taso.optimize(m, check=False, costs=fuzz_models.COSTS, dims={p: fuzz_models.SIZES[0][p] for p in params})
    return out


@pytest.mark.parametrize(
    "name",
    [
        "shapefold-empty-reshape",  # the fold wrote [0, 0] for [N, -1] of an [N, 3, 0] input: 0 copies N's 3
        "views-duplicate-node-names",  # two unnamed chains both wrote a node named Transpose/regrouped
        "search-two-dead-branches",  # the first region's splice dropped the second, dead, region: KeyError
    ],
)
def test_each_fuzz_finding_optimizes_to_a_model_that_computes_the_same(name: str) -> None:
    m = onnx.load(DATA / f"{name}.onnx")
    assert fuzz_models.differ(m, _optimized(m), seed=0) is None


def test_a_split_whose_other_outputs_are_dead_keeps_their_types_for_the_rules_that_match_it() -> None:
    """Fuzz seed 23: the dead code dropped beside a Split of three outputs, one read, dropped the types of the
    other two, and a rule matching the Split then failed on them (KeyError in `instantiate`)."""
    m = onnx.load(DATA / "split-dead-outputs.onnx")
    assert fuzz_models.differ(m, _optimized(m), seed=23) is None


def test_the_fuzz_draws_what_it_promises() -> None:
    """The generator's models, over the first 40 seeds, hold the ops, symbolic dims and empty tensors the fuzz
    is for, and onnxruntime runs almost all of them (a model it cannot run tests nothing)."""
    models = [fuzz_models.model(s) for s in range(40)]
    ops = {n.op_type for m in models for n in m.graph.node}
    assert ops >= {"Conv", "MatMul", "Gemm", "Add", "Mul", "Relu", "Concat", "Split", "Transpose", "Reshape", "Shape"}
    dims = [d for m in models for i in m.graph.input for d in i.type.tensor_type.shape.dim]
    assert {d.dim_param for d in dims} >= {"N", "S"} and any(d.HasField("dim_value") and not d.dim_value for d in dims)
    runs = 0
    for s, m in enumerate(models):
        try:
            fuzz_models.run(m, fuzz_models.feeds(m, fuzz_models.SIZES[1], s))
            runs += 1
        except Exception:  # noqa: BLE001, S112  (counted: onnxruntime's errors have no common base)
            continue
    assert runs >= 38


@pytest.mark.slow
def test_random_models_optimize_to_models_that_compute_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rulecache, "proved_rules", fuzz_models.reading_rules_once())
    outcomes = {s: fuzz_models.trial(s) for s in range(FUZZ_GRAPHS)}
    failed = {s: o for s, o in outcomes.items() if o[0] in ("wrong", "crash")}
    assert not failed, failed
    assert sum(o[0] == "ok" for o in outcomes.values()) >= 0.95 * FUZZ_GRAPHS
