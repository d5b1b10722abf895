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
TIME_LIMIT_REACHED = "time limit reached: result may depend on machine speed"
"""What the report says when the search's safety net (`Settings.time_limit`) cut it short."""


def quiet(stage: str, done: int, total: int) -> None:
    """The library shows no progress unless asked."""


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
    certificate: dict = field(default_factory=dict)
    """Every step from the input to the output, with its evidence, and the pass applications declined
    (`taso.optimize.certify.certificate`): what ``--certificate`` writes and `subst certify` re-checks."""

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
            f"rules     {self.proved_rules} proved in store; applied: "
            + ("by id (`subst rules show ID`):" if applied else "none"),
            *applied,
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
