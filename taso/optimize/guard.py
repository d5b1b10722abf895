"""The end-to-end guard: time the original and the rewrite on the device, and keep the rewrite only where it is
faster beyond the noise of the timing itself. The cost model predicts; this decides: a rewrite must never make
the model slower.

The noise is measured, not assumed: the original is timed against itself (a second session of the same file,
interleaved with the other two), and the widest gap between its two sessions in any round is the band a
difference must clear (`judge`). Two runs of one model at once on the loaded 2-core machine chose differently
when a rewrite had only to win the rounds: 0.50 -> 0.38 ms read as "not clearly faster" in one of them.
"""

from __future__ import annotations

import hashlib
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from taso import cost
from taso.execute import check
from taso.ir import Graph, TensorType

GUARD_ROUNDS = 5
"""Rounds the end-to-end guard times the original, the original again and the result in (see `judge`)."""
GUARD_SESSIONS = 2
"""Sets of sessions the rounds take turns in (`cost.interleaved_timings`): a session's first run can cost seconds
(ShuffleNet-v2 on the H100: the guard took 30 s of its 34 s cold run, most of it in the first runs of its ten
sessions), and with two sets, each opened in another order, a rewrite kept must still have won in both (it wins
all rounds but one). Each set has three sessions: the original, the original again (the noise) and the result."""
NOISE_FLOOR = 0.02
"""The narrowest band a verdict is taken at (2 %): five rounds of the original against itself can come out
closer than the rounds of two models ever are."""
GUARD_MIN_GAIN = 1 + NOISE_FLOOR
"""A rewrite predicted to gain less than this is neither timed end to end nor kept: `judge` keeps no rewrite
within `NOISE_FLOOR`, so the guard would keep the original after minutes of timing (ResNet-50 on the loaded
2-core CPU: 31 s to turn down a predicted 1.002x)."""
GUARD_BUDGET_S = 0.5
"""Seconds a guard round's warm-up, and its samples, may each take (`taso.profiler.time_models`): 40 samples of
BERT-base and its rewrite took 35 s on the 2-core CPU; a model of milliseconds is timed in fewer."""


FASTER = "faster beyond the noise"
SLOWER = "slower beyond the noise"
WITHIN = "within the noise"


def judge(before: Sequence[float], itself: Sequence[float], after: Sequence[float]) -> dict[str, float | str]:
    """The verdict on per-round medians of the original (``before``), the original timed again beside it
    (``itself``) and the rewrite (``after``): the noise is the widest ratio between the original's two sessions
    in a round (at least `NOISE_FLOOR`); the rewrite is `FASTER` where its median ratio to the original clears
    that band and it won all rounds but one (`cost.clearly_faster`), `SLOWER` where the ratio clears it the other way, else `WITHIN`."""
    noise = max(NOISE_FLOOR, *(max(s / b, b / s) - 1 for b, s in zip(before, itself)))
    ratio = statistics.median(a / b for b, a in zip(before, after))
    if ratio * (1 + noise) < 1 and cost.clearly_faster(before, after):
        verdict = FASTER
    elif ratio > 1 + noise:
        verdict = SLOWER
    else:
        verdict = WITHIN
    return {"ratio": ratio, "noise": noise, "verdict": verdict}


def confirm_speedup(
    files: tuple[Path, Path],
    graph: Graph,
    result: Graph,
    model: cost.CostModel,
    progress: Callable[[str, int, int], None],
    inputs: Mapping[str, np.ndarray] | None = None,
    captured: tuple[bool, bool] = (False, False),
    drawn: Mapping[str, np.ndarray] | None = None,
) -> dict[str, object]:
    """Time the original, the original again and the result (``files``, those the run writes anyway: re-saving
    them took BERT-base 4 s) end to end on the device, interleaved, on ``inputs`` (the user's) or on the first
    draw the original runs on, as the check draws (0-or-1 token type ids crashed the timing of a model whose
    type table has one row), and judge them (`judge`): the original is to be kept (``kept_original``) unless
    the result is faster beyond the noise. The rounds end early once the rewrite has lost two (`cost.lost_for_good`:
    it can no longer be `FASTER`); all are taken otherwise, as every round narrows or widens the band.
    ``captured`` says whether the original and the result each run under CUDA graph capture (where the cost
    model times so, `taso.optimize.capture`): one that cannot be captured is timed as it runs, without, so a
    rewrite that makes a model capturable is credited with what capture gives it. ``drawn``: that first draw,
    where the run drew it already (`taso.optimize.capture.timed_on`)."""
    graphs = [fed_at(graph, model.dims), fed_at(graph, model.dims), fed_at(result, model.dims)]
    given = inputs is not None
    if inputs is None:
        inputs = (
            drawn
            if drawn is not None
            else check.choose_inputs(files[0], graphs[0], seeds=(0,), dims=model.dims or {}).sets[0]
        )
    progress("timing end to end", 0, GUARD_ROUNDS)
    before, itself, after = cost.medians(
        cost.interleaved_timings(
            (files[0], files[0], files[1]),
            graphs,
            model.device,
            rounds=GUARD_ROUNDS,
            mode=model.mode,
            progress=lambda done, rounds: progress("timing end to end", done, rounds),
            inputs=inputs,
            budget_s=GUARD_BUDGET_S,
            until=lambda per: cost.lost_for_good(per[0], per[2]),
            sessions=GUARD_SESSIONS,
            modes=[replace(model.mode, cuda_graph=c) for c in (captured[0], *captured)],
        )
    )
    judged = judge(before, itself, after)
    measured: dict[str, object] = {
        "before_ms": statistics.median(before),
        "after_ms": statistics.median(after),
        "itself_ms": statistics.median(itself),
        **judged,
        "rounds": len(before),
        "measured_on": measured_on(model, not given),
        **({"captured": list(captured)} if model.mode.cuda_graph else {}),
    }
    return measured if judged["verdict"] == FASTER else {**measured, "kept_original": True}


def measured_on(model: cost.CostModel, drawn: bool) -> dict[str, object]:
    """What a verdict was measured on, kept with it: the device as the cost cache files it (provider, device
    name, driver, onnxruntime), the sizes and inputs fed, and how busy the host was (its load average over
    the last minute, against its core count): a verdict from a loaded machine can be told from a quiet one's."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "device": model.key,
        "dims": dict(sorted((model.dims or {}).items())),
        "inputs": "drawn" if drawn else "given",
        "load": load,
        "cores": os.cpu_count(),
    }


def verdict_key(graph: Graph, result: Graph, dims: dict[str, int]) -> str:
    """What an end-to-end verdict is kept under: the structure of both models (`cost.graph_digest`: ops,
    attributes, types and small constants, not learned weights, which do not move a latency) and the dims."""
    text = f"{cost.graph_digest(graph)}:{cost.graph_digest(result)}:{sorted(dims.items())}"
    return hashlib.sha256(text.encode()).hexdigest()


def fed_at(g: Graph, dims: dict[str, int]) -> Graph:
    """``g`` with its inputs' symbolic dims at ``dims`` (1 where not named), as `onnx_io.concretize` fixes them:
    the inputs' types are all the feeds are drawn from, and re-inferring every shape took BERT-base 2 s."""
    types = dict(g.types)
    for i in g.inputs:
        t = g.types.get(i)
        if t is not None and t.shape is not None:
            shape = tuple(d if isinstance(d, int) else dims.get(d, 1) if isinstance(d, str) else 1 for d in t.shape)
            types[i] = TensorType(t.dtype, shape)
    return replace(g, types=types)
