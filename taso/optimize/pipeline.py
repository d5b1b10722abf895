"""`optimize`: import a model, rewrite it with proved rules, export, check in onnxruntime, then write.

The output file appears only after the check passed: the model is staged in a temp folder beside the target
and moved into place at the end, so a failure of any kind leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from taso import cost, pet
from taso.cachedir import cost_cache
from taso.cost import profiler
from taso.cost import tables as costtables
from taso.errors import BadInput, CheckFailed
from taso.execute import check, feeds
from taso.execute.precompute import precompute
from taso.ir import Graph, TensorType
from taso.onnx import io as onnx_io
from taso.optimize.shapefold import fold_shapes
from taso.rules import ID_LENGTH, REVERSE, Rule, provenance, store
from taso.search import apply_everywhere, optimize_graph, rulecache
from taso.verify import basis

Rewrite = Callable[[Graph], tuple[Graph, dict[str, int]]]
"""A rewrite step: the new graph and how often each rule fired (tests plug in their own)."""

Progress = Callable[[str, int, int], None]
"""Reports long work as it goes: (stage, steps done, steps in all). Profiling the model's units on a GPU and
searching its regions can take minutes; the CLI draws a bar per stage."""
TIME_LIMIT_REACHED = "time limit reached: result may depend on machine speed"
"""What the report says when the search's safety net (`Settings.time_limit`) cut it short."""


@dataclass(frozen=True)
class Settings:
    """How hard to search, what to cost with, and what to check on."""

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
    check_inputs: feeds.Source | Sequence[feeds.Source] = ()
    """The check's input sets (`feeds.given`: npz files or arrays by input name), used instead of random ones:
    a model that runs only on meaningful values (a sample rate of 8000 or 16000) can be checked then."""


Applied = dict[str, object]
"""One entry of `Report.rules_applied`: ``{"name": ..., "count": ...}``."""


def named(applied: Mapping[str, int], rules: Iterable[Rule]) -> dict[str, Applied]:
    """``applied`` (counts by rule id, ``ID~reverse`` for a rule read backwards, PET mutant or pass name) with each
    rule's `Rule.title` beside its count; a key no rule has is its own name."""
    wanted = {k.removesuffix(REVERSE) for k in applied}
    titles = {r.id: r.title for r in rules if r.id in wanted}
    out: dict[str, Applied] = {}
    for key, n in sorted(applied.items()):
        base = key.removesuffix(REVERSE)
        name = titles.get(base, key) + (", read backwards" if base != key and base in titles else "")
        out[key] = {"name": name, "count": n}
    return out


@dataclass
class Report:
    """What `optimize` did, for humans (`lines`) and scripts (`as_dict`)."""

    input: str
    output: str
    nodes_before: int
    nodes_after: int
    opaque_nodes: int
    proved_rules: int
    rules_applied: dict[str, Applied] = field(default_factory=dict)
    """By rule id (`taso.rules.rule_id`, what `subst rules show ID` looks up), PET mutant or pass: its name and
    how often it was applied."""
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
            *(
                [f"prior     {p['units']} unit costs from the shipped table {p['table']} for this device"]
                if (p := self.cost.get("prior"))
                else []
            ),
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
        if (gain := self.cost.get("untimed_gain")) is not None:
            return [
                f"measured  not timed: a predicted {gain:.3f}x is below the {GUARD_MIN_GAIN}x timing end to end can "
                "confirm; kept the original"
            ]
        m = self.cost.get("measured")
        if not m:
            return []
        verdict = "kept the original: the rewrite was not clearly faster" if m.get("kept_original") else "rewrite kept"  # type: ignore[union-attr]
        when = " (timed by an earlier run)" if m.get("cached") else ""  # type: ignore[union-attr]
        return [f"measured  {m['before_ms']:.4f} -> {m['after_ms']:.4f} ms end to end{when}; {verdict}"]  # type: ignore[index]

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
        width = ID_LENGTH + len(REVERSE)
        applied = [f"          {v['count']:>3}x {k:<{width}}  {v['name']}" for k, v in sorted(rules.items())]
        return [
            f"input     {self.input}",
            f"output    {self.output}",
            f"nodes     {self._file_nodes()}{self.nodes_before} -> {self.nodes_after} "
            f"({self.opaque_nodes} passed through untouched)",
            f"rules     {self.proved_rules} proved in store; applied: "
            + ("by id (`subst rules show ID`):" if applied else "none"),
            *applied,
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


COSTS_NOT_CACHED = "costs not cached"
"""The start of the warning that costs measured now are dropped at exit (`taso.cachedir.cost_cache` says why)."""
GUARD_ROUNDS = 5
"""Rounds the end-to-end guard times original and result in (see `cost.clearly_faster`)."""
GUARD_MIN_GAIN = 1.01
"""A rewrite predicted to gain less than this is neither timed end to end nor kept: five rounds cannot tell so
little from noise (`cost.clearly_faster` wants nearly every round faster), so the guard would keep the original
after minutes of timing (ResNet-50 on the loaded 2-core CPU: 31 s to turn down a predicted 1.002x)."""
GUARD_BUDGET_S = 0.5
"""Seconds a guard round's warm-up, and its samples, may each take (`taso.profiler.time_models`): 40 samples of
BERT-base and its rewrite took 35 s on the 2-core CPU; a model of milliseconds is timed in fewer."""


@contextmanager
def _timed(times: dict[str, float], stage: str) -> Iterator[None]:
    """Adds the seconds the block takes to ``times[stage]``: the report's account of where the time went."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[stage] = times.get(stage, 0.0) + time.perf_counter() - t0


def _confirm_speedup(
    files: tuple[Path, Path],
    graph: Graph,
    result: Graph,
    model: cost.CostModel,
    progress: Progress,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> dict[str, float | bool]:
    """Time the original and the result (``files``, those the run writes anyway: re-saving them took BERT-base
    4 s) end to end on the device, interleaved, on ``inputs`` (the user's) or on the first draw the original
    runs on, as the check draws (0-or-1 token type ids crashed the timing of a model whose type table has one
    row); the original is to be kept (``kept_original``) unless the result is clearly faster. The cost model
    predicts, this decides: a rewrite must never make the model slower."""
    graphs = [_fed_at(graph, model.dims), _fed_at(result, model.dims)]
    if inputs is None:
        inputs = check.choose_inputs(files[0], graphs[0], seeds=(0,), dims=model.dims or {}).sets[0]
    progress("timing end to end", 0, GUARD_ROUNDS)
    before, after = cost.interleaved_rounds(
        files,
        graphs,
        model.device,
        rounds=GUARD_ROUNDS,
        progress=lambda done, rounds: progress("timing end to end", done, rounds),
        inputs=inputs,
        budget_s=GUARD_BUDGET_S,
    )
    measured = {"before_ms": statistics.median(before), "after_ms": statistics.median(after)}
    return measured if cost.clearly_faster(before, after) else {**measured, "kept_original": True}


def _pair(graph: Graph, result: Graph, dims: dict[str, int]) -> str:
    """What an end-to-end verdict is kept under: the structure of both models (`cost.graph_digest`: ops,
    attributes, types and small constants, not learned weights, which do not move a latency) and the dims."""
    text = f"{cost.graph_digest(graph)}:{cost.graph_digest(result)}:{sorted(dims.items())}"
    return hashlib.sha256(text.encode()).hexdigest()


def _fed_at(g: Graph, dims: dict[str, int]) -> Graph:
    """``g`` with its inputs' symbolic dims at ``dims`` (1 where not named), as `onnx_io.concretize` fixes them:
    the inputs' types are all the feeds are drawn from, and re-inferring every shape took BERT-base 2 s."""
    types = dict(g.types)
    for i in g.inputs:
        t = g.types.get(i)
        if t is not None and t.shape is not None:
            shape = tuple(d if isinstance(d, int) else dims.get(d, 1) if isinstance(d, str) else 1 for d in t.shape)
            types[i] = TensorType(t.dtype, shape)
    return replace(g, types=types)


def _rewrite(
    graph: Graph,
    db,  # noqa: ANN001 (sqlite_utils.Database)
    settings: Settings,
    rewrite: Rewrite | None,
    progress: Progress,
    times: dict[str, float],
) -> tuple[Graph, dict[str, Applied], dict, dict, cost.CostModel | None]:
    """The rewritten graph, the rules applied, predicted costs, search facts, and the cost model to time the
    result with end to end where it was measured (`_confirm_speedup`); ``times`` gets the seconds of each
    stage. Rules are read and indexed before the search's clock starts, and the clock stops
    while the cost model measures units the cache lacks (the model's own first, then the candidates', for up to
    ``measure_limit`` seconds in all), so the time limit is the search's own, not the time a GPU takes to
    measure: with both in one limit, SqueezeNet's search on a cold H100 cache measured 18 new units in 12 s
    and applied none of the eight fire merges that a warm cache finds."""
    if rewrite is not None:
        result, applied = rewrite(graph)
        return result, named(applied, ()), {}, {}, None
    with _timed(times, "start-up"):
        progress("reading rules", 0, 1)
        proofs = basis.for_folder(settings.specs)  # what each proof rested on, under the specs run with
        proved, untrusted = provenance.trusted(rulecache.proved_rules(db), proofs.digest_of)
        if not proved:
            return graph, {}, {}, {"untrusted_rules": dict(untrusted)}, None
        index = rulecache.search_index(db, proved)
        progress("reading rules", 1, 1)
        progress("preparing the cost model", 0, 1)  # calibrates a device the cache does not know
        cache, uncached = cost_cache()
        model = _cost_model(cache, settings, onnx_io.dim_sizes(graph, settings.dims))
        progress("preparing the cost model", 1, 1)
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
        model.graph_cost(folded, progress=lambda done, units: progress("measuring units", done, units))
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
    gain = before.total_ms / after.total_ms
    untimed = gain if model.measure and 1.0 < gain < GUARD_MIN_GAIN else None  # timing it would only cost time
    if gain <= 1.0 or untimed is not None:  # never hand back a graph predicted costlier, nor one the guard can't clear
        result, applied, after = graph, {}, before
    costs: dict = {  # reported at the host's quick speed; their ratio is unchanged
        "before_ms": model.at_quick_host(before).total_ms,
        "after_ms": model.at_quick_host(after).total_ms,
        "device": model.device.key,
        "estimated_units": after.estimated,
        "estimated_calibration": model.calibration_estimated and model.measure,
        **({"prior": {"table": model.prior.source, "units": model.from_prior}} if model.from_prior else {}),
        **({"warning": f"{COSTS_NOT_CACHED}: {uncached}"} if model.measure and uncached else {}),
        **({"untimed_gain": untimed} if untimed is not None else {}),
    }
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
    return result, named(applied, proved), costs, search_facts, model if model.measure and result is not graph else None


def _quiet(stage: str, done: int, total: int) -> None:
    """The library shows no progress unless asked."""


def _cost_model(db, settings: Settings, dims: dict[str, int]) -> cost.CostModel:  # noqa: ANN001 (sqlite_utils.Database)
    """The cost model ``settings`` ask for, costing symbolic dims at ``dims``."""
    if settings.costs is not None:
        model = cost.reference_model(settings.costs)
        model.dims = dims
        return model
    if settings.device == "estimate":  # not the cache's costs either: what they are depends on the machine
        return cost.CostModel(profiler.pick_device("cpu"), None, measure=False, dims=dims)
    device = profiler.pick_device(settings.device)
    prior = costtables.prior_for(device)
    return cost.CostModel(device, db, dims=dims, prior=prior, measure_limit=settings.measure_limit)


def _given_inputs(graph: Graph, settings: Settings, run_check: bool) -> list[feeds.Sample]:
    """The check's given input sets, read and validated before any work: a bad file costs no search."""
    if not settings.check_inputs:
        return []
    if not run_check:
        raise BadInput("--check-inputs: the check is off (--no-check); give one or the other")
    return feeds.given(settings.check_inputs, graph, settings.dims)


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
    tell = progress or _quiet
    with staging as tmp:
        tell("importing", 0, 1)
        with _timed(times, "import"):
            db = store.open_store(store_path, read_only=True)  # costs go to the user's cache, never a store
            graph, upgrade = onnx_io.import_model(src)
            onnx_io.check_dims(graph, settings.dims)
            given = _given_inputs(graph, settings, run_check)
        tell("importing", 1, 1)
        # onnxruntime cannot run an opset-6 file: its upgrade is checked against instead; the guard times the
        # upgrade whatever the opset, as the rewrite starts from it
        checked_upgraded = upgrade is not None and upgrade.opset < onnx_io.ORT_MIN_OPSET
        upgraded = None
        if checked_upgraded and run_check:
            upgraded = onnx_io.save_model(graph, Path(tmp) / f"upgraded-{dst.name}")
        original = upgraded or Path(src)
        inputs = None
        if run_check:  # before the search: a model the check cannot run is refused at once, not after minutes
            with _timed(times, "check"):
                inputs = check.choose_inputs(original, graph, (seed, seed + 1), given=given)
        timing = inputs.sets[0] if inputs is not None and inputs.given else None
        result, applied, costs, search_facts, confirm = _rewrite(graph, db, settings, rewrite, tell, times)
        if upgrade is not None and upgraded is None and confirm is not None:
            upgraded = onnx_io.save_model(graph, Path(tmp) / f"upgraded-{dst.name}")
        tell("exporting", 0, 1)
        with _timed(times, "export"):
            staged = onnx_io.save_model(result, Path(tmp) / dst.name)
        tell("exporting", 1, 1)
        if confirm is not None:
            pair = _pair(graph, result, confirm.dims)
            costs["measured"] = confirm.verdict(pair)
            if costs["measured"] is None:
                with _timed(times, "timing end to end"):
                    costs["measured"] = _confirm_speedup(
                        (upgraded or Path(src), staged), graph, result, confirm, tell, timing
                    )
                confirm.record_verdict(pair, costs["measured"])
            else:
                costs["measured"]["cached"] = True
            if costs["measured"].get("kept_original"):
                result, applied = graph, {}
                with _timed(times, "export"):
                    staged = onnx_io.save_model(result, Path(tmp) / dst.name)
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
        if upgrade is not None:
            report.upgrade = {**asdict(upgrade), "checked_upgraded": checked_upgraded}
        if inputs is not None:
            tell("checking", 0, 1)
            with _timed(times, "check"):
                report.check = check.compare(original, staged, graph, rtol=rtol, atol=atol, inputs=inputs)
            tell("checking", 1, 1)
            if not report.check.ok:
                report.seconds = {**times, "total": time.perf_counter() - start}
                raise CheckFailed(
                    f"rewritten model differs from the original: {report.check.summary()}; nothing written", report
                )
        onnx_io.move_model(staged, dst)
    report.seconds = {**times, "total": time.perf_counter() - start}
    return report
