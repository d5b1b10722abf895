"""bench/bench_fresh.py's driver without torch: its steps in processes of their own, what it refuses, what
``--resume`` and ``--stop-after`` leave to run, the table, and one model through the whole measure (a tiny ONNX
model standing in for an export, which needs torch)."""

from __future__ import annotations

import json
import os
import sys
import time
from argparse import Namespace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(ROOT / "bench"))

import bench_fresh  # noqa: E402
import child  # noqa: E402
import corpus  # noqa: E402
import peers  # noqa: E402

from taso.cost import profiler  # noqa: E402


def test_the_list_is_of_architectures_outside_the_corpus() -> None:
    families = {entry["model"] for entry in corpus.MANIFEST.values()}
    assert len(bench_fresh.BY_NAME) == len(bench_fresh.ARCHS) >= 15
    for arch in bench_fresh.ARCHS:
        assert arch.name not in families and arch.ident not in families, arch
        assert arch.source in ("timm", "torchvision", "transformers"), arch
        assert arch.family in ("", *peers.TRANSFORMER_TYPES), arch
        assert "_" not in bench_fresh.EXPORTERS, "a row's name splits at its last underscore"


def test_a_step_in_its_own_process_returns_raises_dies_or_is_killed_past_its_time() -> None:
    assert child.in_child(dict, ((("a", 1),),), 60) == {"a": 1}
    assert child.in_child(json.loads, ("{",), 60)["error"].startswith("JSONDecodeError: ")
    assert child.in_child(os._exit, (3,), 60) == {"error": "the process died (exit 3)"}
    t0 = time.perf_counter()
    assert child.in_child(time.sleep, (600,), 0.5) == {"error": "timed out after 0.5 s"}
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize(
    "argv",
    [
        ["--models", "albert,nosuch"],
        ["--exporters", "ts,jit"],
        ["--cuda-graph", "--device", "cpu", "--models", "albert", "--exporters", "ts", "--timeout", "0.01"],
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    result = tmp_path / "fresh.json"
    assert bench_fresh.main([*argv, "--result", str(result)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not result.exists()


@pytest.mark.skipif(profiler.cuda_works(), reason="refused only where onnxruntime's CUDA provider does not load")
def test_cuda_where_it_does_not_load_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    result = tmp_path / "fresh.json"
    assert (
        bench_fresh.main(["--device", "cuda", "--models", "albert", "--timeout", "0.01", "--result", str(result)]) == 2
    )
    assert capsys.readouterr().err.startswith("bench_fresh: --device cuda: ")
    assert not result.exists()


def test_resume_from_a_file_that_is_no_result_of_this_bench_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    result = tmp_path / "fresh.json"
    result.write_text('{"models": {}}')
    assert bench_fresh.main(["--device", "cpu", "--models", "albert", "--resume", "--result", str(result)]) == 2
    assert capsys.readouterr().err.startswith("bench_fresh: --resume: ")
    assert result.read_text() == '{"models": {}}'


def test_a_step_gets_its_timeout_cut_to_what_is_left_of_the_run_but_is_still_tried() -> None:
    assert bench_fresh.step_time(120.0, None) == 120.0
    assert 50.0 < bench_fresh.step_time(120.0, time.perf_counter() + 60.0) <= 60.0
    assert bench_fresh.step_time(120.0, time.perf_counter() - 10.0) == 1.0


def _earlier(path: Path) -> dict:
    """A result an earlier call wrote: one entry done."""
    record = {"meta": {}, "rows": [{"model": "albert_ts", "skipped": "an earlier call's row"}]}
    path.write_text(json.dumps(record))
    return record


def test_resume_runs_only_the_entries_the_result_lacks_and_records_why_one_was_skipped(tmp_path: Path) -> None:
    result = tmp_path / "fresh.json"
    earlier = _earlier(result)
    argv = ["--device", "cpu", "--models", "albert", "--resume", "--result", str(result), "--timeout", "0.01"]
    assert bench_fresh.main(argv) == 0
    rows = json.loads(result.read_text())["rows"]
    assert [r["model"] for r in rows] == ["albert_ts", "albert_dynamo"]
    assert rows[0] == earlier["rows"][0]
    assert rows[1]["skipped"] == "export: timed out after 0.01 s"


def test_stop_after_starts_no_entry_past_its_time(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    result = tmp_path / "fresh.json"
    earlier = _earlier(result)
    argv = ["--device", "cpu", "--models", "albert,mistral", "--resume", "--result", str(result)]
    assert bench_fresh.main([*argv, "--stop-after", "0", "--timeout", "0.01"]) == 0
    assert json.loads(result.read_text()) == earlier
    assert "--resume runs the rest" in capsys.readouterr().out


def test_the_table_compares_subst_with_the_original_and_the_best_peer_with_and_without_capture() -> None:
    ms = {"original": 2.0, "again": 2.1, "subst": 1.0, "onnxsim": 1.6, "onnxslim": 1.25}
    graph = {"original": 0.5, "subst": 0.4, "onnxslim": 0.45}
    timed = {"model": "gpt_neo_dynamo", "optimize": {"exit": 0, "wall_s": 12.0}, "check_ok": True, "ms": ms}
    rows = [{**timed, "ms_graph": graph}, {"model": "phi_ts", "skipped": "export: aten::diff"}]
    lines = bench_fresh.table(rows)
    cells = lines[1].split()
    assert cells[:5] == ["gpt_neo", "dynamo", "0", "ok", "12.0"]
    subst, peer, over_peer, cg_orig, cg_subst, cg_peer = map(float, cells[5:])
    assert (subst, peer, over_peer) == (2.0, 1.6, 1.25)
    assert (cg_orig, cg_subst, cg_peer) == pytest.approx((4.0, 1.25, 0.5 / 0.45), abs=1e-3)
    assert lines[2].split()[:3] == ["phi", "ts", "skipped:"]
    assert "2 entries: 1 exported, 1 optimized (exit 0), 1 checked ok, 1 timed" in lines
    assert "geomean subst/peer: 1.250x over 1" in lines


def _stand_in(path: Path) -> Path:
    """A tiny model as an exporter writes one: a dynamic batch, a MatMul, a bias and a ReLU."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "stand_in",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 8])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.slow
def test_an_export_is_optimized_cold_by_the_cli_checked_and_timed_beside_the_original(tmp_path: Path) -> None:
    src = _stand_in(tmp_path / "stand_in_ts.onnx")
    args = Namespace(device="cpu", timeout=120.0, rounds=1, cuda_graph=False)
    row = bench_fresh.measure("stand_in_ts", src, corpus.sizes(["batch"]), "", tmp_path, args)
    assert row["optimize"]["exit"] == 0 and row["check_ok"] is True, row
    assert row["report"]["dims"]["costed"] == {"batch": 1} and "certificate" not in row["report"]
    assert {"original", "again", "subst"} <= row["ms"].keys(), row
    assert row["speedup"]["subst"] == row["ms"]["original"] / row["ms"]["subst"]
    assert (tmp_path / "cache" / "subst").is_dir(), "the CLI ran on a cache of its own: a cold run"
    line = bench_fresh.table([{"model": "stand_in_ts", **row}])[1].split()
    assert line[:4] == ["stand_in", "ts", "0", "ok"]
