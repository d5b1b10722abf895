"""What one `optimize` run carries from pass to pass: the user's settings, the check asked for, the run so far,
and what a pass is."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from taso import cost
from taso.execute import check, feeds
from taso.ir import Graph
from taso.optimize.report import Progress, Report
from taso.optimize.steps import Step, Validator
from taso.rules import Rule, RuleIndex, provenance
from taso.search import BUDGET


@dataclass(frozen=True)
class Settings:
    """How hard to search, what to cost with, and what to check on."""

    alpha: float = 1.05
    budget: int = BUDGET
    """Graphs a region's search expands per pass; `taso.search.PASSES` budgets per form of region in all, shared
    by size: the search is bounded by this work, so its result does not depend on the machine's speed."""
    time_limit: float = 60.0
    """Seconds of search at most, not counting the time spent measuring units the cost cache lacks: a safety
    net that the report flags when it fires (the work bound, ``budget`` and `taso.search.backtrack.CANDIDATES`,
    ends the search first on the zoo and the light models on the 2-core machine)."""
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
    cuda_graph: bool = False
    """Cost units, and time the original and the result end to end, under CUDA graph capture (onnxruntime's
    ``enable_cuda_graph``, inputs and outputs bound on the GPU), as a deployment that captures runs them: CUDA
    only (``device`` cuda), costs and verdicts kept apart from those timed without it."""
    refresh: bool = False
    """Time the original and the result end to end again instead of recalling an earlier run's verdict on them
    (`taso.optimize.guard`): a verdict taken on a busy machine need not stand."""
    standard_onnx: bool = False
    """Keep the result in standard ONNX: use no rule that writes an op only onnxruntime runs (its fused kernels,
    `taso.ops.fused`), so that any runtime loads the result. By default they are targets, as for onnxruntime."""
    prior: bool = True
    """Take the shipped cost table of this device (`taso.cost.prior_for`) for the units the cache lacks. Without
    it every unit is measured here: how the table of a device none ships for is built (bench/h200-table.sh), where
    another device's table, scaled, would stand in for most of them and only what it lacks would be measured."""


@dataclass(frozen=True)
class Checking:
    """What the check after the rewrite is asked for: off, or against a float64 reference of the original on
    two draws from ``seed`` (or element-wise at ``rtol``/``atol`` where either is given: `check.compare`)."""

    run: bool = True
    rtol: float | None = None
    atol: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class Run:
    """One optimize run as its passes go: what was asked, what the passes made so far, and the report."""

    src: Path
    dst: Path
    store_path: Path
    settings: Settings
    checking: Checking
    staging: Path
    """The temp folder beside ``dst`` the passes write into: the output is moved out of it by the last pass."""
    tell: Progress
    report: Report
    db: object = None
    """The rule store, read-only (sqlite_utils.Database): costs go to the user's cache, never a store."""
    imported: Graph | None = None
    """The model as imported: the reference the check and the guard hold the result to."""
    graph: Graph | None = None
    """The model as the passes have rewritten it so far."""
    applied: Counter = field(default_factory=Counter)
    """How often each rule (by id), PET mutant or pass has rewritten ``graph``."""
    upgraded: Path | None = None
    """The imported model's opset upgrade, saved where it is run in place of the file (check, guard)."""
    folded_dims: dict[str, int] = field(default_factory=dict)
    """Sizes of the dims the shape fold's re-inference named, to be costed beside the model's own
    (`onnx_io.dim_sizes`)."""
    given: list[feeds.Sample] = field(default_factory=list)
    inputs: check.Inputs | None = None
    """The check's input sets, chosen before the search: a model the check cannot run is refused at once."""
    proved: list[Rule] = field(default_factory=list)
    """The proved rules whose proof is from the specs in use (`provenance.trusted`)."""
    index: RuleIndex | None = None
    baseline: Graph | None = None
    """The input as onnxruntime runs it, what a rewrite's gain is measured against: onnxruntime folds
    weight-only computation at load, so precomputing it here is no gain (GPT-2's position embedding, Range and
    Gather on a dynamic dim, was estimated 3x its measured cost folded)."""
    model: cost.CostModel | None = None
    measured_units: int = 0
    """Units the cost model had measured before the search."""
    guarded: cost.CostModel | None = None
    """The cost model to time the result with end to end: only where it measures and the result differs."""
    staged: Path | None = None
    """Where the export pass saved the result in ``staging``."""
    certificate: Path | None = None
    """Where to write the certificate of the rewrite's steps (`taso.optimize.certify`), beside the model."""
    steps: tuple[Step, ...] = ()
    """The rewrites from ``imported`` to ``graph``, in order, each with its evidence (`taso.optimize.steps`)."""
    declined: tuple[dict, ...] = ()
    """The pass applications whose validation failed, not made: the pass's name and where its graphs differ."""
    validator: Validator | None = None
    """Runs the pass steps' graphs, once each; made at the first step, on input sets drawn for the model."""
    timed_on: dict[str, np.ndarray] | None = None
    """The inputs the guard and the CUDA graph passes time the models on (`taso.optimize.capture.timed_on`), drawn
    by the first of them: each draw opened a CPU session of the original and ran it (Swin-T on the 2-core CPU:
    2.8 s), and each pass drew again."""

    @property
    def original(self) -> Path:
        """The file the original runs from: the upgrade where onnxruntime cannot run the file itself."""
        return self.upgraded or self.src

    def rewritten(self, graph: Graph, counts: Counter) -> Run:
        """The run with ``graph`` as the model, rewritten ``counts`` more times (`Rewrite`'s result)."""
        return replace(self, graph=graph, applied=self.applied + counts)

    def reporting(self, **fields: object) -> Run:
        """The run with these fields of its report set."""
        return replace(self, report=replace(self.report, **fields))


@dataclass(frozen=True)
class Pass:
    """One step of `optimize`: ``run`` maps the run so far to the next; its seconds count toward ``clock`` in the
    report (None: only the total), its progress shows as the one-step stage ``shows`` (None: it shows its own
    steps, or none), and it runs only ``when`` the run so far asks for it."""

    name: str
    run: Callable[[Run], Run]
    clock: str | None
    shows: str | None = None
    when: Callable[[Run], bool] = lambda run: True
