"""Whether a rule's premises have a model before any goal is tried: an inconsistent premise set proves anything.

A rule's premises are what its lowering states (`taso.verify.lowering.Lowered.facts`), the example's tracked
facts, and the specs' shape axioms. Those axioms are quantified, and z3's E-matching (the prover runs without
model-based instantiation) answers ``unknown`` on them, never ``sat``. So the check here is quantifier-free:
every shape axiom instantiated at every application in the rule's terms, at every dimension up to the
largest rank the rule's example has, and its rank. Each instance follows from the axioms, so ``unsat`` here
means the premises contradict each other (a lowering whose shapes contradict the example: a rank-3 Transpose
lowered as the 2-D one); ``sat`` gives sizes and attribute values at which every lowered node has the dims its
shape rule gives it and every fact holds. With every example size tracked, that is the example itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace

import z3

from taso.verify.spec import D, R, Specs, applications, assert_all, translated


def premises_check(
    terms: Iterable[z3.ExprRef],
    premises: list[z3.BoolRef],
    specs: Specs,
    depth: int,
    units: int,
    ctx: z3.Context,
) -> z3.CheckSatResult:
    """z3's answer for ``premises`` with the shape axioms of every application in ``terms`` (and in the
    premises) instantiated at dimensions ``0 .. depth - 1``, within ``units`` resource units, decided in the
    rule's own context ``ctx`` (`taso.verify.run.Prover`)."""
    shapes = []
    for t in applications([*terms, *premises], specs.symbols):
        sym = specs.symbols[t.decl().name()]
        args = t.children()
        a = SimpleNamespace(**sym.group(args[: sym.n_ints]))
        xs = args[sym.n_ints :]
        shapes += [R(t) == sym.rank(a, *xs), *(D(t, i) == sym.dims(i, a, *xs) for i in range(depth))]
    s = z3.Solver(ctx=ctx)
    s.set("rlimit", units)
    assert_all(s, shapes)
    return s.check(*translated(premises, ctx))
