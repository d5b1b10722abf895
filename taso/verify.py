"""`subst verify`: a verdict for every candidate rule, stored beside it.

For each rule: a fast pre-check on random inputs with real semantics (`taso.precheck`) refutes false rules
with a counterexample; then both sides are lowered to z3 terms (`taso.lowering`) and, output by output, z3
looks for a contradiction between the specs' axioms and ``src != dst`` under a per-rule time limit. Unsat is a
proof (the unsat core names the axioms used); a timeout or an exhausted search is ``unknown`` with the reason.
The search first gets only the axioms whose symbols all occur in the rule, then, if time is left, all axioms.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils
import z3

from taso import store
from taso.lowering import lower_graph
from taso.precheck import refute
from taso.rules import Rule
from taso.spec import Axiom, Specs, Unsupported, load_specs

DEFAULT_TIMEOUT = 10.0
"""Seconds per rule. The shipped rules prove within 1.2 s and the slowest give up (no proof) within 6 s, so a
machine several times slower still reaches the same verdicts."""
FLUSH_SECONDS = 1.0
"""Verdicts are written at least this often, so an interrupted run keeps nearly all its work."""
SPECS_DIR = Path(__file__).resolve().parent.parent / "specs"


@dataclass(frozen=True)
class Verdict:
    status: str  # proved | refuted | unknown
    detail: dict


class Prover:
    """Decides rules against one set of specs with one z3 solver that holds every axiom from the start.

    Each axiom is asserted once, guarded by a literal of its own; a rule's check assumes the literals of the
    axioms it may use, so the unsat core names the axioms a proof used. A rule's facts and goal live in a
    scope of their own, dropped afterwards. (A fresh solver per rule gives the same verdicts, 20 % slower.)
    """

    def __init__(self, specs: Specs, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.specs = specs
        self.timeout = timeout
        self.solver = z3.Solver()
        self.solver.set("smt.mbqi", False)  # E-matching on the axioms' patterns only: saturate or stop, never guess
        for sym in specs.symbols.values():
            self.solver.add(*sym.shape_axioms())
        self.literals = {a.name: z3.Bool(f"axiom {a.name}") for a in specs.axioms}
        for a in specs.axioms:
            self.solver.add(z3.Implies(self.literals[a.name], a.formula))

    def verdict(self, rule: Rule) -> Verdict:
        t0 = time.perf_counter()
        try:
            counterexample = refute(rule)
            if counterexample is not None:
                return Verdict("refuted", {"counterexample": counterexample, "seconds": _since(t0)})
            env: dict[str, z3.ExprRef] = {}
            facts: list[z3.BoolRef] = []
            used: set[str] = set()
            src = lower_graph(rule.src, self.specs, env, facts, used)
            dst = lower_graph(rule.dst, self.specs, env, facts, used)
        except Unsupported as e:
            return Verdict("unknown", {"reason": str(e), "seconds": _since(t0)})
        goals = [(i, a, b) for i, (a, b) in enumerate(zip(src, dst)) if not a.eq(b)]
        if not goals:
            return Verdict(
                "proved", {"axioms": [], "note": "both sides lower to the same terms", "seconds": _since(t0)}
            )
        relevant = [a for a in self.specs.axioms if a.symbols <= used]
        deadline = t0 + self.timeout
        stages = [("relevant axioms", relevant)]
        if len(relevant) < len(self.specs.axioms):
            stages.append(("all axioms", list(self.specs.axioms)))
        for stage, axioms in stages:
            outcome = self._prove(goals, axioms, facts, deadline)
            if outcome[0] == "proved":
                return Verdict("proved", {"axioms": outcome[1], "stage": stage, "seconds": _since(t0)})
            if outcome[0] == "timeout":
                break
        reason = (
            f"timeout after {self.timeout:g} s"
            if outcome[0] == "timeout"
            else f"no proof from the axioms for output {outcome[1]} (a missing axiom?)"
        )
        return Verdict("unknown", {"reason": reason, "seconds": _since(t0)})

    def _prove(
        self,
        goals: Sequence[tuple[int, z3.ExprRef, z3.ExprRef]],
        axioms: Sequence[Axiom],
        facts: list[z3.BoolRef],
        deadline: float,
    ) -> tuple[str, object]:
        """("proved", axiom names) | ("timeout", None) | ("open", the output not proved)."""
        s = self.solver
        assumed = [self.literals[a.name] for a in axioms]
        core: set[str] = set()
        s.push()
        try:
            s.add(*facts)
            for i, a, b in goals:
                left_ms = int((deadline - time.perf_counter()) * 1000)
                if left_ms <= 0:
                    return "timeout", None
                s.set("timeout", left_ms)
                s.push()
                s.add(a != b)
                result = s.check(*assumed)
                if result == z3.unsat:
                    core.update(c.decl().name().removeprefix("axiom ") for c in s.unsat_core())
                s.pop()
                if result == z3.unknown and s.reason_unknown() in ("timeout", "canceled"):
                    return "timeout", None
                if result != z3.unsat:
                    return "open", i
            return "proved", sorted(core)
        finally:
            s.pop()


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


# ---- over a store, in parallel ----------------------------------------------------------------------------

_WORKER: Prover | None = None
"""The prover of this process (each worker builds its own: z3 state does not survive a fork safely)."""


def _init_worker(specs_dir: str, timeout: float) -> None:
    global _WORKER
    _WORKER = Prover(load_specs(specs_dir), timeout)


def _decide(row: dict) -> tuple[int, Verdict]:
    assert _WORKER is not None
    return row["id"], _WORKER.verdict(Rule.from_row(row))


@dataclass
class Summary:
    counts: Counter = field(default_factory=Counter)
    skipped: int = 0
    seconds: float = 0.0
    workers: int = 1
    reasons: Counter = field(default_factory=Counter)

    @property
    def decided(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        return {
            "proved": self.counts["proved"],
            "refuted": self.counts["refuted"],
            "unknown": self.counts["unknown"],
            "skipped": self.skipped,
            "seconds": round(self.seconds, 2),
            "workers": self.workers,
            "unknown_reasons": dict(self.reasons.most_common()),
        }

    def lines(self) -> list[str]:
        n = self.decided
        unknown = self.counts["unknown"]
        out = [
            f"verified  {n} rule(s) in {self.seconds:.1f} s with {self.workers} worker(s)"
            + (f"; {self.skipped} already decided (--force to redo)" if self.skipped else ""),
            f"proved    {self.counts['proved']}",
            f"refuted   {self.counts['refuted']}",
            f"unknown   {unknown}" + (f" ({100 * unknown / n:.1f} %)" if n else ""),
        ]
        out += [f"          {c} x {r}" for r, c in self.reasons.most_common(5)]
        return out


def pending(db: sqlite_utils.Database, force: bool = False) -> list[dict]:
    """The rules to decide: candidates, or every rule with ``force``."""
    return [r for r in db["rules"].rows_where(order_by="id") if force or r["status"] == "candidate"]


def verify_rows(
    db: sqlite_utils.Database,
    rows: list[dict],
    specs: Specs,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    """Decide ``rows`` (from `pending`), storing verdicts as they come, so an interrupted run keeps its work."""
    t0 = time.perf_counter()
    summary = Summary(skipped=db["rules"].count - len(rows), workers=workers)
    batch: list[tuple[int, Verdict]] = []
    flushed = time.perf_counter()
    try:
        for rule_id, v in _run(rows, specs, timeout, workers):
            batch.append((rule_id, v))
            summary.counts[v.status] += 1
            if v.status == "unknown":
                summary.reasons[_reason_kind(v.detail["reason"])] += 1
            if time.perf_counter() - flushed > FLUSH_SECONDS:
                _store(db, batch)
                flushed = time.perf_counter()
            if progress is not None:
                progress(1)
    finally:  # Ctrl-C keeps every verdict reached so far
        _store(db, batch)
    summary.seconds = time.perf_counter() - t0
    return summary


def _store(db: sqlite_utils.Database, batch: list[tuple[int, Verdict]]) -> None:
    """Write verdicts in one transaction (a commit per rule would cost more than most proofs)."""
    with db.conn:
        for rule_id, v in batch:
            store.set_verdict(db, rule_id, v.status, v.detail)
    batch.clear()


SHARDS = 8
"""Rules are proved in this many fixed shards, each in a fresh process in id order. z3's quantifier
instantiation depends on every term built before in the process, so a proof near the edge of what the axioms
reach can come and go with the rules proved before it; fixed shards make the verdicts a function of the rule
set alone, whatever the number of workers or their timing."""
SMALL = 64
"""Fewer rules than this are proved in this process, in id order (tests and small stores)."""


def _run(rows: list[dict], specs: Specs, timeout: float, workers: int) -> Iterator[tuple[int, Verdict]]:
    global _WORKER
    if len(rows) < SMALL:
        _WORKER = Prover(specs, timeout)
        yield from map(_decide, rows)
        return
    shards = [rows[k::SHARDS] for k in range(SHARDS)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(workers, SHARDS), _init_worker, (str(specs.root), timeout), maxtasksperchild=1) as pool:
        for verdicts in pool.imap_unordered(_decide_shard, shards):
            yield from verdicts


def _decide_shard(rows: list[dict]) -> list[tuple[int, Verdict]]:
    return [_decide(r) for r in rows]


def _reason_kind(reason: str) -> str:
    """Group reasons for the summary: timeouts together, the rest by their text up to the first colon."""
    return "timeout" if reason.startswith("timeout") else reason.split(":")[0].split(" for output")[0]
