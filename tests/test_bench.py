"""bench/README.md's current table is what bench/current.py makes of the result files, and every result file is in
the dated layout and says how it was made (bench/layout.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(ROOT / "bench"))

import current  # noqa: E402
import layout  # noqa: E402

NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})/[a-z0-9]+-[a-z0-9]+(-[a-z0-9-]+)?\.json$")
ZOO = "2026-11-24/optimize-h100-zoo.json"


def _readme() -> str:
    return current.README.read_text()


def _row(table: str, metric: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {metric} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of bench/results/ to edit by hand."""
    return Path(shutil.copytree(layout.RESULTS, tmp_path / "results"))


def test_readme_table_is_what_the_result_files_give() -> None:
    text = _readme()
    assert current.BEGIN in text and current.END in text
    assert current.splice(text, current.render()) == text, "stale table: run python bench/current.py"


def test_every_file_the_table_reads_exists_and_says_how_it_was_made() -> None:
    assert current.files(), "the table reads no file"
    for name in current.files():
        path = layout.RESULTS / name
        assert path.is_file(), name
        meta = json.loads(path.read_text())["meta"]
        assert {"date", "machine", "device", "commit", "command"} <= meta.keys(), name
        assert meta["date"][:10] == name.split("/")[0], f"{name}: measured {meta['date']}, filed elsewhere"


def test_every_result_file_is_in_the_dated_layout() -> None:
    names = [p.relative_to(layout.RESULTS).as_posix() for p in layout.RESULTS.rglob("*") if p.is_file()]
    assert names
    for name in names:
        assert NAME.match(name), f"{name}: not results/YYYY-MM-DD/<bench>-<device>[-<what>].json"
        assert json.loads((layout.RESULTS / name).read_text())["meta"]["date"][:10] == NAME.match(name).group(1)


def test_bench_holds_no_result_outside_the_dated_layout() -> None:
    """A result dropped beside the scripts (the old results-*.json, or a diary) is one current.py never reads."""
    loose = [p.name for p in (ROOT / "bench").iterdir() if p.is_file() and p.suffix not in (".py", ".sh")]
    assert sorted(loose) == ["CORPUS.md", "README.md"], (
        "results go to bench/results/YYYY-MM-DD/, configs to bench/configs/"
    )


def test_a_hand_edit_of_a_result_file_stales_the_table(results: Path) -> None:
    """Even an edit that moves no figure (here: whitespace) shows, through the digest of the files read."""
    path = results / ZOO
    path.write_text(path.read_text() + "\n")
    assert current.render(results) != current.render()


def test_a_hand_edit_of_the_readme_table_is_caught() -> None:
    """A target not met, marked met by hand (whichever row is the first not met), is written back as it was."""
    text = _readme()
    row = next(line for line in text.splitlines() if line.startswith("| ") and "| **no** |" in line)
    edited = text.replace(row, row.replace("| **no** |", "| yes |"))
    assert edited != text
    assert current.splice(edited, current.render()) != edited


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(factor=st.floats(min_value=0.8, max_value=1.5))
def test_met_says_whether_the_value_reaches_its_target(results: Path, factor: float) -> None:
    """Every zoo model measured `factor` times faster: the geomean is `factor`, met exactly when >= 1.15x."""
    path = results / ZOO
    data = json.loads(path.read_text())
    for row in data["rows"]:
        row["speedup"]["subst"] = factor
    path.write_text(json.dumps(data))
    cells = _row(current.render(results), "optimize: geomean speed-up, 16 static zoo models (subst)")
    assert cells[2] == f"{factor:.3f}x over 16"
    assert cells[4] == ("yes" if factor >= 1.15 else "**no**")


def test_a_metric_no_run_measured_says_so() -> None:
    unmeasured = [m for m in current.METRICS if m.file is None]
    table = current.render()
    for m in unmeasured:
        assert _row(table, m.name)[2] == current.NOT_MEASURED


@pytest.mark.parametrize(
    ("device", "slug"),
    [
        ("CUDAExecutionProvider|NVIDIA H100 80GB HBM3|580.159.04|ort-1.31.1", "h100"),
        ("CUDAExecutionProvider|NVIDIA H200|580.159.04|ort-1.31.1", "h200"),
        ("CPUExecutionProvider|AMD EPYC 7B13 x2|-|ort-1.31.1", "cpu"),
        ("cpu", "cpu"),
    ],
)
def test_new_results_are_named_in_the_dated_layout(device: str, slug: str) -> None:
    path = layout.result_path("optimize", device, "zoo")
    assert path.parent.parent == layout.RESULTS
    assert NAME.match(path.relative_to(layout.RESULTS).as_posix())
    assert path.name == f"optimize-{slug}-zoo.json"


def test_write_leaves_a_whole_file_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "2026-01-01" / "x-cpu.json"
    layout.write(path, {"meta": layout.meta(), "rows": [1]})
    assert json.loads(path.read_text())["rows"] == [1]
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError):
        layout.write(path, loop)
    assert json.loads(path.read_text())["rows"] == [1]
    assert [p.name for p in path.parent.iterdir()] == ["x-cpu.json"]


def test_a_bench_writes_its_result_into_the_dated_layout_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_generate at one op (a real `subst generate` process), with no --result: today's folder, with meta."""
    import bench_generate

    monkeypatch.setattr(layout, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench_generate.py", "--max-ops", "1", "--workers", "1"])
    bench_generate.main()
    (path,) = tmp_path.rglob("*.json")
    assert NAME.match(path.relative_to(tmp_path).as_posix())
    assert path.name == "generate-cpu-1ops.json"
    record = json.loads(path.read_text())
    assert record["meta"]["date"][:10] == path.parent.name
    assert "--max-ops 1" in record["meta"]["command"]
    assert record["rows"][0]["settings"]["max_ops"] == 1


def _corpus_row(model: str, again: float, device: float, unchanged: tuple[str, ...] = ()) -> dict:
    return {"model": model, "speedup": {"again": again, "subst_device": device}, "unchanged": list(unchanged)}


def test_an_unchanged_output_widens_the_noise_band_and_a_changed_one_below_it_counts() -> None:
    """The original kept by the guard, timed below every "again", is a draw of the band, not a model made
    slower; a rewritten output below that widened band still counts."""
    slow = current._corpus_slow("subst_device")
    kept = _corpus_row("kept", 0.99, 0.90, ("subst_device",))
    assert slow({"rows": [kept, _corpus_row("rewritten", 0.98, 1.20)]})[0] == 0
    assert slow({"rows": [kept, _corpus_row("rewritten", 0.98, 0.89)]})[0] == 1
    assert slow({"rows": [{**kept, "unchanged": []}, _corpus_row("rewritten", 0.98, 1.20)]})[0] == 1


def test_a_variant_subst_cannot_read_is_not_the_original(tmp_path: Path) -> None:
    """onnxruntime's transformers optimizer writes contrib ops into the default domain: subst refuses such a
    file, and the corpus bench must go on with it marked changed, not stop (as a lease's first try did)."""
    sys.path[:0] = [str(ROOT / "models")]
    import bench_corpus

    original = ROOT / "models" / "bert_tiny.onnx"
    copy = tmp_path / "copy.onnx"
    shutil.copy(original, copy)
    unreadable = tmp_path / "contrib.onnx"
    unreadable.write_bytes(b"not an onnx model")
    variants = {"original": original, "again": original, "subst": copy, "ort_transformers": unreadable}
    assert bench_corpus._unchanged(variants) == ["subst"]


def test_the_capture_table_compares_subst_and_the_best_peer_with_the_original_under_capture() -> None:
    """Issue 49's table: capture alone over the original, subst + graph (made under capture where it was) and the
    best peer + graph over the original + graph; a model the original of which was not captured has no row."""
    sys.path[:0] = [str(ROOT / "models")]
    import bench_corpus

    rows = [
        {"model": "a", "ms": {"original": 2.0, "subst": 1.6}, "ms_graph": {"original": 1.0, "subst": 0.9}},
        {"model": "b", "ms": {"original": 4.0, "subst": 4.0}, "ms_graph": {"original": 2.0, "subst_graph": 1.6}},
        {"model": "c", "ms": {"original": 1.0, "subst": 1.0}, "ms_graph": {"onnxsim": 0.5}},
    ]
    rows[1]["ms_graph"] |= {"onnxsim": 1.9, "onnxslim": 1.8, "subst": 2.2}
    lines = bench_corpus.graph_table(rows)
    assert [line.split()[0] for line in lines[1:3]] == ["a", "b"] and lines[2].endswith("subst_graph")
    assert "geomean capture alone: 2.000x over 2 models" in lines
    assert f"geomean subst+cg over orig+cg: {(1 / 0.9 * 2 / 1.6) ** 0.5:.3f}x over 2 models" in lines
    assert f"geomean peer+cg over orig+cg: {2 / 1.8:.3f}x over 1 models" in lines


def test_a_cold_run_cut_at_the_deadline_is_left_for_resume(tmp_path: Path) -> None:
    """bench_cold --cut-at (bench/h200-table.sh's 10-minute device calls): a run still going then is stopped and
    nothing of it recorded or exported, so that --resume in the next call runs it again rather than keep a
    timed-out row."""
    result, costs = tmp_path / "cold.json", tmp_path / "costs"
    args = ["--device", "cpu", "--cold-only", "--no-prior", "--models", "squeezenet1_1_ts", "--cut-at", "0.5"]
    r = subprocess.run(
        [sys.executable, ROOT / "bench" / "bench_cold.py", *args, "--result", result, "--export-costs", costs],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "squeezenet1_1_ts not recorded" in r.stdout
    assert not result.exists() and not list(tmp_path.glob("costs/*"))


def test_a_prediction_off_by_more_than_a_tenth_is_flagged(tmp_path: Path) -> None:
    """Issue 49's predictions that hold: each subst output's predicted speed-up (the regression's cost ratio, the
    report of the device's run, 1 where its guard kept the original) beside the measured one, with and without
    capture; a model off by more than 10 % is flagged."""
    sys.path[:0] = [str(ROOT / "models")]
    import bench_corpus

    report = tmp_path / "m.report.json"
    report.write_text(json.dumps({"cost": {"before_ms": 2.0, "after_ms": 1.6, "measured": {"kept_original": True}}}))
    assert bench_corpus._predicted(report) == 1.0  # the output is the original: nothing predicted for it
    report.write_text(json.dumps({"cost": {"before_ms": 2.0, "after_ms": 1.6, "measured": {}}}))
    assert bench_corpus._predicted(report) == 1.25
    row = {
        "model": "m",
        "predicted": {"subst": 1.25, "subst_device": 1.25, "subst_graph": 1.1},
        "ms": {"original": 2.0, "subst": 1.6, "subst_device": 1.9},
        "ms_graph": {"original": 1.0, "subst_graph": 0.9},
    }
    row["prediction"] = bench_corpus.predictions(row)
    assert row["prediction"]["subst_device"]["off"] == pytest.approx(2.0 / 1.9 / 1.25 - 1)
    assert row["prediction"]["subst_graph"]["measured"] == pytest.approx(1 / 0.9)  # timed under capture
    lines = bench_corpus.prediction_table([row, {"model": "untimed"}])
    assert lines[1].split() == ["m", "1.250/1.250", "1.250/1.053!", "1.100/1.111"]
    assert "predictions of subst_device within 10%: 0 of 1" in lines and len(lines) == 5


def test_corpus_models_are_costed_and_timed_at_the_dims_given() -> None:
    """bench_corpus / bench_cold --dim batch=8: each model at the sizes given for the dims it has, the corpus's
    (batch 1, sequences of 16) for the rest; a malformed --dim is refused (exit 2) before any work."""
    import bench_cold

    assert bench_cold.sizes("bert_ts", "batch=8") == {"batch": 8, "seq": 16}
    assert bench_cold.sizes("resnet50_ts", "batch=8,seq=128") == {"batch": 8}
    assert bench_cold.sizes("bert_ts", "") == {"batch": 1, "seq": 16}
    assert all(bench_cold.GIVEN.fullmatch(g) for g in ("", "batch=8", "batch=8,seq=128"))
    assert not any(bench_cold.GIVEN.fullmatch(g) for g in ("batch", "batch=0", "batch=x", "batch=8,"))


def test_a_profiled_cold_run_says_where_its_measuring_went(tmp_path: Path) -> None:
    """bench_cold --profile: the cProfile stats of a measurement split into its sessions, warm-up, samples and
    fusion check (issue 49: where a unit's 0.3 s on the H200 goes), each a part of the whole measurement."""
    import cProfile

    import bench_cold

    from taso.cost import measure, profiler
    from taso.ir import parse_graph

    stats = tmp_path / "run.prof"
    unit = parse_graph(
        "graph(%x: float32[4,72]):\n  %r = Relu(%x) : float32[4,72]\n  %y = Sigmoid(%r) : float32[4,72]\n  return %y"
    )
    cProfile.runctx(
        "measure.measure_marginal(g, cpu, 0.01)",
        globals(),
        {"measure": measure, "g": unit, "cpu": profiler.pick_device("cpu")},
        str(stats),
    )
    split = bench_cold.measuring_split(stats)
    assert split.keys() == {*bench_cold.MEASURING, "units_timing"}
    parts = ("sessions", "warm_up", "samples", "fusion_check", "units_timing")
    assert all(0 < split[p] <= split["measure_marginals"] for p in parts), split
    assert split["store_writes"] == 0  # no store here


def test_onnxruntime_runs_every_node_whatever_a_run_fetches() -> None:
    """bench_fetches: a run fetching one of two branches' outputs runs both on the CPU provider (onnxruntime
    1.32), which is why units measured together each have sessions of their own (issue 49). Should this fail,
    onnxruntime has learnt to run only what a fetch needs, and units could share one session."""
    import bench_fetches

    ran = bench_fetches.kernels_run(bench_fetches.two_branches(32), "CPUExecutionProvider", "ORT_ENABLE_ALL", False)
    assert ran["Relu"] == 2 * bench_fetches.DEPTH  # two runs, each the fetched branch's
    assert ran["Sigmoid"] == 2 * bench_fetches.DEPTH  # and the other's


def test_a_gated_session_runs_only_the_branch_whose_gate_is_on() -> None:
    """bench_fetches' other way to share a session: units each inside an If on a condition of its own; a run with
    one gate on computes that unit (as its session alone does) and nothing of the others."""
    import bench_fetches
    import numpy as np
    import onnxruntime as ort

    alone, gates = bench_fetches.gated(8)
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    sess = ort.InferenceSession(gates, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.array(i.name == "cg0") if i.type == "tensor(bool)" else x for i in sess.get_inputs()}
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    mine = ort.InferenceSession(alone, providers=["CPUExecutionProvider"]).run(None, {"xa": x})[0]
    np.testing.assert_allclose(out["og0"], mine, rtol=1e-5)  # branch a's weights, drawn alike in both
    assert all(v.size == 0 for k, v in out.items() if k != "og0")
