"""`optimize`: a model through a list of passes, from its ONNX file to its checked, rewritten copy.

Each pass (`Pass`) is a function from the run so far (`Run`) to the next: it reads what earlier passes made and
adds its part to the one result, the `Report`. `PASSES` lists them in order: import; the rewrites that need no
cost (`taso.optimize.rewrites`: weight-only nodes precomputed, shape arithmetic folded, repeated operations merged,
idle operations dropped, chains of axis moves composed, the ``always`` rules); the cost model and the search it guides (rules, PET mutants); the end-to-end
guard; export, check, write. `optimize` runs the list, timing each pass into the report and showing its progress.

The output file appears only after the check passed: the model is staged in a temp folder beside the target
and moved into place at the end, so a failure of any kind leaves nothing half-written.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from taso import cost, pet
from taso import onnx as onnx_io
from taso.cachedir import cost_cache
from taso.cost import profiler
from taso.cost import tables as costtables
from taso.errors import BadInput, CheckFailed
from taso.execute import check, feeds
from taso.ir import Graph
from taso.optimize import capture, certify, guard
from taso.optimize.annotate import annotated
from taso.optimize.report import Progress, Report, named, quiet, split_passes
from taso.optimize.rewrites import (
    apply_always,
    compose_axis_moves,
    drop_idle_operations,
    fold_shape_arithmetic,
    merge_duplicate_operations,
    precompute_weights,
    read_rules,
    ruled,
)
from taso.optimize.run import Checking, Pass, Run, Settings
from taso.rules import store
from taso.search import optimize_graph, searched_parts

Rewrite = Callable[[Graph], tuple[Graph, dict[str, int]]]
"""A rewrite step: the new graph and how often each rule fired (tests plug in their own)."""
COSTS_NOT_CACHED = "costs not cached"
"""The start of the warning that costs measured now are dropped at exit (`taso.cachedir.cost_cache` says why)."""


# --- reading the model ---------------------------------------------------------------------------------------


def load(run: Run) -> Run:
    """The store, the model, its dims and the check's given inputs, read and validated before any work."""
    db = store.open_store(run.store_path, read_only=True)  # costs go to the user's cache, never a store
    graph, upgrade = onnx_io.import_model(run.src)
    onnx_io.check_dims(graph, run.settings.dims)
    given = _given_inputs(graph, run.settings, run.checking.run)
    # onnxruntime cannot run an opset-6 file: its upgrade is checked against instead; the guard times the
    # upgrade whatever the opset, as the rewrite starts from it
    checked_upgraded = upgrade is not None and upgrade.opset < onnx_io.ORT_MIN_OPSET
    run = replace(run, db=db, imported=graph, graph=graph, given=given)
    costed = {d: run.settings.dims.get(d, 1) for d in onnx_io.input_dims(graph)}
    return run.reporting(
        dims={"costed": costed} if costed else {},
        nodes_before=len(graph.nodes),
        proved_rules=store.proved_rule_count(db),
        upgrade=None if upgrade is None else {**asdict(upgrade), "checked_upgraded": checked_upgraded},
    )


def save_upgrade(run: Run) -> Run:
    """The upgraded model saved beside the output, to run where the file cannot be."""
    return replace(run, upgraded=onnx_io.save_model(run.imported, run.staging / f"upgraded-{run.dst.name}"))


def choose_inputs(run: Run) -> Run:
    """The check's inputs: draws the original runs on (or the user's), chosen before the search."""
    seed = run.checking.seed
    dims = run.settings.dims  # the user's sizes, so a check at --dim batch=8 runs at batch 8
    chosen = check.choose_inputs(run.original, run.imported, (seed, seed + 1), dims, given=run.given)
    checked = feeds.bound_dims(run.imported, chosen.sets[0])
    return replace(run, inputs=chosen).reporting(
        dims={**run.report.dims, "checked": checked} if checked else run.report.dims
    )


def _given_inputs(graph: Graph, settings: Settings, run_check: bool) -> list[feeds.Sample]:
    """The check's given input sets, read and validated before any work: a bad file costs no search."""
    if not settings.check_inputs:
        return []
    if not run_check:
        raise BadInput("--check-inputs: the check is off (--no-check); give one or the other")
    return feeds.given(settings.check_inputs, graph, settings.dims)


# --- costs, and the search they guide ------------------------------------------------------------------------


def prepare_cost_model(run: Run) -> Run:
    """The cost model the settings ask for (calibrating a device the cache does not know)."""
    cache, uncached = cost_cache()
    model = _cost_model(cache, run.settings, {**onnx_io.dim_sizes(run.imported, run.settings.dims), **run.folded_dims})
    warning = {"warning": f"{COSTS_NOT_CACHED}: {uncached}"} if model.measure and uncached else {}
    return replace(run, model=model).reporting(cost=warning)


def _cost_model(db, settings: Settings, dims: dict[str, int]) -> cost.CostModel:  # noqa: ANN001 (sqlite_utils.Database)
    """The cost model ``settings`` ask for, costing symbolic dims at ``dims``."""
    if settings.costs is not None:
        model = cost.reference_model(settings.costs)
        model.dims = dims
        return model
    if settings.device == "estimate":  # not the cache's costs either: what they are depends on the machine
        return cost.CostModel(profiler.pick_device("cpu"), None, measure=False, dims=dims)
    device = profiler.pick_device(settings.device)
    mode = profiler.Mode(cuda_graph=settings.cuda_graph)  # filed apart: a cost captured is not one launched
    prior = costtables.prior_for(device, mode) if settings.prior else None
    return cost.CostModel(device, db, dims=dims, prior=prior, measure_limit=settings.measure_limit, mode=mode)


def profile(run: Run) -> Run:
    """The model's own units measured (up to ``measure_limit`` seconds), before the search's clock starts; those
    no rewrite touches only estimated (`cost.CostModel.untouched`), unless every unit is to be (`Settings.prior`)."""
    model = run.model
    if run.settings.prior and model.measure:  # a table or estimates measure nothing anyway
        parts = searched_parts(run.graph, run.index, cost.REGION_CONTEXT)
        model.unmeasured = model.untouched(run.graph, {o for p in parts for n in p for o in n.outputs})
    model.graph_cost(run.graph, progress=lambda done, units: run.tell("measuring units", done, units))
    untouched = sum(model.memo[k][1] for k in model.unmeasured if k in model.memo)  # estimated, not known
    facts = {"profiled_units": model.measured, "untouched_units": untouched}
    return replace(run, measured_units=model.measured).reporting(cost={**run.report.cost, **facts})


def search(run: Run) -> Run:
    """The search, region by region, with the proved rules (and PET's mutants where asked for); its clock stops
    while the cost model measures units the cache lacks, so the time limit is the search's own, not the time a
    GPU takes to measure: with both in one limit, SqueezeNet's search on a cold H100 cache measured 18 new units
    in 12 s and applied none of the eight fire merges that a warm cache finds. The units new to the cost model
    are measured an expansion's candidates at a time (`cost.CostModel.prefetch`)."""
    model, settings = run.model, run.settings
    measuring = model.measuring_s
    found = optimize_graph(
        run.graph,
        run.index,
        lambda h: model.graph_cost(h).total_ms,
        settings.alpha,
        settings.budget,
        settings.time_limit,
        progress=lambda done, regions: run.tell("searching regions", done, regions),
        context_ops=cost.REGION_CONTEXT,
        mutate=pet.mutations if settings.pet else None,
        clock=lambda: time.perf_counter() - model.measuring_s,
        prefetch=model.prefetch,
    )
    facts = {
        "regions": found.regions,
        "replayed": found.replayed,
        "expanded": found.expanded,
        "candidates": found.candidates,
        "declined": dict(found.declined),
        "declined_at": dict(found.declined_at),
        "alpha": settings.alpha,
        "seconds": found.seconds,
        "time_limit_reached": found.timed_out,
        "measured_units": model.measured - run.measured_units,
        "measuring_s": model.measuring_s - measuring,
        "nearest": None,
        **run.report.search,
    }
    if found.nearest is not None and found.cost_after >= found.cost_before:  # at the quick host, like the costs
        facts["nearest"] = {"rule": found.nearest[1], "added_ms": found.nearest[0] * model.host_scale()}
    return ruled(run, certify.SEARCH, found.graph, found.applied).reporting(search=facts)


def predict(run: Run) -> Run:
    """Predicted costs before and after; the result is handed back only if predicted faster, by enough for the
    guard to confirm where costs are measured. The ``always`` rules are counted (a BatchNorm folded into its Conv
    is keyed as onnxruntime runs it, and costs nothing; a Mul folded into a BatchNorm saves its kernel)."""
    model = run.model
    before, after = model.graph_cost(run.baseline), model.graph_cost(run.graph)
    gain = before.total_ms / after.total_ms
    untimed = gain if model.measure and 1.0 < gain < guard.GUARD_MIN_GAIN else None  # timing it only costs time
    rules, passes = split_passes(run.applied, run.proved)
    rejected = None
    if gain <= 1.0 or untimed is not None:  # never hand back a graph predicted costlier, nor one the guard can't clear
        if run.graph != run.baseline:
            why = "predicted no faster" if untimed is None else f"a predicted gain below {guard.GUARD_MIN_GAIN}x"
            at = model.at_quick_host(after).total_ms
            rejected = {"rules": named(rules, run.proved), "passes": passes, "after_ms": at, "why": why}
        run, after, rules, passes = replace(run, graph=run.imported, applied=Counter(), steps=()), before, {}, {}
    costs: dict = {  # reported at the host's quick speed; their ratio is unchanged
        "before_ms": model.at_quick_host(before).total_ms,
        "after_ms": model.at_quick_host(after).total_ms,
        "device": model.device.key,
        "estimated_units": after.estimated,
        "estimated_calibration": model.calibration_estimated and model.measure,
        **model.prior_facts(),
        **run.report.cost,
        **({"untimed_gain": untimed} if untimed is not None else {}),
    }
    guarded = model if model.measure and run.graph is not run.imported else None
    return replace(run, guarded=guarded).reporting(
        cost=costs, rules_applied=named(rules, run.proved), passes_applied=passes, rejected=rejected
    )


def rewrite_with(rewrite: Rewrite) -> Pass:
    """A pass that rewrites with ``rewrite`` alone, no rules and no costs: what a test plugs in."""

    def given(run: Run) -> Run:
        result, applied = rewrite(run.graph)
        return ruled(run, "rewrite as given", result, Counter(applied)).reporting(rules_applied=named(applied, ()))

    return Pass("rewrite as given", given, None)


# --- the guard, export, check, write -------------------------------------------------------------------------


def export(run: Run) -> Run:
    """The result saved into the staging folder, and counted into the report. subst's own graph is written with
    its value types (`annotated`); a model handed back as it came (no step: nothing applied, or the guard kept
    the original) is written as it came: types alone change what onnxruntime fuses, and nothing times them then."""
    graph = annotated(run.graph) if run.steps else run.graph
    staged = onnx_io.save_model(graph, run.staging / run.dst.name)
    return replace(run, staged=staged).reporting(
        nodes_after=len(run.graph.nodes),
        opaque_nodes=sum(n.is_opaque for n in run.graph.nodes),
        certificate=certify.certificate(run.imported, run.graph, run.steps, run.declined, run.settings.dims),
    )


def recall_verdict(run: Run) -> Run:
    """The guard's verdict on this pair of models from an earlier run, where there is one and the settings do
    not ask to time it again (``refresh``); where it kept the original, the original is what the run exports,
    once (exporting the rewrite too took BERT-base 2 s)."""
    if run.settings.refresh:
        return run
    measured = run.guarded.verdict(guard.verdict_key(run.imported, run.graph, run.guarded.dims))
    if measured is None:
        return run
    run = run.reporting(cost={**run.report.cost, "measured": {**measured, "cached": True}})
    return _discarded(run) if measured.get("kept_original") else run


def time_end_to_end(run: Run) -> Run:
    """Original and result timed end to end on the device (`guard.confirm_speedup`), the verdict kept with what
    it was measured on (replacing any earlier one: ``refresh`` re-times)."""
    if run.report.upgrade is not None and run.upgraded is None:
        run = save_upgrade(run)
    run = capture.timed_on(run)
    given = run.inputs.sets[0] if run.inputs is not None and run.inputs.given else None
    files, captured = (run.original, run.staged), capture.captured(run)
    measured = guard.confirm_speedup(
        files, run.imported, run.graph, run.guarded, run.tell, given, captured, drawn=run.timed_on
    )
    run.guarded.record_verdict(guard.verdict_key(run.imported, run.graph, run.guarded.dims), measured)
    return run.reporting(cost={**run.report.cost, "measured": measured})


def keep_original(run: Run) -> Run:
    """The original exported in the result's place: the guard found the result not faster beyond the noise."""
    return export(_discarded(run))


def _discarded(run: Run) -> Run:
    """The run with its rewrites undone, named in the report as rejected: the original is its result."""
    r = run.report
    rejected = {
        "rules": r.rules_applied,
        "passes": r.passes_applied,
        "after_ms": r.cost["after_ms"],
        "why": "not clearly faster timed end to end",
    }
    return replace(run, graph=run.imported, applied=Counter(), steps=()).reporting(
        rules_applied={}, passes_applied={}, rejected=rejected
    )


def check_result(run: Run) -> Run:
    """The staged result run in onnxruntime and compared with the original (`check.compare`)."""
    c = run.checking
    result = check.compare(run.original, run.staged, run.imported, rtol=c.rtol, atol=c.atol, inputs=run.inputs)
    return run.reporting(check=result)


def write(run: Run) -> Run:
    """The staged result moved to the output path; refused (nothing written) where the check failed."""
    if run.report.check is not None and not run.report.check.ok:
        raise CheckFailed(
            f"rewritten model differs from the original: {run.report.check.summary()}; nothing written", run.report
        )
    onnx_io.move_model(run.staged, run.dst)
    if run.certificate is not None:
        certify.write(run.certificate, run.report.certificate)
    return run


def _checks_upgrade(run: Run) -> bool:
    """Whether the check runs the upgrade: onnxruntime cannot run the file's own opset."""
    return bool(run.report.upgrade and run.report.upgrade["checked_upgraded"])


def _has_rules(run: Run) -> bool:
    return run.index is not None


def _guarded(run: Run) -> bool:
    return run.guarded is not None


def _untimed(run: Run) -> bool:
    return run.guarded is not None and "measured" not in run.report.cost


def _kept_original(run: Run) -> bool:
    """Whether the guard kept the original over the staged rewrite (a recalled verdict staged the original)."""
    return bool(run.report.cost.get("measured", {}).get("kept_original")) and run.graph is not run.imported


READ = (
    Pass("import", load, "import", shows="importing"),
    Pass("save the upgrade the check runs", save_upgrade, None, when=lambda r: r.checking.run and _checks_upgrade(r)),
    Pass("choose the check's inputs", choose_inputs, "check", when=lambda r: r.checking.run),
)
REWRITE = (
    Pass("read the rules", read_rules, "start-up", shows="reading rules"),
    Pass("precompute weight-only nodes", precompute_weights, "start-up", when=_has_rules),
    Pass("fold shape arithmetic", fold_shape_arithmetic, "start-up", when=_has_rules),
    Pass("merge repeated operations", merge_duplicate_operations, "start-up", when=_has_rules),
    Pass("drop idle operations", drop_idle_operations, "start-up", when=_has_rules),
    Pass("compose chains of axis moves", compose_axis_moves, "start-up", when=_has_rules),
    Pass("apply the always rules", apply_always, "start-up", when=_has_rules),
)
SEARCH = (
    Pass("prepare the cost model", prepare_cost_model, "start-up", shows="preparing the cost model", when=_has_rules),
    Pass("measure the model's units", profile, "profiling", when=_has_rules),
    Pass("search", search, "search", when=_has_rules),
    Pass("predict the gain", predict, "profiling", when=_has_rules),
)
FINISH = (
    Pass("recall the guard's verdict", recall_verdict, None, when=_guarded),
    Pass("export", export, "export", shows="exporting"),
    Pass("check CUDA graph capture", capture.check_capture, "cuda graph", when=capture.asked),
    Pass("time end to end", time_end_to_end, "timing end to end", when=_untimed),
    Pass("keep the original", keep_original, "export", when=_kept_original),
    Pass("time the output captured", capture.what_capture_gives, "cuda graph", when=capture.on_gpu),
    Pass("check", check_result, "check", shows="checking", when=lambda r: r.inputs is not None),
    Pass("write", write, None),
)
PASSES = (*READ, *REWRITE, *SEARCH, *FINISH)
"""The passes of `optimize`, in order: reading the model, the rewrites that need no cost, the cost model and the
search it guides, then the guard, export, check and write."""


def _step(p: Pass, run: Run) -> Run:
    """``run`` after ``p``, its seconds added to the report: to its clock, but for the seconds the cost model
    spent measuring units, which count as profiling (a fresh store's device calibration, the units the search
    meets)."""
    measuring = run.model.measuring_s if run.model is not None else 0.0
    t0 = time.perf_counter()
    if p.shows:
        run.tell(p.shows, 0, 1)
    run = p.run(run)
    if p.shows:
        run.tell(p.shows, 1, 1)
    elapsed = time.perf_counter() - t0
    seconds = dict(run.report.seconds)
    measured = run.model.measuring_s - measuring if run.model is not None else 0.0
    if p.clock is not None:
        seconds[p.clock] = seconds.get(p.clock, 0.0) + elapsed - measured
    if run.model is not None:
        seconds["profiling"] = seconds.get("profiling", 0.0) + measured
    return run.reporting(seconds=seconds)


def optimize(
    src: str | Path,
    dst: str | Path,
    store_path: str | Path = store.DEFAULT_PATH,
    run_check: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    rewrite: Rewrite | None = None,
    settings: Settings = Settings(),
    progress: Progress | None = None,
    certificate: str | Path | None = None,
) -> Report:
    """Optimize ``src`` into ``dst`` by running `PASSES` (with ``rewrite`` in place of the rules and costs where
    given); raises `BadInput` (nothing read or written) or `CheckFailed`. The check judges the result against a
    float64 reference of the original, or element-wise at ``rtol``/``atol`` where either is given
    (`check.compare`). With ``certificate``, the certificate of the rewrite's steps (`Report.certificate`) is
    written there too, for `subst certify`."""
    src, dst = Path(src), Path(dst)
    capture.refuse(settings)
    if certificate is not None:
        certify.refuse_unwritable(Path(certificate), (src, dst))
    if dst.resolve() == src.resolve():
        raise BadInput(f"{dst}: output would overwrite the input; choose another path")
    if not dst.parent.exists():
        raise BadInput(f"{dst}: folder {dst.parent} does not exist")
    if not dst.parent.is_dir():
        raise BadInput(f"{dst}: {dst.parent} is not a folder")
    if dst.is_dir():
        raise BadInput(f"{dst}: is a folder; the output would replace it")
    try:  # staged beside the output first: an unwritable folder fails before any work, and nothing is left
        staging = tempfile.TemporaryDirectory(prefix=".subst-", dir=dst.parent)
    except OSError as e:
        raise BadInput(f"{dst}: cannot write to {dst.parent} ({e.strerror})") from None
    passes = PASSES if rewrite is None else (*READ, rewrite_with(rewrite), *FINISH)
    start = time.perf_counter()
    with staging as tmp:
        run = Run(
            src,
            dst,
            Path(store_path),
            settings,
            Checking(run_check, rtol, atol, seed),
            Path(tmp),
            progress or quiet,
            Report(str(src), str(dst), 0, 0, 0, 0),
            certificate=None if certificate is None else Path(certificate),
        )
        try:
            for p in passes:
                if p.when(run):
                    run = _step(p, run)
        except CheckFailed as e:
            e.report.seconds = {**e.report.seconds, "total": time.perf_counter() - start}
            raise
    run.report.seconds = {**run.report.seconds, "total": time.perf_counter() - start}
    return run.report
