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

import ctypes
from collections.abc import Iterable
from types import SimpleNamespace

import z3
from z3 import z3core
from z3.z3 import _to_expr_ref

from taso.verify.spec import D, R, Specs, T, applications, assert_all, translated


class ShapeInstances:
    """The shape rule of an application at its rank and dims ``0 .. depth - 1``, as the premise check asserts it.

    Building those terms with the spec's Python shape rule cost most of a premise check. A shape rule reads its
    attributes (it may branch on them) but only wraps its tensor arguments in `D` and `R`, so the instances are
    made once per symbol, attribute values and depth, over stand-in tensors, and then the application's own
    arguments are substituted for the stand-ins: z3 substitutes without simplifying, so these are the very terms
    the shape rule builds at the application (so for all 38,189 applications in the shipped store's rules;
    tests/test_verify_speed.py holds rules whose shape rules branch on attributes to it), and the premise check,
    and the context it leaves to the proof (`taso.verify.run.Prover`), are the same. A shape rule must not
    branch on its tensor arguments (none does): the stand-ins would take one branch for every application.
    """

    def __init__(self, specs: Specs) -> None:
        self.specs = specs
        self._made: dict[tuple[str, tuple[int, ...], int], tuple[list[z3.ExprRef], ctypes.Array, list[z3.BoolRef]]] = {}
        """(symbol, its attribute arguments' ids, depth) -> (the stand-ins, as an array for z3's C API, and the
        instances over them); the instances hold the attribute terms, so their ids stay theirs."""

    def at(self, t: z3.ExprRef, depth: int) -> list[z3.BoolRef]:
        """The rank of the application ``t`` and its dims up to ``depth`` by its symbol's shape rule."""
        sym = self.specs.symbols[t.decl().name()]
        ctx, ast = t.ctx, t.as_ast()
        ref = ctx.ref()
        args = [z3core.Z3_get_app_arg(ref, ast, k) for k in range(z3core.Z3_get_app_num_args(ref, ast))]
        key = (sym.name, tuple(z3core.Z3_get_ast_id(ref, x) for x in args[: sym.n_ints]), depth)
        if key not in self._made:
            attrs = [_to_expr_ref(x, ctx) for x in args[: sym.n_ints]]
            stand = [z3.Const(f"shape rule argument {k}", T) for k in range(sym.arity)]
            a = SimpleNamespace(**sym.group(attrs))
            general = sym.fn(*attrs, *stand)
            made = [R(general) == sym.rank(a, *stand), *(D(general, i) == sym.dims(i, a, *stand) for i in range(depth))]
            self._made[key] = (stand, (z3.Ast * len(stand))(*(x.as_ast() for x in stand)), made)
        _, stand_in, made = self._made[key]
        if not sym.arity:
            return made
        own = (z3.Ast * sym.arity)(*args[sym.n_ints :])
        return [z3.BoolRef(z3core.Z3_substitute(ref, q.as_ast(), sym.arity, stand_in, own), ctx) for q in made]


def premises_check(
    terms: Iterable[z3.ExprRef],
    premises: list[z3.BoolRef],
    shapes: ShapeInstances,
    depth: int,
    units: int,
    ctx: z3.Context,
) -> z3.CheckSatResult:
    """z3's answer for ``premises`` with the shape axioms of every application in ``terms`` (and in the
    premises) instantiated at dimensions ``0 .. depth - 1`` (`ShapeInstances`), within ``units`` resource units,
    decided in the rule's own context ``ctx`` (`taso.verify.run.Prover`)."""
    instances = [q for t in applications([*terms, *premises], shapes.specs.symbols) for q in shapes.at(t, depth)]
    s = z3.Solver(ctx=ctx)
    s.set("rlimit", units)
    assert_all(s, instances)
    # s.check(*assumed) without wrapping each assumption back in Python (15 % of the premise check, profiled)
    assumed = translated(premises, ctx)
    ref = ctx.ref()
    asts = (z3.Ast * len(assumed))(*(z3core.Z3_ast_vector_get(ref, assumed.vector, k) for k in range(len(assumed))))
    return z3.CheckSatResult(z3core.Z3_solver_check_assumptions(ref, s.solver, len(assumed), asts))
