"""CUDA graphs: what prevents capture is read from onnxruntime's own placement of the nodes, costs timed under
capture are filed apart from those timed without, and the report says what capture gives or what prevents it.
On the CPU every node is placed off the CUDA provider: that is what these checks see here (the GPU path is run by
bench/bench_capture.py on an H200, and by the tests here that need a GPU)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from taso import onnx as onnx_io
from taso.cost import capture, profiler
from taso.cost.model import CostModel
from taso.cost.profiler import DEFAULT_MODE
from taso.errors import BadInput
from taso.execute import check
from taso.ir import parse_graph
from taso.optimize import capture as passes
from taso.optimize import pipeline
from taso.optimize.report import Report, quiet
from taso.optimize.run import Checking, Run, Settings
from taso.rules import store

TWO_OPS = """graph(%x: float32[batch,8]):
  %r = Relu(%x) : float32[batch,8]
  %y = Tanh(%r) : float32[batch,8]
  return %y"""


def test_blockers_name_each_node_onnxruntime_placed_off_the_cuda_provider(tmp_path: Path, cpu) -> None:
    g = parse_graph(TWO_OPS)
    path = str(onnx_io.save_model(g, tmp_path / "m.onnx"))
    feeds = {"x": np.ones((2, 8), np.float32)}
    placed = capture.placement(path, feeds, cpu)
    assert sorted(op for _, op, _ in placed) == ["Relu", "Tanh"]  # as onnxruntime ran them, by its node names
    found = capture.blockers(path, g, feeds, cpu, {"batch": 2})
    assert len(found) == 2 and all(b.endswith("on CPUExecutionProvider") for b in found)
    assert any("(Relu)" in b for b in found) and any("(Tanh)" in b for b in found)
    open_dims = capture.blockers(path, g, feeds, cpu, {})  # a captured graph replays one shape
    assert "x: shape float32[batch,8] not fixed by the dims" in open_dims
    assert "y: shape float32[batch,8] not fixed by the dims" in open_dims


def test_a_session_that_replays_no_captured_graph_is_not_taken_for_captured(tmp_path: Path, cpu) -> None:
    """onnxruntime may turn capture off itself and run as without, saying so only in its log: whether it
    captures is read from whether its runs replay a graph (its profile shows no run of its own then). A CPU
    session never replays, the case seen here; on a GPU a capturable model replays."""
    path = str(onnx_io.save_model(parse_graph(TWO_OPS), tmp_path / "m.onnx"))
    feeds = {"x": np.ones((2, 8), np.float32)}
    assert not capture.replays(path, feeds, cpu)
    assert capture._refusal(path, feeds, cpu) == (capture.NOT_REPLAYED, None)  # no session to time as captured
    assert capture.probe(path, parse_graph(TWO_OPS), feeds, cpu, {"batch": 2})[1] is None


def test_costs_timed_under_capture_are_filed_apart(tmp_path: Path) -> None:
    db = store.create(tmp_path / "s.db")
    captured = pipeline._cost_model(db, Settings(device="cpu", cuda_graph=True, measure_limit=0), {})
    plain = pipeline._cost_model(db, Settings(device="cpu", measure_limit=0), {})
    assert captured.mode.cuda_graph and not plain.mode.cuda_graph
    assert captured.key != plain.key and captured.key.startswith(plain.key)  # verdicts are filed by key too
    assert isinstance(captured, CostModel) and captured.prior is None  # a table timed without is never read


def _report(**facts: object) -> Report:
    r = Report("in.onnx", "out.onnx", 2, 2, 0, 1)
    search = {"regions": 1, "expanded": 1, "candidates": 1, "alpha": 1.05}
    r.cost, r.search = {"before_ms": 1.0, "after_ms": 1.0, "device": "d", "estimated_units": 0, **facts}, search
    return r


def test_the_report_says_what_capture_gives_or_what_prevents_it() -> None:
    gives = {"requested": False, "original": [], "output": [], "capturable": True, "without_ms": 2.0, "with_ms": 1.0}
    line = [x for x in _report(cuda_graph=gives).lines() if x.startswith("cuda graph")]
    assert line == [
        "cuda graph the output runs in 2.0000 ms, 1.0000 ms captured as a CUDA graph (2.00x): --cuda-graph costs "
        "and guards the rewrite under capture"
    ]
    blocked = [f"n{i} (Shape) on CPUExecutionProvider" for i in range(7)]
    facts = {"requested": True, "original": blocked, "output": blocked, "capturable": False}
    (line,) = [x for x in _report(cuda_graph=facts).lines() if x.startswith("cuda graph")]
    assert line.startswith("cuda graph the output cannot be captured at these dims, timed without it: n0 (Shape)")
    assert line.endswith("n4 (Shape) on CPUExecutionProvider and 2 more")
    facts = {"requested": True, "original": [], "output": [], "capturable": True}
    assert any(x.startswith("cuda graph the output is captured") for x in _report(cuda_graph=facts).lines())


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_capture_asked_for_off_the_gpu_is_refused_before_any_work(tmp_path: Path, device: str) -> None:
    src = onnx_io.save_model(parse_graph(TWO_OPS), tmp_path / "m.onnx")
    store.create(tmp_path / "s.db")
    with pytest.raises(BadInput, match=passes.NEEDS_CUDA):
        pipeline.optimize(
            src, tmp_path / "o.onnx", tmp_path / "s.db", settings=Settings(device=device, cuda_graph=True)
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "s.db"]


def _run(tmp_path: Path, cpu, cuda_graph: bool, text: str = TWO_OPS) -> Run:  # noqa: ANN001 (profiler.Device)
    """A run of ``text`` at its guard, its rewrite (Tanh made Sigmoid: any other graph) staged, measured on ``cpu``."""
    g = parse_graph(text)
    src = onnx_io.save_model(g, tmp_path / "m.onnx")
    rewrite = parse_graph(text.replace("Tanh", "Sigmoid"))
    staged = onnx_io.save_model(rewrite, tmp_path / "staged.onnx")
    settings = Settings(device="cpu", cuda_graph=cuda_graph)
    model = CostModel(cpu, None, measure=False, dims={"batch": 1})
    report = Report(str(src), "o.onnx", 2, 2, 0, 1)
    return Run(src, tmp_path / "o.onnx", tmp_path / "s.db", settings, Checking(), tmp_path, quiet, report,
               imported=g, graph=rewrite, model=model, staged=staged)  # fmt: skip


def test_capture_facts_reach_the_guard_and_the_report_for_the_output_written(tmp_path: Path, cpu) -> None:
    asked = passes.check_capture(_run(tmp_path, cpu, cuda_graph=True))
    facts = asked.report.cost["cuda_graph"]
    assert facts["requested"] and len(facts["original"]) == 2 and any("(Sigmoid)" in b for b in facts["rewrite"])
    assert passes.captured(asked) == (False, False)  # on the CPU nothing is captured: both timed as they run
    kept = passes.what_capture_gives(replace(asked, graph=asked.imported))  # the guard kept the original
    assert kept.report.cost["cuda_graph"]["output"] == facts["original"]
    plain = passes.what_capture_gives(_run(tmp_path, cpu, cuda_graph=False)).report.cost["cuda_graph"]
    assert not plain["requested"] and not plain["capturable"] and "with_ms" not in plain
    assert any("(Sigmoid)" in b for b in plain["output"])


class _Counted(ort.InferenceSession):
    """onnxruntime's session, counted by the provider it runs on: what a pass opens on a GPU is what it costs
    there (seconds each, cuDNN's algorithm search included)."""

    opened: list[str] = []

    def __init__(self, *args: object, providers: list, **kwargs: object) -> None:
        first = providers[0]
        type(self).opened.append(first if isinstance(first, str) else first[0])
        super().__init__(*args, providers=providers, **kwargs)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[_Counted]:
    """Sessions opened from here on, by provider (`_Counted`); the reference runs a timing keeps from call to call
    are opened first, so they are not counted."""
    for device in {profiler.pick_device("cpu"), profiler.pick_device("auto")}:
        profiler._reference_runner(device, DEFAULT_MODE)
    monkeypatch.setattr(ort, "InferenceSession", _Counted)
    monkeypatch.setattr(_Counted, "opened", [])
    return _Counted


def test_the_session_the_replay_check_ran_is_timed_without_opening_another(tmp_path: Path, cpu, counted) -> None:
    path = str(onnx_io.save_model(parse_graph(TWO_OPS), tmp_path / "m.onnx"))
    _, sessions = capture.replaying(path, {"x": np.ones((2, 8), np.float32)}, cpu)
    timings = profiler.time_sessions(sessions, cpu, warmup=2, samples=3)
    assert len(timings) == 2 and all(t.median_ms > 0 and len(t.values) == 3 for t in timings)
    assert counted.opened == [profiler.CPU]  # its profiling ended: later runs are timed as any session's


LAUNCH_BOUND = (
    "graph(%x: float32[batch,8]):\n  %r0 = Relu(%x) : float32[batch,8]\n"
    + "".join(f"  %r{i} = Relu(%r{i - 1}) : float32[batch,8]\n" for i in range(1, 48))
    + "  %y = Tanh(%r47) : float32[batch,8]\n  return %y"
)
"""48 tiny kernels: launching them takes many times a captured graph's replay."""


@pytest.mark.skipif(not profiler.cuda_works(), reason="capture replays only on a GPU (run on the H200)")
def test_what_capture_gives_is_timed_in_the_session_the_replay_check_opened(tmp_path: Path, counted) -> None:
    """On a GPU: the replay check's session is timed with and without capture side by side, its runs without
    launching each kernel (`capture.SKIP`): had they replayed too, a launch-bound model would time alike. One
    session besides the CPU's that drew the inputs."""
    gpu = profiler.pick_device("cuda")
    run = replace(
        _run(tmp_path, gpu, False, LAUNCH_BOUND), model=CostModel(gpu, None, measure=False, dims={"batch": 2})
    )
    facts = passes.what_capture_gives(run).report.cost["cuda_graph"]
    assert facts["capturable"] and facts["without_ms"] > 1.2 * facts["with_ms"] > 0
    assert [p for p in counted.opened if p == profiler.CUDA] == [profiler.CUDA]  # three before


def test_the_inputs_timed_on_are_drawn_once_for_every_pass_that_times(
    tmp_path: Path, cpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each draw opens a CPU session of the original and runs it: the capture check, the guard and the capture
    estimate time on the first pass's draw."""
    drawn: list[int] = []
    choose = check.choose_inputs
    monkeypatch.setattr(check, "choose_inputs", lambda *a, **k: drawn.append(1) or choose(*a, **k))
    asked = passes.check_capture(_run(tmp_path, cpu, cuda_graph=True))
    assert len(drawn) == 1 and set(asked.timed_on) == {"x"} and asked.timed_on["x"].shape == (1, 8)
    passes.what_capture_gives(replace(asked, report=replace(asked.report, cost={})))
    assert len(drawn) == 1
