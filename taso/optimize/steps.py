"""Each rewrite of a model as a step that can be checked on its own: what it changed, and the evidence that the
change keeps the model's outputs.

A rule's application rests on the rule's proof (its record, `taso.rules.provenance`). The passes no proof covers
(weight-only nodes precomputed, shape arithmetic folded, idle operations dropped, chains of axis moves composed)
are hand-written; each application of one is validated on the model it changed (translation validation): the
graph before and the graph after are run in onnxruntime on the same inputs at two sets of sizes for the dynamic
dims, with the model's real weights (precompute depends on them), and must agree. A pass whose step fails that
is declined by `optimize` and reported, never written (`taso.optimize.pipeline`); `subst certify` replays the
passes and runs the same validation again (`taso.optimize.certify`).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from taso import onnx as onnx_io
from taso.execute import check
from taso.execute.feeds import DEFAULT_DIM
from taso.execute.precompute import precompute
from taso.ir import Graph, Node, WeightData
from taso.optimize.dedup import merge_duplicates
from taso.optimize.idle import drop_idle
from taso.optimize.shapefold import fold_shapes
from taso.optimize.views import compose_views

PASS = "pass"
RULES = "rules"
PASSES: dict[str, Callable[[Graph], tuple[Graph, int]]] = {
    "precompute weight-only nodes": precompute,
    "fold shape arithmetic over static dims": fold_shapes,
    "merge operations that repeat an earlier one": merge_duplicates,
    "drop operations their operand's content makes idle": drop_idle,
    "compose chains of axis moves": compose_views,
}
"""The passes no proof covers, by the name their steps carry: deterministic functions of the graph, so
`subst certify` replays each from the graph before it."""


_CONTENT: dict[str, str] = {}
"""Each weight's content digest by its own `WeightData.digest`, which for data the search computed is of its
recipe (equal recipes give equal data): a model's weights are hashed once, not at every step."""


def _content(w: WeightData) -> str:
    if w.digest not in _CONTENT:
        _CONTENT[w.digest] = WeightData(w.array).digest
    return _CONTENT[w.digest]


def digest(g: Graph) -> str:
    """What a step's graphs are named by: `Graph.structure` (what the graph computes) over the weights'
    content, which survives export and import, where `Graph.key` (value types, metadata) and a computed
    weight's digest (of its recipe) do not."""
    data = {
        k: WeightData.deferred(str(w.dtype), w.shape, lambda w=w: w.array, ("content", _content(w)))
        for k, w in g.data.items()
    }
    return replace(g, data=data).structure


def _label(n: Node) -> str:
    """A node by its name, else its first output's (exporters leave names out; outputs are unique)."""
    return n.name or (n.outputs[0] if n.outputs else n.op)


@dataclass(frozen=True)
class Step:
    """One rewrite of the model: a pass application (``kind`` "pass", its evidence a validation) or rule
    applications (``kind`` "rules": each rule's id, count and proof record). ``before`` and ``after`` are the
    `digest` of the graph it rewrote and of the graph it made; ``removed`` and ``added`` name the nodes."""

    kind: str
    name: str
    before: str
    after: str
    removed: tuple[str, ...]
    added: tuple[str, ...]
    rules: tuple[dict, ...] = ()
    evidence: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> Step:
        """The step a certificate lists; raises KeyError or TypeError where an entry is missing or mistyped."""
        step = cls(
            str(d["kind"]),
            str(d["name"]),
            str(d["before"]),
            str(d["after"]),
            tuple(map(str, d["removed"])),
            tuple(map(str, d["added"])),
            tuple(dict(r) for r in d.get("rules", ())),
            dict(d.get("evidence", {})),
        )
        if step.kind not in (PASS, RULES):
            raise TypeError(f"unknown step kind {step.kind!r}")
        return step


def step(
    kind: str, name: str, before: Graph, after: Graph, rules: Sequence[dict] = (), evidence: dict | None = None
) -> Step:
    """The step from ``before`` to ``after``: the nodes only one of them has, named."""
    old, new = set(before.nodes), set(after.nodes)
    removed = tuple(_label(n) for n in before.nodes if n not in new)
    added = tuple(_label(n) for n in after.nodes if n not in old)
    return Step(kind, name, digest(before), digest(after), removed, added, tuple(rules), evidence or {})


def sizes(g: Graph, dims: Mapping[str, int]) -> list[dict[str, int]]:
    """The two sets of sizes for ``g``'s dynamic dims a step is validated at: those given (else `DEFAULT_DIM`),
    then each one more. A rewrite that holds only at one size (a dim folded as a constant) fails the other."""
    names = sorted({d for v in g.inputs if (t := g.types.get(v)) and t.shape for d in t.shape if isinstance(d, str)})
    first = {d: dims.get(d, DEFAULT_DIM) for d in names}
    return [first, {d: s + 1 for d, s in first.items()}]


class Invalid(Exception):
    """A step's graphs disagree: the message says where."""


class Unevaluated(Exception):
    """A step's graph before could not be run here (onnxruntime cannot load it, or runs it on no input drawn):
    the step is neither validated nor refuted."""


@dataclass
class Validator:
    """Runs the graphs of one model's steps on input sets drawn once, from the first graph it is asked about,
    at each set of `sizes`; a graph's outputs are kept, so a chain of steps runs each graph once. Graphs run as
    written (onnxruntime's optimizations off): its fusions fire in one graph and not the other, and in float16
    rounded BERT's outputs 0.03 apart across a shape fold that changed no arithmetic."""

    dims: Mapping[str, int]
    given: Sequence[Mapping[str, np.ndarray]] = ()
    """The user's input sets (``--check-inputs``), used instead of drawn ones where given."""
    sets: list[dict[str, np.ndarray]] = field(default_factory=list)
    at: list[dict[str, int]] = field(default_factory=list)
    _outputs: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict)

    def outputs(self, g: Graph) -> list[dict[str, np.ndarray]]:
        """``g``'s outputs on each input set; raises `check.RunError` where onnxruntime cannot run it."""
        if g.key not in self._outputs:
            lifted, weights = _lifted(g)
            with tempfile.TemporaryDirectory(prefix="subst-step-") as tmp:
                session = check.Runner(onnx_io.save_model(lifted, Path(tmp) / "step.onnx"), optimized=False)

                def run(feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
                    return session({**feed, **weights})

                if not self.sets:
                    self._draw(g, run)
                self._outputs[g.key] = [run(s) for s in self.sets]
        return self._outputs[g.key]

    def _draw(self, g: Graph, run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]) -> None:
        """The input sets: the given ones, else per set of sizes the first draw ``g`` runs on (sensible
        integers, then plain ones); a set of sizes ``g`` runs on no draw at is left out, but not both."""
        if self.given:
            self.sets, self.at = [dict(s) for s in self.given], [dict(self.dims)]
            return
        error = ""
        for seed, dims in enumerate(sizes(g, self.dims)):
            for how in ({"sensible": True}, {}):
                feed = check.random_inputs(g, seed, dims, **how)  # type: ignore[arg-type]
                try:
                    run(feed)
                except check.RunError as e:
                    error = error or str(e)
                    continue
                self.sets.append(feed)
                self.at.append(dims)
                break
        if not self.sets:
            raise check.RunError(f"it runs on no input drawn ({error})")

    def validate(self, before: Graph, after: Graph) -> dict:
        """The evidence that ``after`` computes what ``before`` does on every input set: its outputs equal, bit
        for bit or within the element type's `check.tolerance`. Raises `Invalid` (where they differ, or
        ``after`` fails to run) or `Unevaluated` (where ``before`` cannot be run)."""
        try:
            want = self.outputs(before)
        except check.RunError as e:
            raise Unevaluated(f"onnxruntime cannot run the graph before it: {e}") from None
        try:
            got = self.outputs(after)
        except check.RunError as e:
            raise Invalid(f"onnxruntime cannot run the graph it made: {e}") from None
        worst = 0.0
        for dims, w, g in zip(self.at, want, got):
            for name, a in w.items():
                b = g.get(name)
                worst = max(worst, _differ(name, a, b, dims))
        return {"how": "evaluated", "sizes": self.at, "input_sets": len(self.sets), "max_abs_diff": worst}


LIFTED = 64
"""Float weights of more elements than this are fed to a step's graphs as inputs, not written into them."""


def _lifted(g: Graph) -> tuple[Graph, dict[str, np.ndarray]]:
    """``g`` with its large float weights made inputs, and their arrays: a step's graph is then a few kB to
    write and load, and its weights are handed to onnxruntime as they are (BERT-base's 200 MB written once
    per step had its validation double optimize's CPU time). Small ones (shapes, axes) stay constants."""
    big = [w for w in g.weights if w in g.data and g.data[w].dtype.kind == "f" and math.prod(g.data[w].shape) > LIFTED]
    if not big:
        return g, {}
    lift = set(big)
    weights = tuple(w for w in g.weights if w not in lift)
    data = {k: v for k, v in g.data.items() if k not in lift}
    return replace(g, inputs=(*g.inputs, *big), weights=weights, data=data), {w: g.data[w].array for w in big}


def _differ(name: str, a: np.ndarray, b: np.ndarray | None, dims: Mapping[str, int]) -> float:
    """The largest difference of output ``name`` between before (``a``) and after (``b``) at ``dims``; raises
    `Invalid` where they differ by more than the element type's tolerance."""
    where = f"output {name} at sizes {dict(dims) or 'static'}"
    if b is None or a.shape != b.shape or a.dtype != b.dtype:
        got = "missing" if b is None else f"{b.dtype}{list(b.shape)}"
        raise Invalid(f"{where}: {got} where the graph before gives {a.dtype}{list(a.shape)}")
    if a.dtype.kind not in "fc":
        if not np.array_equal(a, b):
            raise Invalid(f"{where}: {int(np.count_nonzero(a != b))} element(s) differ")
        return 0.0
    rtol, atol = check.tolerance(a.dtype, None, None)
    if not np.allclose(b, a, rtol=rtol, atol=atol, equal_nan=True):
        raise Invalid(f"{where}: differs by up to {float(np.nanmax(np.abs(a.astype(np.float64) - b))):.3g}")
    return float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0)) if a.size else 0.0
