"""One rule's z3 solver in a context of its own (`taso.verify.run.Prover`), its budget and what its checks spent."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import z3
from z3 import z3core

from taso.verify.lowering import Tracked
from taso.verify.spec import Axiom, assert_all

if TYPE_CHECKING:
    from taso.verify.run import Prover

INSTANCE_UNITS = 200
"""What one quantifier instance costs of a rule's budget (`Session`), beside z3's own resource count: 20 M
units allow 100 k instances. E-matching is what that count barely sees: Eye,Mul,MatMul => Eye,Mul,Mul (rule id
08936cbe23, mul-assoc and mul-comm) made 200 k instances in 5 M units and 120 s, and the arith pool's x - x and
x / y rules ran to 100 k instances in a few seconds, then on for minutes with z3's count all but still; all now
end at this bound. The costliest shipped proof (Conv,Concat,Concat,Concat, 44 k instances and 2.3 M units)
spends 11.2 M."""


class Session:
    """One solver of a rule (a climb of its ladder, `taso.verify.run.Prover`), its limits and what its checks
    spent, in the context ``ctx``, where everything it is given is translated (`taso.verify.spec.assert_all`).

    The facts are asserted plainly; each tracked fact, output goal and axiom behind a literal a check assumes,
    so nothing is ever retracted (no pop). The budget is z3's resource count plus `INSTANCE_UNITS` per
    quantifier instance: E-matching that z3's count barely sees (some 45 k instances in 1.3 M units, 3 s) is
    charged as well, through z3's own limit on instances (``smt.qi.max_instances``, counted per solver). A wall-clock deadline remains as the safety net."""

    def __init__(
        self,
        prover: Prover,
        budget: int,
        goals: Sequence[tuple[int, z3.ExprRef, z3.ExprRef]],
        facts: list[z3.BoolRef],
        tracked: Sequence[Tracked],
        used: set[str],
        deadline: float,
        ctx: z3.Context,
    ) -> None:
        self.budget = budget
        self.deadline = deadline
        self.ctx = ctx
        self.solver = z3.Solver(ctx=ctx)
        self.solver.set("smt.mbqi", False)  # E-matching on the axioms' patterns only: saturate or stop, never guess
        self.solver.set("smt.qi.max_instances", max(1, self.budget // INSTANCE_UNITS))
        self.index = {id(t): k for k, t in enumerate(tracked)}
        on = [(f"fact {k}", t.fact) for k, t in enumerate(tracked)] + [(f"goal {i}", a != b) for i, a, b in goals]
        literals = _assert_guarded(self.solver, facts, on)
        self.facts_on = {id(t): literals[k] for k, t in enumerate(tracked)}
        self.goals = [(i, literals[len(tracked) + k]) for k, (i, _, _) in enumerate(goals)]
        self.symbols = set(used)  # every symbol the lowering applied, in the terms or the facts
        self.shaped: set[str] = set()
        self.given: set[str] = set()
        self.units = 0
        self.instances = 0

    def give(self, axioms: Sequence[Axiom], prover: Prover) -> None:
        """Assert ``axioms`` (behind their literals) and the shape rules of every symbol now in play, once each."""
        new = [prover.guarded[a.name] for a in axioms if a.name not in self.given]
        new += [q for name in sorted(self.symbols - self.shaped) for q in prover.shape[name]]
        assert_all(self.solver, new)
        self.given.update(a.name for a in axioms)
        self.shaped |= self.symbols

    def check(self, assumed: list[z3.BoolRef]) -> z3.CheckSatResult | str:
        """z3's answer, or "budget" / "timeout" when that limit ended the check (or left nothing to start it)."""
        ms = int((self.deadline - time.perf_counter()) * 1000)
        if self.spent >= self.budget:
            return "budget"
        if ms <= 0:
            return "timeout"
        s = self.solver
        s.set("rlimit", self.budget - self.spent)
        s.set("timeout", ms)
        before = _units(s)
        result = s.check(*assumed)
        stats = s.statistics()
        self.units += _units(s) - before
        self.instances = (
            int(stats.get_key_value("quant instantiations")) if "quant instantiations" in stats.keys() else 0
        )
        if result == z3.unknown and self.spent >= self.budget:
            return "budget"
        if result == z3.unknown and s.reason_unknown() in ("timeout", "canceled"):
            return "timeout"
        return result

    @property
    def spent(self) -> int:
        """The budget spent: resource units and instances at their price."""
        return self.units + self.instances * INSTANCE_UNITS


def _assert_guarded(
    solver: z3.Solver, facts: Sequence[z3.BoolRef], guarded: Sequence[tuple[str, z3.BoolRef]]
) -> list[z3.BoolRef]:
    """Assert ``facts`` and, for each (name, formula) of ``guarded``, ``Implies(Bool(name), formula)`` (``facts``
    and ``formula`` of the main context) in ``solver``'s context, through z3's C API: the very terms z3's Python
    API builds (tests/test_verify_speed.py), in the same order, at a fraction of the cost. The literals, in the
    solver's context, in the order of ``guarded``."""
    main = z3.main_ctx().ref()
    bool_sort = z3.BoolSort().ast
    v = z3.AstVector()
    for f in facts:
        v.push(f)
    for name, formula in guarded:
        literal = z3core.Z3_mk_const(main, z3core.Z3_mk_string_symbol(main, name), bool_sort)
        z3core.Z3_ast_vector_push(main, v.vector, z3core.Z3_mk_implies(main, literal, formula.as_ast()))
    ctx = solver.ctx
    out = v.translate(ctx)
    ref = ctx.ref()
    literals = []
    for k in range(len(out)):
        a = z3core.Z3_ast_vector_get(ref, out.vector, k)
        z3core.Z3_solver_assert(ref, solver.solver, a)
        if k >= len(facts):
            literals.append(z3.BoolRef(z3core.Z3_get_app_arg(ref, a, 0), ctx))
    return literals


def _units(s: z3.Solver) -> int:
    """z3's resource count so far in the rule's context (it only grows; a check's cost is the difference)."""
    return int(s.statistics().get_key_value("rlimit count"))
