"""`subst verify`: a verdict for every candidate rule, stored beside it.

For each rule: a fast pre-check on random inputs with real semantics (`taso.precheck`) refutes false rules
with a counterexample; then both sides are lowered to z3 terms (`taso.lowering`) and, output by output, z3
looks for a contradiction between the specs' axioms and ``src != dst`` within a per-rule budget. Unsat is a
proof (the unsat core names the axioms used); a spent budget or an exhausted search is ``unknown`` with the
reason. The search first gets only the axioms whose symbols all occur in the rule (or arise from its known
numbers' arithmetic, `Axiom.eager`), then, if budget is left, every axiom its terms can trigger (`reachable`).
Sizes and free attributes are variables (`taso.lowering`): each search is tried first assuming nothing of the
example, then its equal sizes, then its sizes and free values; the facts a proof used are stored with it as
conditions the rewrite enforces.

That ladder (phases of facts, each over stages of axioms) is climbed first in one solver on `CHEAP_UNITS`,
where nearly every rule is decided as it would be on the whole budget. A rule that spends them gets each phase's
widest stage alone, in a solver of its own, on `SLICE_UNITS` each, and only where one of those spends its
slice too, the whole ladder again on the whole budget: what used to decide it, so no proof is lost, while the
rules whose narrow stages ran away in E-matching are proved in a second instead of spending 20 M units.

No goal is tried before the rule's premises (its facts, the example's, the shape rules at its terms) have a
model (`taso.verify.premises`): from a contradiction z3 proves anything, with a core naming no axiom. A rule
whose text is not what the catalogue makes of it (`taso.verify.admit`) is unknown, and so is one the verifier
fails on: a verdict with the error, and the run goes on.

The budget is counted in z3's deterministic resource units (its ``rlimit``) and quantifier instances, not in
seconds: a wall-clock limit made verdicts depend on the machine's speed and load. A wall-clock limit remains
only as a safety net, its expiry reported as a reason of its own; a worker still on one rule past it is killed
(`taso.verify.workers`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils
import z3

from taso import ops
from taso.cachedir import cache_folder
from taso.errors import CheckFailed
from taso.rules import Rule, condition_to_json, provenance, signing, store
from taso.verify.admit import normalised
from taso.verify.basis import Basis, files_key
from taso.verify.lowering import Lowered, Tracked, lower_rule
from taso.verify.precheck import refute
from taso.verify.premises import ShapeInstances, premises_check
from taso.verify.session import INSTANCE_UNITS, Session
from taso.verify.spec import Axiom, Specs, Unsupported, load_specs
from taso.verify.speccheck import check_specs
from taso.verify.workers import SHARDS, SMALL, Shards

DEFAULT_BUDGET = 20_000_000
"""z3 resource units (its deterministic ``rlimit`` count, plus `INSTANCE_UNITS` per quantifier instance) per
rule, spread over the rule's checks. With z3 5.4.1 the costliest shipped proof spends 11.2 M, so no shipped
proof sits at the budget's edge; 20 M units take 5-50 s on the 2-core reference machine."""
CHEAP_UNITS = 2_000_000
"""The budget of a rule's first climb of its ladder (stages of axioms, phases of facts), in one solver: nearly
every proof and every saturated search ends within it, as it would on the whole budget (the checks are the
same, and the budget only stops them)."""
SLICE_UNITS = 3_000_000
"""Where the first climb spends `CHEAP_UNITS`, each phase's widest stage gets this much alone, in a solver of
its own: the incremental climb spent the whole budget in a narrow stage (E-matching on Conv and Enlarge or Concat
axioms) on rules the widest stage alone proves within 0.2-2.7 M units (2f2098f5a2, d5656f562e, ...)."""
CONSISTENCY_UNITS = 2_000_000
"""z3 resource units for finding a model of a rule's premises (`taso.verify.premises`): milliseconds where they
are linear; the bound keeps a non-linear set from running away (no model found: no proof)."""
DEFAULT_TIMEOUT = 120.0
"""Wall-clock seconds per rule, a safety net only: the budget ends nearly every check first on any machine up to
many times slower than the 2-core reference one. A rule that reaches it is unknown with a reason that says the
verdict then depends on the machine."""
SAFETY_NET = "wall-clock safety net"
"""The reason kind of a rule stopped by --timeout rather than by its budget."""
Z3_VERSION_KEY = "z3_version"
"""The store's meta key naming the z3 of the last verify run."""
FLUSH_SECONDS = 1.0
"""Verdicts are written at least this often, so an interrupted run keeps nearly all its work."""


@dataclass(frozen=True)
class Verdict:
    status: str  # proved | refuted | unknown
    detail: dict


class Prover:
    """Decides rules against one set of specs, each rule in a z3 solver of its own (`Session`).

    A rule's solver is given only the axioms its checks may use that its terms can ever trigger (`reachable`),
    and the shape rules of the symbols those terms and axioms hold: z3 instantiates an axiom only on terms it
    matches, so leaving out one that nothing can trigger loses no proof (and fewer axioms only make fewer
    proofs). Each axiom is guarded by a literal of its own; a check assumes the literals of the axioms it may
    use, so the unsat core names the axioms a proof used. Nothing is ever popped: one solver for every rule
    made a rule's time depend on the rules before it (a 0.2 s proof took 120 s in its shard), and z3's pop
    after a check that ran away in E-matching took longer than any timeout. Each rule's checks also run in a z3
    context of its own, its terms and axioms translated there in a fixed order: in the shared one the terms
    earlier rules left decided which instances z3 made first, so a rule near its budget's edge was proved after
    some rules and not after others; now a verdict is a function of the rule and the specs alone.
    """

    def __init__(
        self, specs: Specs, budget: int = DEFAULT_BUDGET, timeout: float = DEFAULT_TIMEOUT, precheck: bool = True
    ) -> None:
        self.specs = specs
        self.budget = budget
        self.timeout = timeout
        self.precheck = precheck  # without it z3 alone decides: an audit that no proof leans on the pre-check
        self.guarded = {a.name: z3.Implies(z3.Bool(f"axiom {a.name}"), a.formula) for a in specs.axioms}
        self.shape = {name: sym.shape_axioms() for name, sym in specs.symbols.items()}
        self.axioms = {a.name: a for a in specs.axioms}
        self.instances = ShapeInstances(specs)

    def verdict(self, rule: Rule) -> Verdict:
        """The rule's verdict, its detail carrying the provenance (`taso.rules.provenance`); a proof's lists the
        axioms and symbols it rested on, whose digest `verify_rows` adds to its record (`taso.verify.basis`)."""
        t0 = time.perf_counter()
        try:
            v = self._decide(rule)
        except Exception as e:  # noqa: BLE001 - one rule the verifier cannot take must not end the run
            v = Verdict("unknown", {"reason": f"the verifier fails on this rule ({_crash(e)})", "seconds": _since(t0)})
        return Verdict(v.status, {**v.detail, "proof": provenance.record(None)})

    def _decide(self, rule: Rule) -> Verdict:
        t0 = time.perf_counter()
        try:
            text = normalised(rule)
            if (text.src, text.dst) != (rule.src, rule.dst):
                raise Unsupported(
                    "the rule's text is not in the catalogue's normal form (`subst rules add` writes it so)"
                )
            counterexample = refute(rule) if self.precheck else None
            if counterexample is not None:
                return Verdict("refuted", {"counterexample": counterexample, "seconds": _since(t0)})
            unspecified = [op for op in rule.ops if op not in self.specs.by_op and op not in self.specs.lowerings]
            if unspecified:
                return Verdict("unknown", {**_no_spec(unspecified, self.specs), "seconds": _since(t0)})
            low = lower_rule(rule, self.specs)
        except Unsupported as e:
            return Verdict("unknown", {"reason": str(e), "seconds": _since(t0)})
        sizes = {"sizes": "symbolic", "reversible": low.reversible}
        depth = max((t.rank or 0 for g in (rule.src, rule.dst) for t in g.types.values()), default=0)
        ctx, typed = self._context(low, depth)
        if typed != z3.sat:
            # no model of the premises: every goal would follow from them, true or not
            reason = (
                "the example is not well-typed under the specs' requirements"
                if typed == z3.unsat
                else "no model of the premises found (the example's well-typedness is undecided)"
            )
            return Verdict("unknown", {"reason": reason, "seconds": _since(t0)})
        goals = [(i, a, b) for i, (a, b) in enumerate(zip(low.src, low.dst)) if not a.eq(b)]
        if not goals:
            note = "both sides lower to the same terms"
            detail = {"axioms": [], "symbols": sorted(low.used), "note": note, **sizes, "conditions": []}
            return Verdict("proved", {**detail, "seconds": _since(t0)})
        own = _own_symbols(low.used, self.specs.axioms)
        relevant = [a for a in self.specs.axioms if a.symbols <= own]
        first = [a for a in relevant if not a.last_resort]
        stages = [("relevant axioms", first)]
        if len(first) < len(relevant):
            stages.append(("relevant axioms and last resorts", relevant))
        everything = [a for a in self.specs.axioms if not a.last_resort or a.symbols <= own]
        if len(relevant) < len(everything):
            stages.append(("all axioms", everything))
        # a proof for every size first; then one that may assume the example's equal sizes, then its values too
        phases = [[], [t for t in low.tracked if t.general], low.tracked]
        ladder = [(assumable, stage, axioms) for assumable in phases for stage, axioms in stages]
        deadline = t0 + self.timeout
        outcome, stage, left = self._climb(low, goals, ladder, min(self.budget, CHEAP_UNITS), deadline, ctx)
        sessions = [left]
        if outcome[0] == "budget" and self.budget > CHEAP_UNITS:
            # each phase's widest stage alone, in a context of its own, on a slice of the budget; then, only where
            # a slice was spent and none proved, the whole ladder again on the whole budget, as it always ran
            for step in [(assumable, *stages[-1]) for assumable in phases]:
                outcome, stage, left = self._climb(
                    low, goals, [step], min(self.budget, SLICE_UNITS), deadline, z3.Context()
                )
                sessions.append(left)
                if outcome[0] not in ("open", "budget"):
                    break
            if any(x.spent >= x.budget for x in sessions[1:]) and outcome[0] in ("open", "budget"):
                outcome, stage, left = self._climb(
                    low, goals, ladder, self.budget, deadline, self._context(low, depth)[0]
                )
                sessions.append(left)
        costs = {
            "units": sum(x.units for x in sessions),
            "instances": sum(x.instances for x in sessions),
            "given": len(left.given),
            "passes": len(sessions),
        }
        if outcome[0] == "proved":
            names, needed = outcome[1]  # type: ignore[misc]
            conditions = [condition_to_json(t.condition) for t in needed]
            symbols = sorted(low.used.union(*(self.axioms[a].symbols for a in names)))
            detail = {"axioms": names, "symbols": symbols, "stage": stage, **sizes, "conditions": conditions}
            if not names:  # equal by the facts alone: sound only because the premises have a model
                detail["flag"] = "no axiom in the proof: the sides differ, and the facts alone equate them"
            return Verdict("proved", {**detail, **costs, "seconds": _since(t0)})
        reasons = {
            "budget": f"budget spent: {self.budget} z3 resource units (--budget), quantifier instances counted at "
            f"{INSTANCE_UNITS} each, without a proof",
            "timeout": f"{SAFETY_NET}: over {self.timeout:g} s (this verdict depends on the machine)",
            "open": f"no proof from the axioms for output {outcome[1]} (a missing axiom?)",
            "contradiction": f"the premises and axioms contradict each other without output {outcome[1]}'s goal "
            "(an unsound axiom or shape rule?): no proof",
        }
        return Verdict("unknown", {"reason": reasons[outcome[0]], **costs, "seconds": _since(t0)})

    def _context(self, low: Lowered, depth: int) -> tuple[z3.Context, z3.CheckSatResult]:
        """A fresh z3 context for the rule, and whether its premises (its facts, the example's, the shape rules
        at its terms up to rank ``depth``) have a model, checked in it first: each climb of the whole ladder
        starts from such a context, so the last decides as the first would have on the whole budget."""
        ctx = z3.Context()
        premises = [*low.facts, *(t.fact for t in low.tracked)]
        return ctx, premises_check([*low.src, *low.dst], premises, self.instances, depth, CONSISTENCY_UNITS, ctx)

    def _climb(
        self,
        low: Lowered,
        goals: list[tuple[int, z3.ExprRef, z3.ExprRef]],
        ladder: Sequence[tuple[Sequence[Tracked], str, Sequence[Axiom]]],
        budget: int,
        deadline: float,
        ctx: z3.Context,
    ) -> tuple[tuple[str, object], str, Session]:
        """`_prove`'s outcome at the first step of ``ladder`` (the facts it may assume, its stage's name and
        axioms) that is not "open", else at its last, in one solver of ``budget`` units in ``ctx``; and that
        step's stage name and the solver's session."""
        session = Session(self, budget, goals, low.facts, low.tracked, low.used, deadline, ctx)
        outcome: tuple[str, object] = ("open", None)
        step = ladder[0]
        for step in ladder:
            outcome = self._prove(session, step[2], step[0])
            if outcome[0] != "open":
                break
        return outcome, step[1], session

    def _prove(self, session: Session, axioms: Sequence[Axiom], assumable: Sequence[Tracked]) -> tuple[str, object]:
        """("proved", (axiom names, the tracked facts used)) | ("budget" | "timeout", None) | ("open" |
        "contradiction", the output not proved). Each tracked fact is guarded by a literal of its own, so the unsat core names those a proof
        assumed, as it names the axioms."""
        given = reachable(session.symbols, axioms)
        session.give(given, self)
        facts_on = [session.facts_on[id(t)] for t in assumable]
        assumed = [z3.Bool(f"axiom {a.name}", session.ctx) for a in given] + facts_on
        core: set[str] = set()
        session.solver.set("core.minimize", bool(assumable))  # only the facts a proof needs: they restrict it
        for i, goal in session.goals:
            result = session.check([*assumed, goal])
            if isinstance(result, str):
                return result, None
            if result != z3.unsat:
                return "open", i
            names = {c.decl().name() for c in session.solver.unsat_core()}
            if f"goal {i}" not in names:  # unsat without the goal: the premises and axioms contradict each other
                return "contradiction", i
            core.update(names)
        needed = [t for t in assumable if f"fact {session.index[id(t)]}" in core]
        return "proved", (sorted(c.removeprefix("axiom ") for c in core if c.startswith("axiom ")), needed)


def _no_spec(unspecified: list[str], specs: Specs) -> dict:
    """The detail of a rule over ops no spec models: the reason names them and what the catalogue says of them."""
    why = "; ".join(f"{op}: {ops.get(op).no_spec}" for op in unspecified if op in ops.OPS and ops.get(op).no_spec)
    reason = f"no spec for {', '.join(unspecified)}: no file under {specs.root} declares a symbol for it"
    return {"reason": reason + (f" ({why})" if why else ""), "unspecified": unspecified}


def _own_symbols(used: set[str], axioms: Sequence[Axiom]) -> frozenset[str]:
    """The symbols a rule's terms hold, and those the `Axiom.eager` axioms they trigger rewrite them into: what
    makes an axiom relevant to the rule."""
    own = set(used)
    reachable(own, [a for a in axioms if a.eager])
    return frozenset(own)


def reachable(symbols: set[str], axioms: Sequence[Axiom]) -> list[Axiom]:
    """The ``axioms`` z3 can ever instantiate on terms over ``symbols``: those with a triggering side whose
    symbols are all there or arise from such axioms in turn (without model-based instantiation an axiom no
    term matches does nothing). ``symbols`` grows by theirs."""
    left = list(axioms)
    out: list[Axiom] = []
    grew = True
    while grew:
        grew = False
        for a in list(left):
            if any(side <= symbols for side in a.triggers):
                out.append(a)
                left.remove(a)
                symbols |= a.symbols
                grew = True
    return sorted(out, key=lambda a: a.name)


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


# ---- over a store, in parallel ----------------------------------------------------------------------------

_WORKER: Prover | None = None
"""The prover of this process (each worker builds its own: z3 state does not survive a fork safely)."""


def _init_worker(specs_dir: str, budget: int, timeout: float) -> None:
    global _WORKER
    _WORKER = Prover(load_specs(specs_dir), budget, timeout)


def _decide(row: dict) -> tuple[int, Verdict]:
    assert _WORKER is not None
    try:
        rule = Rule.from_row(row)
    except Exception as e:  # noqa: BLE001 - a row that does not parse gets a verdict, not a traceback
        reason = f"the rule's text does not parse ({_crash(e)})"
        return row["id"], Verdict("unknown", {"reason": reason, "proof": provenance.record(None)})
    return row["id"], _WORKER.verdict(rule)


def _crash(e: Exception) -> str:
    """An exception as one line of a verdict's reason."""
    lines = str(e).splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


@dataclass
class Summary:
    counts: Counter = field(default_factory=Counter)
    skipped: int = 0
    seconds: float = 0.0
    workers: int = 1
    reasons: Counter = field(default_factory=Counter)
    unspecified: Counter = field(default_factory=Counter)
    """Op -> rules left unknown because no spec models it."""

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
            "unspecified_ops": dict(self.unspecified.most_common()),
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
        for op, count in self.unspecified.most_common():
            out.append(
                f"warning   {count} rule(s) use {op}, which no spec models: they stay unknown until a spec under "
                "specs/ declares it (see specs/relu.py)"
            )
        if self.reasons[SAFETY_NET]:
            out.append(
                f"warning   {self.reasons[SAFETY_NET]} rule(s) hit --timeout: their verdicts depend on the machine"
            )
        return out


def _passed_marker(specs: Specs) -> tuple[Path, str]:
    """Where a passed spec check of ``specs`` is remembered (OSError where the cache folder cannot be made), and
    what that record must say: the digest of what was checked (the spec files, and the code that checks them:
    the catalogue's semantics, the spec vocabulary, the checker), the axioms checked, and that they passed. The
    record is filed under that digest and read back only where it says exactly this, so an empty or planted
    file does not switch the check off."""
    h = hashlib.sha256(files_key(specs.root).encode())
    here = Path(__file__).resolve().parent.parent
    for path in (*sorted((here / "ops").glob("*.py")), here / "verify" / "speccheck.py"):
        h.update(path.read_bytes())
    record = json.dumps({"checked": h.hexdigest(), "axioms": [a.name for a in specs.axioms], "result": "passed"})
    return cache_folder("specs-checked") / h.hexdigest()[:32], record


def require_sound(specs: Specs) -> None:
    """Raise `CheckFailed` unless every axiom holds against the ops' semantics (`subst verify --check-specs`).
    A pass is remembered in the user's cache (`_passed_marker`), so each verify of the same specs does not pay
    it again; a cache folder that cannot be made only means checking every time."""
    try:
        marker, record = _passed_marker(specs)
    except OSError:
        marker, record = None, ""
    with contextlib.suppress(OSError):
        if marker is not None and marker.read_text() == record:
            return
    failing = [r.name for r in check_specs(specs) if not r.ok]
    if failing:
        raise CheckFailed(
            f"{len(failing)} axiom(s) in {specs.root} fail against the ops' semantics ({', '.join(failing)}): "
            "no rule is proved from them; see `subst verify --check-specs`"
        )
    with contextlib.suppress(OSError):  # an unwritable cache only means checking again next time
        if marker is not None:
            marker.write_text(record)


def pending(db: sqlite_utils.Database, force: bool = False) -> list[dict]:
    """The rules to decide: candidates, or every rule with ``force``."""
    return [r for r in db["rules"].rows_where(order_by="id") if force or r["status"] == "candidate"]


def verify_rows(
    db: sqlite_utils.Database,
    rows: list[dict],
    specs: Specs,
    budget: int = DEFAULT_BUDGET,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    """Decide ``rows`` (from `pending`), storing verdicts as they come, so an interrupted run keeps its work.
    Refuses (`CheckFailed`, nothing written) specs whose axioms fail `taso.speccheck`: a wrong axiom proves
    wrong rules."""
    t0 = time.perf_counter()
    with _deciders(len(rows), specs, budget, timeout, workers) as decide:  # workers load while the rows are read
        # refused before any write: a row that does not parse, or whose id is not its content's (a proof binds it)
        rules = {r["id"]: store.rule_of(r) for r in rows}
        key = signing.user_key(create=True) if rows else b""  # signs each proof; refused before any work
        if rows:
            require_sound(specs)
        if rows:  # verdicts hold for this z3 only: another version's E-matching finds other proofs
            store.set_meta(db, Z3_VERSION_KEY, z3.get_full_version())
        summary = Summary(skipped=db["rules"].count - len(rows), workers=workers)
        # digested here, not in the provers: their z3 state (and so which proofs they find) stays their own
        basis = Basis.of(specs)
        batch: list[tuple[int, Verdict]] = []
        flushed = time.perf_counter()
        try:
            for rule_id, v in decide(rows):
                if v.status == "proved":
                    rule = rules[rule_id]
                    digest = basis.digest(rule.ops, v.detail["symbols"], v.detail["axioms"])
                    v = Verdict(v.status, {**v.detail, "proof": provenance.seal(rule, v.detail, digest, key)})
                batch.append((rule_id, v))
                summary.counts[v.status] += 1
                if v.status == "unknown":
                    summary.reasons[_reason_kind(v.detail["reason"])] += 1
                    summary.unspecified.update(v.detail.get("unspecified", ()))
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
        store.set_verdicts(db, [(rule_id, v.status, v.detail) for rule_id, v in batch])
    batch.clear()


KILL_GRACE = 5.0
"""Seconds past --timeout after which a worker still on one rule is killed (`taso.verify.workers`): the check
itself stops at the timeout, and tearing its solver down may take as long again."""


@contextlib.contextmanager
def _deciders(
    n: int, specs: Specs, budget: int, timeout: float, workers: int
) -> Iterator[Callable[[list[dict]], Iterator[tuple[int, Verdict]]]]:
    """What decides ``n`` rows: this process where they are few (`SMALL`), else worker processes, started now."""
    global _WORKER
    if n < SMALL:
        _WORKER = Prover(specs, budget, timeout)
        yield lambda rows: map(_decide, rows)
        return
    init = (str(specs.root), budget, timeout)
    with Shards(_init_worker, init, _decide, _killed, min(workers, SHARDS), timeout + KILL_GRACE) as pool:
        yield pool.decide  # type: ignore[misc]


def _killed(row: dict, why: str) -> tuple[int, Verdict]:
    """The verdict of a rule whose worker did not come back from it: unknown, by the safety net."""
    reason = f"{SAFETY_NET}: {why} (this verdict depends on the machine)"
    return row["id"], Verdict("unknown", {"reason": reason, "proof": provenance.record(None)})


def _reason_kind(reason: str) -> str:
    """Group reasons for the summary by their text up to the first colon (or the output they name)."""
    return reason.split(":")[0].split(" for output")[0]
