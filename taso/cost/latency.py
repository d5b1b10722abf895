"""Whole models timed end to end: their latency, and rounds of several models side by side that the speedup
guard compares (`clearly_faster`) before a rewrite is kept.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from taso.cost.profiler import DEFAULT_MODE, Device, Mode, Session, Timing, open_sessions, time_model, time_sessions
from taso.execute import check
from taso.ir import Graph


def model_latency(path: str, g: Graph, device: Device, samples: int = 50, mode: Mode = DEFAULT_MODE) -> Timing:
    """Measured end-to-end latency of a whole model file, for comparing with `graph_cost`; its reference run
    tells how quick the host was meanwhile."""
    return time_model(path, check.random_inputs(g, seed=0), device, warmup=20, samples=samples, mode=mode)


def interleaved_timings(
    paths: Sequence[str | os.PathLike],
    graphs: Sequence[Graph],
    device: Device,
    rounds: int = 3,
    mode: Mode = DEFAULT_MODE,
    progress: Callable[[int, int], None] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    budget_s: float | None = None,
    until: Callable[[list[list[float]]], bool] | None = None,
    sessions: int | None = None,
    modes: Sequence[Mode] | None = None,
) -> list[list[Timing]]:
    """Each model's timing in every one of ``rounds`` rounds: each round times a session of every model side
    by side (`taso.profiler.time_sessions`, its warm-up and its samples within ``budget_s`` each where one is
    given), so round k of two models is a pair. Each round opens fresh sessions, or, with ``sessions``, takes
    its turn among that many sets of them, each opened once: a session's first run can take seconds
    (ShuffleNet-v2 on the H100: 2.7-4.2 s, against 1.6 ms a run after it), paid again in every round.
    Each set opens the sessions in another order: opened first in every round, a model measured 1-2 %
    slower than a second session of itself in all 14 zoo models (H100, bench_optimize.py). ``progress``
    hears (rounds done, rounds) after each round: a round of a large model takes seconds. ``inputs`` are the
    user's (``--check-inputs``): a model that runs only on meaningful values is timed on them, not drawn ones.
    ``until`` ends the rounds early once it holds of the medians so far (each model's, per round): where they
    settle a verdict already (`lost_for_good`), the rounds left could not change it. ``modes``, where given, set
    each model's session up (`open_sessions`): under CUDA graph capture where it can be captured, else not."""
    runs = [(str(p), inputs if inputs is not None else check.random_inputs(g, seed=0)) for p, g in zip(paths, graphs)]
    per: list[list[Timing]] = [[] for _ in paths]
    opened: dict[int, list[Session]] = {}
    for r in range(rounds):
        turn = r if sessions is None else r % sessions
        first = turn % len(runs)
        if turn not in opened:
            if sessions is None:  # a fresh set each round: the last one can go
                opened.clear()
            own = None if modes is None else [*modes[first:], *modes[:first]]
            opened[turn] = open_sessions(runs[first:] + runs[:first], device, mode, own)
        timed = time_sessions(opened[turn], device, warmup=20, samples=40, mode=mode, budget_s=budget_s)
        for i, t in enumerate(timed):
            per[(first + i) % len(runs)].append(t)
        done = r + 1 if until is None or not until(medians(per)) else rounds
        if progress is not None:
            progress(done, rounds)
        if done == rounds:
            break
    return per


def medians(timings: Sequence[Sequence[Timing]]) -> list[list[float]]:
    """Each model's median latency in every round of `interleaved_timings`: what the guard compares."""
    return [[t.median_ms for t in ts] for ts in timings]


def interleaved_latency(
    paths: Sequence[str | os.PathLike],
    graphs: Sequence[Graph],
    device: Device,
    rounds: int = 3,
    mode: Mode = DEFAULT_MODE,
) -> list[float]:
    """Each model's median latency over the rounds of `interleaved_timings`."""
    return [statistics.median(v) for v in medians(interleaved_timings(paths, graphs, device, rounds, mode))]


def clearly_faster(before: Sequence[float], after: Sequence[float]) -> bool:
    """Whether ``after`` beats ``before`` beyond the noise between rounds: faster in median and in all but at
    most one of the paired rounds. Sessions of one unchanged model measured up to 2x apart on a shared H100
    (bench_noise.py), so a median of a few rounds alone keeps a slower rewrite about every other time."""
    wins = sum(a < b for b, a in zip(before, after))
    return statistics.median(after) < statistics.median(before) and wins >= len(before) - 1


def lost_for_good(before: Sequence[float], after: Sequence[float]) -> bool:
    """Whether the rounds so far refuse ``after`` whatever the rounds still to come: `clearly_faster` wants
    all rounds but one won, and two are lost (ResNet-50 on the loaded 2-core CPU: three more rounds, 14 s, to
    refuse a rewrite that had lost the first two)."""
    return sum(a >= b for b, a in zip(before, after)) >= 2
