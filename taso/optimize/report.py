"""What `optimize` tells its caller: progress while it works, and the report of what it did.

The report is the one result every pass of the pipeline (`taso.optimize.pipeline.PASSES`) adds to: lines for a
human (`Report.lines`), a dict for scripts (`Report.as_dict`, the CLI's ``--json``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

from taso import pet
from taso.execute import check
from taso.optimize.guard import GUARD_MIN_GAIN
from taso.rules import ID_LENGTH, REVERSE, Rule

Progress = Callable[[str, int, int], None]
"""Reports long work as it goes: (stage, steps done, steps in all). Profiling the model's units on a GPU and
searching its regions can take minutes; the CLI draws a bar per stage."""
SHOWN_BLOCKERS = 5
"""What prevents capture named at most (a model of dynamic dims can have every node on the CPU)."""
TIME_LIMIT_REACHED = "time limit reached: result may depend on machine speed"
"""What the report says when the search's safety net (`Settings.time_limit`) cut it short."""


def quiet(stage: str, done: int, total: int) -> None:
    """The library shows no progress unless asked."""


Applied = dict[str, object]
"""One entry of `Report.rules_applied`: ``{"name": ..., "count": ...}``."""


def split_passes(applied: Mapping[str, int], rules: Iterable[Rule]) -> tuple[dict[str, int], dict[str, int]]:
    """``applied`` as the rules' (by id, ``ID~reverse`` for one read backwards) and PET mutants' counts, and the
    passes' (by the pass's own name): a report listed "precompute weight-only nodes" among the rule ids, which
    `subst rules show` rejects."""
    ids = {r.id for r in rules}
    by_rule = {k: n for k, n in applied.items() if k.removesuffix(REVERSE) in ids or k.startswith(pet.PREFIX)}
    return by_rule, {k: n for k, n in applied.items() if k not in by_rule}


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
    """By rule id (`taso.rules.rule_id`, what `subst rules show ID` looks up) or PET mutant: its name and how
    often it was applied."""
    passes_applied: dict[str, int] = field(default_factory=dict)
    """How often each of subst's own passes (no rule: precomputing weight-only nodes, folding shape arithmetic)
    rewrote the model, by the pass's name."""
    rejected: dict[str, object] | None = None
    """The best rewrite found where the original was kept instead: its rules and passes (as above), its
    predicted cost (``after_ms``, beside ``cost``'s ``before_ms``) and why it was not kept."""
    dims: dict[str, dict[str, int]] = field(default_factory=dict)
    """The sizes of the inputs' symbolic dims the model was ``costed`` at (``--dim``, else 1) and ``checked`` at
    (``--dim``, else the check's own size, or the given inputs')."""
    check: check.CheckResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    cost: dict[str, object] = field(default_factory=dict)
    """Predicted latency before/after (ms), the device it was measured on, how many units were estimated, and
    whether the device's calibration was (no time to measure it)."""
    search: dict[str, object] = field(default_factory=dict)
    upgrade: dict[str, object] | None = None
    """The opset upgrade import made to the file (`onnx_io.Upgrade`), and whether the check ran against the
    upgraded original because onnxruntime cannot run the file itself."""
    certificate: dict = field(default_factory=dict)
    """Every step from the input to the output, with its evidence, and the pass applications declined
    (`taso.optimize.certify.certificate`): what ``--certificate`` writes and `subst certify` re-checks."""

    def as_dict(self) -> dict:
        return asdict(self)

    def _cost_lines(self) -> list[str]:
        if not self.cost:
            return []
        before, after = float(self.cost["before_ms"]), float(self.cost["after_ms"])  # type: ignore[arg-type]
        if self.rejected is not None:  # the one predicted ratio shown is the rewrite's, said to be not kept
            after = float(self.rejected["after_ms"])  # type: ignore[arg-type]
        s = self.search
        return [
            f"cost      {before:.4f} -> {after:.4f} ms predicted ({before / after:.3f}x)"
            + (", the rewrite not kept" if self.rejected is not None else "")
            + f" on {self.cost['device']}"
            + (f", {self.cost['estimated_units']} units estimated" if self.cost["estimated_units"] else "")
            + (f" ({n} kinds no rewrite touches, not measured)" if (n := self.cost.get("untouched_units")) else "")
            + (", device calibration estimated" if self.cost.get("estimated_calibration") else ""),
            *([f"warning   {self.cost['warning']}"] if self.cost.get("warning") else []),
            *self._prior_lines(),
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
            *self._nearest_lines(),
            *self._measured_lines(),
            *self._rejected_lines(),
            *self._capture_lines(),
        ]

    def _capture_lines(self) -> list[str]:
        """Whether the output can run as a CUDA graph at the costed dims, or what prevents it (the first few); and
        where the run was not asked to capture, what capture gives the output (`taso.optimize.capture`)."""
        c = self.cost.get("cuda_graph")
        if not c or "output" not in c:
            return []
        blocked: list[str] = c["output"]  # type: ignore[index]
        if blocked:
            more = f" and {len(blocked) - SHOWN_BLOCKERS} more" if len(blocked) > SHOWN_BLOCKERS else ""
            why = "; ".join(blocked[:SHOWN_BLOCKERS]) + more
            timed = ", timed without it" if c["requested"] else ""  # type: ignore[index]
            return [f"cuda graph the output cannot be captured at these dims{timed}: {why}"]
        if c["requested"]:  # type: ignore[index]
            return ["cuda graph the output is captured at these dims: costed and timed end to end under capture"]
        plain, graph = float(c["without_ms"]), float(c["with_ms"])  # type: ignore[index]
        return [
            f"cuda graph the output runs in {plain:.4f} ms, {graph:.4f} ms captured as a CUDA graph "
            f"({plain / graph:.2f}x): --cuda-graph costs and guards the rewrite under capture"
        ]

    def _prior_lines(self) -> list[str]:
        """How many unit costs came from a shipped table: of this device, or of another scaled by calibration
        (a lower trust: the ratios of a few units stand for the rest); and how many of them from each of the
        provider's other tables, scaled onto it (`taso.cost.tables.Layer`)."""
        p: Mapping[str, object] | None = self.cost.get("prior")  # type: ignore[assignment]
        if not p:
            return []
        layers: list[Mapping[str, object]] = list(p.get("tables") or [])[1:]  # type: ignore[call-overload]
        from_layers = [
            f"          {t['units']} of them from {t['table']} ({t['device']}), scaled x{float(t['scale']):.2f} on "  # type: ignore[arg-type]
            f"{t['shared']} shared units"
            for t in layers
        ]
        if "scaled_from" not in p:
            return [
                f"prior     {p['units']} unit costs from the shipped table {p['table']} for this device",
                *from_layers,
            ]
        return [
            f"prior     {p['units']} unit costs scaled from {p['scaled_from']} by calibration ({p['references']} "
            f"of its units measured here, x{float(p['scale']):.2f} overall), from the shipped table {p['table']}",  # type: ignore[arg-type]
            *from_layers,
        ]

    def _declined_lines(self) -> list[str]:
        """Rewrites a rule matched but that could not be made here, a line per reason (what stood in the way,
        `rewrite.Declined`), with how often and the first such rewrite: its rule's id and the node it matched."""
        declined = sorted((self.search.get("declined") or {}).items(), key=lambda kv: -kv[1])  # type: ignore[union-attr]
        examples: Mapping[str, str] = self.search.get("declined_at") or {}  # type: ignore[assignment]
        return [
            f"{'declined' if k == 0 else '':<10}{why} ({n})" + (f", e.g. {examples[why]}" if why in examples else "")
            for k, (why, n) in enumerate(declined)
        ]

    def _nearest_lines(self) -> list[str]:
        """Why nothing was applied: the single rewrite that came closest to paying (what it adds, not a second
        ratio beside the cost line's)."""
        near = self.search.get("nearest")
        if not near:
            return []
        added = float(near["added_ms"])  # type: ignore[index]
        return [f"nearest   {near['rule']}: +{added:.4f} ms predicted; no rewrite was predicted faster"]  # type: ignore[index]

    def _rejected_lines(self) -> list[str]:
        """The rewrite the original was kept over: each rule by id, each pass by name, and why."""
        r = self.rejected
        if r is None:
            return []
        made = [f"{v['count']}x {k}" for k, v in sorted(r["rules"].items())]  # type: ignore[attr-defined]
        made += [f"{n}x {k}" for k, n in sorted(r["passes"].items())]  # type: ignore[attr-defined]
        return [f"rejected  {'; '.join(made) or 'the rewrite'}: {r['why']}"]

    def _measured_lines(self) -> list[str]:
        if self.cost.get("untimed_gain") is not None:
            return [
                f"measured  not timed: a predicted gain below the {GUARD_MIN_GAIN}x timing end to end can confirm "
                "(the cost line's); kept the original"
            ]
        m = self.cost.get("measured")
        if not m:
            return []
        kept = "kept the original" if m.get("kept_original") else "rewrite kept"  # type: ignore[union-attr]
        when = " (timed by an earlier run)" if m.get("cached") else ""  # type: ignore[union-attr]
        return [
            f"measured  {m['before_ms']:.4f} -> {m['after_ms']:.4f} ms end to end, the original against itself "  # type: ignore[index]
            f"{m['itself_ms']:.4f} ms (noise +-{100 * m['noise']:.1f} %, {m['rounds']} rounds){when}; "  # type: ignore[index]
            f"{m['verdict']}: {kept}"  # type: ignore[index]
        ]

    def _untrusted_lines(self) -> list[str]:
        """Proved rules not applied because their proof record does not match the specs (`taso.provenance`)."""
        skipped = self.search.get("untrusted_rules") or {}
        return [
            f"skipped   {n} rule(s) marked proved but not applied: {why}; run `subst verify --force`"
            for why, n in sorted(skipped.items())  # type: ignore[union-attr]
        ]

    def _dims_lines(self) -> list[str]:
        """The sizes the model was costed and checked at: a cost or a check means little without them."""
        costed, checked = self.dims.get("costed"), self.dims.get("checked")
        if not costed and not checked:
            return []

        def sizes(dims: Mapping[str, int]) -> str:
            return ", ".join(f"{d}={n}" for d, n in dims.items())

        if costed == checked or not checked:
            return [f"dims      {sizes(costed or {})} (costed{' and checked' if checked else ''} at these sizes)"]
        return [f"dims      costed at {sizes(costed or {})}; checked at {sizes(checked)}"]

    def _step_lines(self) -> list[str]:
        """How many steps the rewrite took, by kind, and each pass application its validation declined."""
        c = self.certificate
        if not c:
            return []
        kinds = [s["kind"] for s in c["steps"]]
        unchecked = sum(s["evidence"].get("how") == "not evaluated" for s in c["steps"])
        return [
            f"steps     {len(kinds)}: {kinds.count('rules')} by proved rules, {kinds.count('pass')} by passes "
            "validated on the model" + (f" ({unchecked} could not be run, not validated)" if unchecked else ""),
            *(f"declined  {d['name']}: {d['why']}" for d in c["declined"]),
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
            *self._dims_lines(),
            f"rules     {self.proved_rules} proved in store; applied: "
            + ("by id (`subst rules show ID`):" if applied else "none"),
            *applied,
            *(
                ["passes    " + "; ".join(f"{k} ({n}x)" for k, n in sorted(self.passes_applied.items()))]
                if self.passes_applied
                else []
            ),
            *self._untrusted_lines(),
            *self._step_lines(),
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
