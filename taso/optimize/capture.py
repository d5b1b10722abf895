"""CUDA graphs in an `optimize` run on a GPU. At batch 1 a GPU run is bound by the host launching its kernels, and
capturing the run as a CUDA graph is the standard remedy (on an H200 it made 19 real exports 1.50-3.09x faster,
more than subst's rewrites gave them): a deployment that captures must be costed and guarded as it runs, and one
that does not should know the lever exists.

With `Settings.cuda_graph` the cost model times units under capture and the guard times the original and the
result each under capture where it can be captured (`check_capture`); without it, the output is timed once more,
with and without capture in the one session that found it replays, and the report says what capture would give
(`what_capture_gives`). Either way the report says whether
the output can be captured at the costed dims, or what prevents it (`taso.cost.capture.blockers`).
"""

from __future__ import annotations

from dataclasses import replace

from taso.cost import capture, profiler
from taso.errors import BadInput
from taso.execute import check
from taso.optimize import guard
from taso.optimize.run import Run, Settings

NEEDS_CUDA = "--cuda-graph: CUDA graphs need --device cuda"


def refuse(settings: Settings) -> None:
    """`BadInput` where capture is asked for but nothing would be timed on a GPU: another device (auto falls back
    to the CPU), or a cost table, which measures nothing."""
    if settings.cuda_graph and settings.device != "cuda":
        raise BadInput(NEEDS_CUDA)
    if settings.cuda_graph and settings.costs is not None:
        raise BadInput("--cuda-graph: a cost table (--costs) measures nothing; CUDA graphs need measured costs")


def on_gpu(run: Run) -> bool:
    """Whether the run measures on a GPU: only there is capture a question."""
    return run.model is not None and run.model.measure and run.model.device.is_cuda


def timed_on(run: Run) -> Run:
    """The run with the inputs the guard and these passes time on (`Run.timed_on`): the user's, else the first
    draw the original runs on at the costed dims, drawn here where no pass drew them yet."""
    if run.timed_on is not None:
        return run
    if run.inputs is not None and run.inputs.given:
        return replace(run, timed_on=dict(run.inputs.sets[0]))
    dims = run.model.dims
    drawn = check.choose_inputs(run.original, guard.fed_at(run.imported, dims), (0,), dims).sets[0]
    return replace(run, timed_on=dict(drawn))


def check_capture(run: Run) -> Run:
    """Asked to capture: what prevents capturing the original and, where the run staged a rewrite, the rewrite, at
    the costed dims (an empty list: nothing), in the report's ``cost`` as ``cuda_graph``, for the guard to time
    each as it runs (`captured`)."""
    run = timed_on(run)
    model, feeds = run.model, run.timed_on
    facts: dict[str, object] = {
        "requested": True,
        "original": capture.blockers(str(run.original), run.imported, feeds, model.device, model.dims),
    }
    if run.graph is not run.imported:
        facts["rewrite"] = capture.blockers(str(run.staged), run.graph, feeds, model.device, model.dims)
    return run.reporting(cost={**run.report.cost, "cuda_graph": facts})


def asked(run: Run) -> bool:
    """Whether the run measures on a GPU and was asked to capture."""
    return on_gpu(run) and run.settings.cuda_graph


def captured(run: Run) -> tuple[bool, bool]:
    """Whether the guard times the original and the rewrite under capture: each where the run asks for capture
    and it can be captured."""
    facts = run.report.cost.get("cuda_graph") or {}
    return not facts.get("original", [None]), not facts.get("rewrite", [None])


def what_capture_gives(run: Run) -> Run:
    """What prevents capturing the output the run writes (`check_capture`'s, where it ran) and, where the run was
    not asked to capture and nothing does, the output timed side by side without and with capture, so a user
    knows the lever exists: in the session that replayed it under capture (`taso.cost.capture.probe`), its runs
    without capture and its replays in turn. One session in all, where three were opened before (ghostnet_100 on
    the H200: 10.3 s)."""
    model = run.model
    facts = dict(run.report.cost.get("cuda_graph") or {"requested": False})
    if facts["requested"]:
        facts["output"] = facts["original"] if run.graph is run.imported else facts["rewrite"]
        return run.reporting(cost={**run.report.cost, "cuda_graph": {**facts, "capturable": not facts["output"]}})
    run = timed_on(run)
    blocked, sessions = capture.probe(str(run.staged), run.graph, run.timed_on, model.device, model.dims)
    facts["output"], facts["capturable"] = blocked, not blocked
    if sessions is not None:
        plain, graph = profiler.time_sessions(sessions, model.device, budget_s=guard.GUARD_BUDGET_S)
        facts["without_ms"], facts["with_ms"] = plain.median_ms, graph.median_ms
    return run.reporting(cost={**run.report.cost, "cuda_graph": facts})
