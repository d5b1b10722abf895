"""Whole models timed end to end: rounds in another order each time, and the guard's verdict on them."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from taso import onnx as onnx_io
from taso.cost import latency
from taso.cost.latency import clearly_faster, interleaved_timings, lost_for_good, medians
from taso.ir import Graph, parse_graph

from .graphs import with_weights


def three_matmuls():
    """A model slow enough to tell apart from a Relu in any round."""
    return with_weights(
        """graph(%x: float32[256,256], %w: float32[256,256] weight):
          %a = MatMul(%x, %w) : float32[256,256]
          %b = MatMul(%a, %w) : float32[256,256]
          %y = MatMul(%b, %w) : float32[256,256]
          return %y"""
    )


def _opening(monkeypatch) -> list[str]:
    """The model each set of sessions `interleaved_timings` opens is opened first with, in turn."""
    opened_first: list[str] = []

    def recording(models, *args, **kwargs):
        opened_first.append(models[0][0])
        return opening(models, *args, **kwargs)

    opening = latency.open_sessions
    monkeypatch.setattr(latency, "open_sessions", recording)
    return opened_first


def test_each_round_opens_the_sessions_in_another_order(tmp_path: Path, cpu, monkeypatch) -> None:
    small = parse_graph("graph(%x: float32[1,8]):\n  %y = Relu(%x) : float32[1,8]\n  return %y")
    large = three_matmuls()
    graphs = [small, large, small]
    paths = [onnx_io.save_model(g, tmp_path / f"{i}.onnx") for i, g in enumerate(graphs)]
    opened_first = _opening(monkeypatch)
    heard: list[tuple[int, int]] = []
    per = medians(interleaved_timings(paths, graphs, cpu, rounds=3, progress=lambda *a: heard.append(a)))
    assert sorted(opened_first) == sorted(map(str, paths))  # every model opened first once
    assert all(s < m > t for s, m, t in zip(*per))  # and every round's times land on their own model
    assert heard == [(1, 3), (2, 3), (3, 3)]  # a round of a large model takes seconds: each one is told


def test_rounds_take_turns_among_the_sets_of_sessions_they_are_given(tmp_path: Path, cpu, monkeypatch) -> None:
    """With ``sessions``, three rounds of two models open two sets, each with another model first (the third
    round takes the first set again), and every round's times still land on their own model."""
    small = parse_graph("graph(%x: float32[1,8]):\n  %y = Relu(%x) : float32[1,8]\n  return %y")
    graphs = [small, three_matmuls()]
    paths = [onnx_io.save_model(g, tmp_path / f"{i}.onnx") for i, g in enumerate(graphs)]
    opened_first = _opening(monkeypatch)
    per = medians(interleaved_timings(paths, graphs, cpu, rounds=3, sessions=2))
    assert opened_first == list(map(str, paths))
    assert len(per[0]) == len(per[1]) == 3 and all(s < m for s, m in zip(*per))


rounds = st.lists(st.floats(0.1, 10.0), min_size=3, max_size=7)


@given(rounds, st.data())
def test_clearly_faster_is_one_sided_monotone_and_wants_nearly_every_round(
    before: list[float], data: st.DataObject
) -> None:
    after = data.draw(st.lists(st.floats(0.1, 10.0), min_size=len(before), max_size=len(before)))
    verdict = clearly_faster(before, after)
    assert not (verdict and clearly_faster(after, before))  # never both ways
    if sum(a >= b for b, a in zip(before, after)) >= 2:
        assert not verdict  # two rounds lost: noise, not a gain
    if verdict:  # a result faster still, in any round, stays clearly faster
        k = data.draw(st.integers(0, len(after) - 1))
        assert clearly_faster(before, [a * 0.5 if i == k else a for i, a in enumerate(after)])
    assert clearly_faster(before, [b * 0.9 for b in before])  # faster in every round
    assert not clearly_faster(before, list(before))  # the same times are not a gain


@given(rounds, st.data())
def test_rounds_lost_for_good_are_refused_whatever_the_rest_say(before: list[float], data: st.DataObject) -> None:
    """The guard stops once `lost_for_good` holds of the rounds so far: no later round could make it keep the
    rewrite."""
    after = data.draw(st.lists(st.floats(0.1, 10.0), min_size=len(before), max_size=len(before)))
    k = data.draw(st.integers(1, len(before)))
    if lost_for_good(before[:k], after[:k]):
        assert not clearly_faster(before, after)
        assert not clearly_faster(before, after[:k] + [0.01] * (len(before) - k))  # even if the rest win big


def _guarded(tmp_path: Path, cpu, original: Graph, result: Graph) -> tuple[dict, list[tuple[int, int]]]:
    """What the guard measured of ``result`` against ``original`` on the CPU, and what its progress bar heard."""
    from taso.cost import CostModel
    from taso.optimize import guard

    files = (onnx_io.save_model(original, tmp_path / "a.onnx"), onnx_io.save_model(result, tmp_path / "b.onnx"))
    heard: list[tuple[int, int]] = []
    model = CostModel(cpu, None, measure=False)
    measured = guard.confirm_speedup(files, original, result, model, lambda _, *a: heard.append(a))
    return measured, heard


RELU = "graph(%x: float32[256,256]):\n  %y = Relu(%x) : float32[256,256]\n  return %y"


def test_a_rewrite_that_wins_is_timed_in_every_round(tmp_path: Path, cpu) -> None:
    """A result far faster than the original is kept only after all rounds: each can widen the noise band the
    original's two sessions show (`taso.optimize.guard.judge`), so no round is skipped."""
    from taso.optimize.guard import GUARD_ROUNDS as ROUNDS

    measured, heard = _guarded(tmp_path, cpu, three_matmuls(), parse_graph(RELU))
    assert "kept_original" not in measured and measured["after_ms"] < measured["before_ms"]
    assert heard == [(0, ROUNDS), *((k, ROUNDS) for k in range(1, ROUNDS + 1))]


def test_the_guard_stops_timing_once_the_rewrite_has_lost_for_good(tmp_path: Path, cpu) -> None:
    """A result far slower than the original loses the first two rounds: the three left are not run (and the
    progress bar is told the stage is done)."""
    from taso.optimize.guard import GUARD_ROUNDS as ROUNDS

    measured, heard = _guarded(tmp_path, cpu, parse_graph(RELU), three_matmuls())
    assert measured["kept_original"] and measured["after_ms"] > measured["before_ms"]
    assert heard == [(0, ROUNDS), (1, ROUNDS), (ROUNDS, ROUNDS)]
