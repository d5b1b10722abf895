"""The end-to-end guard's verdict: a rewrite is kept only where it is faster beyond the noise measured by timing the
original against itself; the verdict, its band and what it was measured on are reported and cached, and
``refresh`` times again instead of recalling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sqlite_utils
from conftest import write_graph
from onnx import TensorProto, helper, numpy_helper
from test_cold import steady_units  # noqa: F401 (a fixture)
from test_optimize import CONCAT_OF_SPLIT, MERGE_MATMULS, RELU_OF_SPLIT, _store, _two_branches

from taso import cost
from taso import onnx as onnx_io
from taso.cost import cache
from taso.cost.calibration import Calibration
from taso.cost.profiler import pick_device
from taso.optimize import guard
from taso.optimize.pipeline import Settings, optimize

ORIGINAL = [1.00, 1.01, 0.99, 1.00, 1.02]


@pytest.mark.parametrize(
    ("itself", "after", "verdict"),
    [
        ([1.01, 1.00, 1.00, 1.01, 1.01], [1.20, 1.22, 1.19, 1.18, 1.25], guard.SLOWER),
        ([1.01, 1.00, 1.00, 1.01, 1.01], [0.80, 0.82, 0.79, 0.85, 0.81], guard.FASTER),
        ([1.01, 1.00, 1.00, 1.01, 1.01], [0.99, 1.00, 0.98, 1.01, 1.01], guard.WITHIN),
        # every round won by 4 %, but the original's own sessions were 10 % apart: that is no evidence
        ([1.10, 0.95, 1.00, 1.02, 1.00], [0.96, 0.97, 0.95, 0.96, 0.98], guard.WITHIN),
        # the same rewrite beside an original that timed steady against itself: faster
        ([1.00, 1.01, 0.99, 1.00, 1.02], [0.96, 0.97, 0.95, 0.96, 0.98], guard.FASTER),
        # a median win past the band, but two rounds lost: not faster
        ([1.00, 1.01, 0.99, 1.00, 1.02], [0.50, 0.50, 0.50, 1.10, 1.10], guard.WITHIN),
    ],
)
def test_the_verdict_is_faster_or_slower_only_beyond_the_originals_noise_against_itself(
    itself: list[float], after: list[float], verdict: str
) -> None:
    judged = guard.judge(ORIGINAL, itself, after)
    assert judged["verdict"] == verdict
    assert judged["noise"] >= guard.NOISE_FLOOR
    assert judged["noise"] == pytest.approx(
        max(guard.NOISE_FLOOR, *(max(s / b, b / s) - 1 for b, s in zip(ORIGINAL, itself)))
    )


def _chain(tmp: Path, name: str, links: int) -> Path:
    """x -> ``links`` MatMuls by a 256x256 weight, each through a Relu: a model whose latency grows with links."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), "w")
    nodes, value = [], "x"
    for i in range(links):
        nodes += [
            helper.make_node("MatMul", [value, "w"], [f"m{i}"], name=f"mm{i}"),
            helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        value = f"r{i}"
    nodes.append(helper.make_node("Identity", [value], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256])],
        initializer=[w],
    )
    return write_graph(graph, tmp / f"{name}.onnx")


@pytest.mark.parametrize(("original", "result", "kept"), [(24, 2, False), (2, 24, True)])
def test_the_guard_times_real_models_and_keeps_the_one_faster_beyond_the_noise(
    tmp_path: Path, original: int, result: int, kept: bool
) -> None:
    """In onnxruntime, a rewrite that does a twelfth of the work is kept; one that does twelve times more is not,
    and the verdict says it was slower beyond the noise, with both timings and the band."""
    files = (_chain(tmp_path, "a", original), _chain(tmp_path, "b", result))
    graphs = [onnx_io.load_model(f) for f in files]
    fixed = Calibration(run_ms=0.01, kernel_ms=0.002, gflops=50.0, gbps=10.0, reference_ms=0.05)
    model = cost.CostModel(pick_device("cpu"), None, calibration=fixed)
    measured = guard.confirm_speedup(files, graphs[0], graphs[1], model, lambda *_: None)
    assert bool(measured.get("kept_original")) == kept
    assert measured["verdict"] == (guard.SLOWER if kept else guard.FASTER)
    assert measured["noise"] >= guard.NOISE_FLOOR and measured["itself_ms"] > 0  # type: ignore[operator]
    assert (measured["after_ms"] > measured["before_ms"]) == kept  # type: ignore[operator]
    assert measured["measured_on"]["device"] == model.key  # type: ignore[index]


def _optimized(tmp: Path, name: str, **settings: object) -> tuple[dict, list[str], list[str]]:
    """The measured part of the report of optimizing `_two_branches` (MatMuls the search merges), the stages it
    went through and its lines."""
    src, db = _two_branches(tmp), _store(tmp, MERGE_MATMULS, RELU_OF_SPLIT, CONCAT_OF_SPLIT)
    stages: list[str] = []
    s = Settings(device="cpu", alpha=2.0, dims={"batch": 64}, **settings)  # type: ignore[arg-type]
    report = optimize(src, tmp / name, db, settings=s, progress=lambda st, *_: stages.append(st))
    return report.cost["measured"], stages, report.lines()


def test_the_verdict_is_reported_and_cached_with_its_band_and_what_it_was_measured_on_and_refresh_retimes_it(
    tmp_path: Path,
    steady_units: None,  # noqa: F811
) -> None:
    """The report line gives both timings, the original against itself, the band and the verdict; the cache keeps
    the band, rounds, verdict and what it was measured on (device, dims, inputs, the host's load and cores). A
    row from before verdicts carried their noise is not recalled: it may have been decided by that noise. A
    second run would recall the verdict (tests/test_cold.py); with ``refresh`` it times again."""
    m, _, lines = _optimized(tmp_path, "a.onnx")
    (line,) = [ln for ln in lines if ln.startswith("measured  ")]
    assert f"{m['before_ms']:.4f} -> {m['after_ms']:.4f} ms" in line and f"{m['itself_ms']:.4f} ms" in line
    assert f"noise +-{100 * m['noise']:.1f} %" in line and line.split("; ")[-1].startswith(m["verdict"])
    db = sqlite_utils.Database(tmp_path / "cache" / "subst" / "costs.db")
    (row,) = db["verdicts"].rows
    detail = json.loads(row["detail"])
    on = detail["measured_on"]
    assert on == m["measured_on"] and on["device"] == row["device"] and on["cores"] >= 1
    assert on["dims"] == {"batch": 64} and on["inputs"] == "drawn" and isinstance(on["load"], float)
    assert {k: detail[k] for k in ("noise", "rounds", "verdict", "itself_ms")} == {
        k: m[k] for k in ("noise", "rounds", "verdict", "itself_ms")
    }
    assert cache.verdict(db, row["device"], row["pair"]) == {k: v for k, v in m.items()}
    again, stages, _ = _optimized(tmp_path, "b.onnx", refresh=True)
    assert "cached" not in again and "timing end to end" in stages
    db["verdicts"].update((row["device"], row["pair"]), {"detail": None})
    assert cache.verdict(db, row["device"], row["pair"]) is None
