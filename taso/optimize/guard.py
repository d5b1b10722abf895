"""The end-to-end guard: time the original and the rewrite on the device, and keep the rewrite only where it is
clearly faster. The cost model predicts; this decides: a rewrite must never make the model slower."""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from taso import cost
from taso.execute import check
from taso.ir import Graph, TensorType

GUARD_ROUNDS = 5
"""Rounds the end-to-end guard times original and result in (see `cost.clearly_faster`)."""
GUARD_SESSIONS = 2
"""Sets of sessions the rounds take turns in (`cost.interleaved_timings`): a session's first run can cost seconds
(ShuffleNet-v2 on the H100: the guard took 30 s of its 34 s cold run, most of it in the first runs of its ten
sessions), and with two sets, each opened in another order, a rewrite kept must still have won in both (it wins
all rounds but one)."""
GUARD_MIN_GAIN = 1.01
"""A rewrite predicted to gain less than this is neither timed end to end nor kept: five rounds cannot tell so
little from noise (`cost.clearly_faster` wants nearly every round faster), so the guard would keep the original
after minutes of timing (ResNet-50 on the loaded 2-core CPU: 31 s to turn down a predicted 1.002x)."""
GUARD_BUDGET_S = 0.5
"""Seconds a guard round's warm-up, and its samples, may each take (`taso.profiler.time_models`): 40 samples of
BERT-base and its rewrite took 35 s on the 2-core CPU; a model of milliseconds is timed in fewer."""


def confirm_speedup(
    files: tuple[Path, Path],
    graph: Graph,
    result: Graph,
    model: cost.CostModel,
    progress: Callable[[str, int, int], None],
    inputs: Mapping[str, np.ndarray] | None = None,
) -> dict[str, float | bool]:
    """Time the original and the result (``files``, those the run writes anyway: re-saving them took BERT-base
    4 s) end to end on the device, interleaved, on ``inputs`` (the user's) or on the first draw the original
    runs on, as the check draws (0-or-1 token type ids crashed the timing of a model whose type table has one
    row); the original is to be kept (``kept_original``) unless the result is clearly faster, and the rounds end
    once they have settled the verdict either way (`cost.lost_for_good`, `cost.won_for_good`)."""
    graphs = [fed_at(graph, model.dims), fed_at(result, model.dims)]
    if inputs is None:
        inputs = check.choose_inputs(files[0], graphs[0], seeds=(0,), dims=model.dims or {}).sets[0]
    progress("timing end to end", 0, GUARD_ROUNDS)
    before, after = cost.medians(
        cost.interleaved_timings(
            files,
            graphs,
            model.device,
            rounds=GUARD_ROUNDS,
            progress=lambda done, rounds: progress("timing end to end", done, rounds),
            inputs=inputs,
            budget_s=GUARD_BUDGET_S,
            until=lambda per: cost.lost_for_good(*per) or cost.won_for_good(*per, GUARD_ROUNDS),
            sessions=GUARD_SESSIONS,
        )
    )
    measured = {"before_ms": statistics.median(before), "after_ms": statistics.median(after)}
    return measured if cost.clearly_faster(before, after) else {**measured, "kept_original": True}


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
