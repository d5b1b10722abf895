"""`optimize`: import a model, rewrite it with proved rules, export, check in onnxruntime, then write.

The output file appears only after the check passed: the model is staged in a temp folder beside the target
and moved into place at the end, so a failure of any kind leaves nothing half-written.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from taso import check, cost, onnx_io, pet, profiler, provenance, rulecache, store
from taso.errors import BadInput, CheckFailed
from taso.ir import Graph
from taso.precompute import precompute
from taso.search import apply_everywhere, optimize_graph
from taso.shapefold import fold_shapes

Rewrite = Callable[[Graph], tuple[Graph, dict[str, int]]]
"""A rewrite step: the new graph and how often each rule fired (tests plug in their own)."""

Progress = Callable[[str, int, int], None]
"""Reports long work as it goes: (stage, steps done, steps in all). Profiling the model's units on a GPU and
searching its regions can take minutes; the CLI draws a bar per stage."""
TIME_LIMIT_REACHED = "time limit reached: result may depend on machine speed"
"""What the report says when the search's safety net (`Settings.time_limit`) cut it short."""


@dataclass(frozen=True)
class Settings:
    """How hard to search and what to cost with."""

    alpha: float = 1.05
    budget: int = 100
    """Graphs a region's search expands per pass; `taso.search.PASSES` budgets per form of region in all, shared
    by size: the search is bounded by this work, so its result does not depend on the machine's speed."""
    time_limit: float = 60.0
    """Seconds of search at most, not counting the time spent measuring units the cost cache lacks: a safety
    net that the report flags when it fires (the work bound, ``budget``, ends the search first on the zoo on
    the 2-core machine)."""
    device: str = "auto"
    """auto | cuda | cpu: where unit costs are measured; estimate: analytic costs only, nothing measured."""
    dims: dict[str, int] = field(default_factory=dict)
    """Sizes of symbolic dims for costing (default 1)."""
    costs: str | None = None
    """A reference cost table (`taso.cost.export_reference`): cost with it and measure nothing."""
    pet: bool = False
    """Also try PET mutants of convolutions and matmuls with exact corrections (`taso.pet`)."""
    measure_limit: float = 60.0
    """Seconds spent measuring what the cache lacks: a fresh store's device calibration, the model's own units and
    those the search meets; past it they are estimated (and measured by a later run). A cold GPU cache spends them
    once: the next run is pure search."""
    specs: str | Path = provenance.SPECS_DIR
    """The specs a rule's proof must come from to be applied (`taso.provenance`)."""


@dataclass
class Report:
    """What `optimize` did, for humans (`lines`) and scripts (`as_dict`)."""

    input: str
    output: str
    nodes_before: int
    nodes_after: int
    opaque_nodes: int
    proved_rules: int
    rules_applied: dict[str, int] = field(default_factory=dict)
    check: check.CheckResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    cost: dict[str, object] = field(default_factory=dict)
    """Predicted latency before/after (ms), the device it was measured on, how many units were estimated, and
    whether the device's calibration was (no time to measure it)."""
    search: dict[str, object] = field(default_factory=dict)
    upgrade: dict[str, object] | None = None
    """The opset upgrade import made to the file (`onnx_io.Upgrade`), and whether the check ran against the
    upgraded original because onnxruntime cannot run the file itself."""

    def as_dict(self) -> dict:
        return asdict(self)

    def _cost_lines(self) -> list[str]:
        if not self.cost:
            return []
        before, after = float(self.cost["before_ms"]), float(self.cost["after_ms"])  # type: ignore[arg-type]
        s = self.search
        return [
            f"cost      {before:.4f} -> {after:.4f} ms predicted ({before / after:.3f}x) on {self.cost['device']}"
            + (f", {self.cost['estimated_units']} units estimated" if self.cost["estimated_units"] else "")
            + (", device calibration estimated" if self.cost.get("estimated_calibration") else ""),
            *([f"warning   {self.cost['warning']}"] if self.cost.get("warning") else []),
            f"search    {s['regions']} regions"
            + (f" ({s['replayed']} rewritten as their twin was)" if s.get("replayed") else "")
            + f", {s['expanded']} graphs expanded, {s['candidates']} candidates, "
            f"alpha {s['alpha']}"
            + (
                f"; measured {s['measured_units']} new units in {s['measuring_s']:.1f}s"
                if s.get("measured_units")
                else ""
            ),
            *([f"warning   {TIME_LIMIT_REACHED}"] if s.get("time_limit_reached") else []),
            *self._declined_lines(),
            *self._nearest_lines(before),
            *self._measured_lines(),
        ]

    def _declined_lines(self) -> list[str]:
        """Rewrites a rule matched but that could not be made here, by what stood in the way (`rewrite.Declined`)."""
        declined = sorted((self.search.get("declined") or {}).items(), key=lambda kv: -kv[1])  # type: ignore[union-attr]
        return ["declined  " + "; ".join(f"{why} ({n})" for why, n in declined)] if declined else []

    def _nearest_lines(self, before: float) -> list[str]:
        """Why nothing was applied: the single rewrite that came closest to paying."""
        near = self.search.get("nearest")
        if not near:
            return []
        added = float(near["added_ms"])  # type: ignore[index]
        return [
            f"nearest   {near['rule']}: +{added:.4f} ms predicted ({before / (before + added):.3f}x); "  # type: ignore[index]
            "no rewrite was predicted faster"
        ]

    def _measured_lines(self) -> list[str]:
        m = self.cost.get("measured")
        if not m:
            return []
        verdict = "kept the original: the rewrite was not clearly faster" if m.get("kept_original") else "rewrite kept"  # type: ignore[union-attr]
        return [f"measured  {m['before_ms']:.4f} -> {m['after_ms']:.4f} ms end to end; {verdict}"]  # type: ignore[index]

    def _untrusted_lines(self) -> list[str]:
        """Proved rules not applied because their proof record does not match the specs (`taso.provenance`)."""
        skipped = self.search.get("untrusted_rules") or {}
        return [
            f"skipped   {n} rule(s) marked proved but not applied: {why}; run `subst verify --force`"
            for why, n in sorted(skipped.items())  # type: ignore[union-attr]
        ]

    def _file_nodes(self) -> str:
        """The file's own node count and what its opset upgrade added, before the rewrite's counts."""
        u = self.upgrade
        return (
            f"{u['nodes']} in the file; upgraded opset {u['opset']} -> {u['to']} (+{u['added']} nodes); " if u else ""
        )

    def lines(self) -> list[str]:
        rules = {k: v for k, v in self.rules_applied.items() if not k.startswith(pet.PREFIX)}
        mutants = sorted(k.removeprefix(pet.PREFIX) for k in self.rules_applied if k.startswith(pet.PREFIX))
        applied = ", ".join(f"{k} x{v}" for k, v in sorted(rules.items())) or "none"
        return [
            f"input     {self.input}",
            f"output    {self.output}",
            f"nodes     {self._file_nodes()}{self.nodes_before} -> {self.nodes_after} "
            f"({self.opaque_nodes} passed through untouched)",
            f"rules     {self.proved_rules} proved in store; applied: {applied}",
            *self._untrusted_lines(),
            *([f"pet       {len(mutants)} mutated: " + "; ".join(mutants)] if mutants else []),
            *self._cost_lines(),
            f"check     {self.check.summary() if self.check else 'skipped (--no-check)'}"
            + (
                f"; against the upgrade (onnxruntime runs no opset {u['opset']})"
                if (u := self.upgrade) and u["checked_upgraded"]
                else ""
            ),
            "time      " + ", ".join(f"{k} {v:.2f}s" for k, v in self.seconds.items()),
        ]


COSTS_NOT_CACHED = "costs not cached: store is read-only"
GUARD_ROUNDS = 5
"""Rounds the end-to-end guard times original and result in (see `cost.clearly_faster`)."""


@contextmanager
def _timed(times: dict[str, float], stage: str) -> Iterator[None]:
    """Adds the seconds the block takes to ``times[stage]``: the report's account of where the time went."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[stage] = times.get(stage, 0.0) + time.perf_counter() - t0


def _confirm_speedup(
    graph: Graph, result: Graph, applied: dict[str, int], model: cost.CostModel, folder: Path, progress: Progress
) -> tuple[Graph, dict[str, int], dict[str, float]]:
    """Time original and result end to end on the device, interleaved; keep the original unless the result is
    clearly faster. The cost model predicts, this decides: a rewrite must never make the model slower."""
    with tempfile.TemporaryDirectory(prefix="timing-", dir=folder) as tmp:
        paths = [str(onnx_io.save_model(h, Path(tmp) / f"{i}.onnx")) for i, h in enumerate((graph, result))]
        dims = model.dims or {}
        graphs = [onnx_io.concretize(graph, dims), onnx_io.concretize(result, dims)]
        progress("timing end to end", 0, GUARD_ROUNDS)
        before, after = cost.interleaved_rounds(
            paths,
            graphs,
            model.device,
            rounds=GUARD_ROUNDS,
            progress=lambda done, rounds: progress("timing end to end", done, rounds),
        )
    measured = {"before_ms": statistics.median(before), "after_ms": statistics.median(after)}
    if cost.clearly_faster(before, after):
        return result, applied, measured
    return graph, {}, {**measured, "kept_original": True}


def _rewrite(
    graph: Graph,
    db,  # noqa: ANN001 (sqlite_utils.Database)
    settings: Settings,
    rewrite: Rewrite | None,
    scratch: Path,
    progress: Progress,
    times: dict[str, float],
) -> tuple[Graph, dict[str, int], dict, dict]:
    """The rewritten graph, the rules applied, predicted (and measured) costs, and search facts; ``times`` gets
    the seconds of each stage. Rules are read and indexed before the search's clock starts, and the clock stops
    while the cost model measures units the cache lacks (the model's own first, then the candidates', for up to
    ``measure_limit`` seconds in all), so the time limit is the search's own, not the time a GPU takes to
    measure: with both in one limit, SqueezeNet's search on a cold H100 cache measured 18 new units in 12 s
    and applied none of the eight fire merges that a warm cache finds."""
    if rewrite is not None:
        result, applied = rewrite(graph)
        return result, applied, {}, {}
    with _timed(times, "start-up"):
        progress("reading rules", 0, 1)
        digest = provenance.specs_digest(settings.specs)
        proved, untrusted = provenance.trusted(rulecache.proved_rules(db), digest)
        if not proved:
            return graph, {}, {}, {"untrusted_rules": dict(untrusted)}
        index = rulecache.search_index(db, proved)
        progress("reading rules", 1, 1)
        cache, cached = store.cost_cache(db)
        model = _cost_model(cache, settings, onnx_io.dim_sizes(graph, settings.dims))
        ran, precomputed = precompute(graph)
        shaped, shape_folded = fold_shapes(ran)  # onnxruntime leaves these to the run: a gain, not the baseline
        if shape_folded:  # re-inferred: its inner dims have names of their own, to be sized
            model.dims.update(onnx_io.dim_sizes(shaped, settings.dims))
        folded, everywhere = apply_everywhere(shaped, [r for r in proved if r.always])

    def predicted(h: Graph) -> float:
        return model.graph_cost(h).total_ms

    times["start-up"] -= model.measuring_s  # a fresh store's device calibration is profiling
    times["profiling"] = model.measuring_s
    with _timed(times, "profiling"):
        model.graph_cost(folded, progress=lambda done, units: progress("profiling units", done, units))
    measured, measuring = model.measured, model.measuring_s
    with _timed(times, "search"):
        found = optimize_graph(
            folded,
            index,
            predicted,
            settings.alpha,
            settings.budget,
            settings.time_limit,
            progress=lambda done, regions: progress("searching regions", done, regions),
            context_ops=cost.REGION_CONTEXT,
            mutate=pet.mutations if settings.pet else None,
            clock=lambda: time.perf_counter() - model.measuring_s,
        )
    searched_measuring = model.measuring_s - measuring  # the search's measuring counts as profiling
    times["search"] -= searched_measuring
    times["profiling"] += searched_measuring
    result, applied = found.graph, dict(everywhere + found.applied)
    if precomputed:
        applied["precompute weight-only nodes"] = precomputed
    if shape_folded:
        applied["fold shape arithmetic over static dims"] = shape_folded
    # the input as onnxruntime runs it: it folds weight-only computation at load, so folding it here is no gain
    # (GPT-2's position embedding, Range and Gather on a dynamic dim, was estimated 3x its measured cost folded);
    # the always rules are counted (a BatchNorm folded into its Conv is keyed as onnxruntime runs it, and costs
    # nothing; a Mul folded into a BatchNorm saves its kernel)
    with _timed(times, "profiling"):
        before, after = model.graph_cost(ran), model.graph_cost(result)
    if after.total_ms >= before.total_ms:  # never hand back a graph predicted costlier than the input
        result, applied, after = graph, {}, before
    costs: dict = {  # reported at the host's quick speed; their ratio is unchanged
        "before_ms": model.at_quick_host(before).total_ms,
        "after_ms": model.at_quick_host(after).total_ms,
        "device": model.device.key,
        "estimated_units": after.estimated,
        "estimated_calibration": model.calibration_estimated and model.measure,
        **({"warning": COSTS_NOT_CACHED} if model.measure and not cached else {}),
    }
    if model.measure and result is not graph:
        with _timed(times, "timing end to end"):
            result, applied, costs["measured"] = _confirm_speedup(graph, result, applied, model, scratch, progress)
    search_facts = {
        "regions": found.regions,
        "replayed": found.replayed,
        "expanded": found.expanded,
        "candidates": found.candidates,
        "declined": dict(found.declined),
        "alpha": settings.alpha,
        "seconds": found.seconds,
        "time_limit_reached": found.timed_out,
        "measured_units": model.measured - measured,
        "measuring_s": searched_measuring,
        "nearest": None,
        "untrusted_rules": dict(untrusted),
    }
    if found.nearest is not None and found.cost_after >= found.cost_before:  # at the quick host, like the costs
        search_facts["nearest"] = {"rule": found.nearest[1], "added_ms": found.nearest[0] * model.host_scale()}
    return result, applied, costs, search_facts


def _quiet(stage: str, done: int, total: int) -> None:
    """The library shows no progress unless asked."""


def _cost_model(db, settings: Settings, dims: dict[str, int]) -> cost.CostModel:  # noqa: ANN001 (sqlite_utils.Database)
    """The cost model ``settings`` ask for, costing symbolic dims at ``dims``."""
    if settings.costs is not None:
        model = cost.reference_model(settings.costs)
        model.dims = dims
        return model
    if settings.device == "estimate":
        return cost.CostModel(profiler.pick_device("cpu"), db, measure=False, dims=dims)
    return cost.CostModel(profiler.pick_device(settings.device), db, dims=dims, measure_limit=settings.measure_limit)


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
) -> Report:
    """Optimize ``src`` into ``dst``; raises `BadInput` (nothing read or written) or `CheckFailed`. The check
    judges the result against a float64 reference of the original, or element-wise at ``rtol``/``atol`` where
    either is given (`check.compare`)."""
    src, dst = Path(src), Path(dst)
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
    times: dict[str, float] = {}
    start = time.perf_counter()
    with staging as tmp:
        with _timed(times, "import"):
            db = store.open_store(store_path)
            graph, upgrade = onnx_io.import_model(src)
            onnx_io.check_dims(graph, settings.dims)
        tell = progress or _quiet
        result, applied, costs, search_facts = _rewrite(graph, db, settings, rewrite, Path(tmp), tell, times)
        report = Report(
            str(src),
            str(dst),
            len(graph.nodes),
            len(result.nodes),
            sum(n.is_opaque for n in result.nodes),
            store.proved_rule_count(db),
            applied,
            cost=costs,
            search=search_facts,
        )
        original = Path(src)
        if upgrade is not None:  # onnxruntime cannot run an opset-6 file: its upgrade is checked against instead
            report.upgrade = {**asdict(upgrade), "checked_upgraded": upgrade.opset < onnx_io.ORT_MIN_OPSET}
            if report.upgrade["checked_upgraded"] and run_check:
                original = onnx_io.save_model(graph, Path(tmp) / f"upgraded-{dst.name}")
        with _timed(times, "export"):
            staged = onnx_io.save_model(result, Path(tmp) / dst.name)
        if run_check:
            tell("checking", 0, 1)
            with _timed(times, "check"):
                report.check = check.compare(original, staged, graph, rtol=rtol, atol=atol, seeds=(seed, seed + 1))
            tell("checking", 1, 1)
            if not report.check.ok:
                report.seconds = {**times, "total": time.perf_counter() - start}
                raise CheckFailed(
                    f"rewritten model differs from the original: {report.check.summary()}; nothing written", report
                )
        onnx_io.move_model(staged, dst)
    report.seconds = {**times, "total": time.perf_counter() - start}
    return report
