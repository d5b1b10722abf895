"""The vocabulary of operator specs: uninterpreted functions with shape rules, and axioms as data.

Tensors are one uninterpreted z3 sort ``T``; an operator is a function ``Int^k x T^n -> T`` whose integer
arguments are its attributes (TASO-style). Shapes are two uninterpreted functions, ``dim(t, i)`` and
``rank(t)``, defined per symbol by a shape rule, so an axiom can carry shape side conditions (split sizes equal
concat sizes, ...) and stay polymorphic in the sizes. Each symbol also names the catalogue op that computes it,
which is the concrete semantics `taso.speccheck` validates every axiom against.

A spec file under ``specs/`` declares ``SYMBOLS`` (a list of `Symbol`), ``axioms(f) -> list[Axiom]`` (``f``
reaches every loaded symbol by name) and optionally ``LOWER``: IR op name -> function lowering a node whose
mapping onto symbols is not one to one (see `taso.lowering`).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import z3
from z3 import z3core
from z3.z3 import _to_expr_ref

from taso.errors import BadInput
from taso.ir import TensorType
from taso.ops import OPS, infer

T = z3.DeclareSort("T")
DIM = z3.Function("dim", T, z3.IntSort(), z3.IntSort())
RANK = z3.Function("rank", T, z3.IntSort())

IntExpr = z3.ArithRef | int
_ATTR = re.compile(r"([a-z_]+)(?:\[(\d+)\])?")


class Shape(tuple):
    """A concrete shape standing for a tensor, so a shape rule evaluates in Python (the spec check's speed)."""


def D(x: z3.ExprRef | Shape, i: IntExpr) -> IntExpr:
    """Size of dimension ``i`` of tensor ``x``."""
    if isinstance(x, Shape):
        return x[i]
    return z3.ArithRef(_app(DIM, x, _index(i) if isinstance(i, int) else i), DIM.ctx)


def R(x: z3.ExprRef | Shape) -> IntExpr:
    """Rank of tensor ``x``."""
    return len(x) if isinstance(x, Shape) else z3.ArithRef(_app(RANK, x), RANK.ctx)


@cache
def _index(i: int) -> z3.ArithRef:
    """The numeral ``i``, made once: shape rules ask for the same few dimensions thousands of times a run."""
    return z3.IntVal(i)


def _app(f: z3.FuncDeclRef, *args: z3.ExprRef | int) -> z3.Ast:
    """The AST of ``f(*args)``, the very term the Python call builds (an int is its numeral), through z3's C
    API, which checks the sorts: the Python call's casts cost most of lowering a rule and checking its
    premises. The caller wraps it in the class of ``f``'s range."""
    exprs = [z3.IntVal(a) if isinstance(a, int) else a for a in args]  # alive until z3 holds them in the term
    asts = (z3.Ast * len(exprs))(*(e.as_ast() for e in exprs))
    return z3core.Z3_mk_app(f.ctx.ref(), f.ast, len(exprs), asts)


def translated(exprs: Iterable[z3.ExprRef], ctx: z3.Context) -> z3.AstVector:
    """``exprs`` in the context ``ctx``, in order, translated in one call: one translation per term cost most
    of deciding a rule that is proved at once."""
    v = z3.AstVector()
    for e in exprs:
        v.push(e)
    return v.translate(ctx)


def assert_all(solver: z3.Solver, exprs: Iterable[z3.ExprRef]) -> None:
    """Assert ``exprs`` (of the main context) in ``solver``, translated into its context (`translated`), through
    z3's C API: wrapping each formula back, as ``Solver.add`` does, cost as much again."""
    ctx = solver.ctx
    v = translated(exprs, ctx)
    for k in range(len(v)):
        z3core.Z3_solver_assert(ctx.ref(), solver.solver, z3core.Z3_ast_vector_get(ctx.ref(), v.vector, k))


def If(c: object, a: IntExpr, b: IntExpr) -> IntExpr:  # noqa: N802 - mirrors z3.If
    if isinstance(c, bool):
        return a if c else b
    return z3.If(c, a, b)


def window(size: IntExpr, pad: IntExpr, k: IntExpr, stride: IntExpr) -> IntExpr:
    """Output length of a sliding window (conv, pooling) over ``size`` with ``pad`` in all."""
    span = size + pad - k
    return (span // stride if isinstance(span, int) and isinstance(stride, int) else span / stride) + 1


def pick(i: IntExpr, dims: Sequence[IntExpr]) -> IntExpr:
    """Dimension ``i`` of the shape ``dims``, for a symbolic ``i``."""
    out = dims[-1]
    for k in reversed(range(len(dims) - 1)):
        out = If(i == k, dims[k], out)
    return out


def nchw(i: IntExpr, n: IntExpr, c: IntExpr, h: IntExpr, w: IntExpr) -> IntExpr:
    """Dimension ``i`` of the 4-D shape (n, c, h, w)."""
    return pick(i, (n, c, h, w))


def pool_dims(i: IntExpr, a: SimpleNamespace, x: z3.ExprRef) -> z3.ArithRef:
    """Shape rule of both poolings: channels kept, windows of ``a.kernel_shape`` over the spatial dims."""
    oh = window(D(x, 2), a.pads[0] + a.pads[2], a.kernel_shape[0], a.strides[0])
    ow = window(D(x, 3), a.pads[1] + a.pads[3], a.kernel_shape[1], a.strides[1])
    return nchw(i, D(x, 0), D(x, 1), oh, ow)


def tensors(names: str) -> list[z3.ExprRef]:
    """Universally quantified tensor variables for an axiom."""
    return [z3.Const(n, T) for n in names.split()]


def ints(names: str) -> list[z3.ArithRef]:
    """Universally quantified integer variables (sizes, attributes) for an axiom."""
    return [z3.Int(n) for n in names.split()]


@dataclass(frozen=True, eq=False)
class Symbol:
    """An operator as an uninterpreted function, with its shape rule and its concrete semantics.

    ``attrs`` lists integer attributes in argument order: ``"axis"`` is one int, ``"pads[4]"`` a tuple of four.
    ``dims(i, a, *xs)`` and ``rank(a, *xs)`` give the result's shape from the attributes ``a`` (a namespace)
    and the tensor arguments (use `D` and `R`). The numpy semantics is the catalogue op ``op`` called with the
    attributes plus ``fixed`` ones and ``derived`` ones (computed from the argument arrays), unless ``compute``
    overrides it. ``requires(a, *xs)``, where given, is what a well-typed application satisfies beyond its
    shape rule (a conv's input channels are its kernel's times its group); lowering a rule states it as a fact,
    which is what ties a free attribute to the sizes of the rule's example.
    """

    name: str
    arity: int
    dims: Callable[..., IntExpr]
    rank: Callable[..., IntExpr]
    attrs: tuple[str, ...] = ()
    op: str = ""
    fixed: Mapping[str, object] = field(default_factory=dict)
    derived: Mapping[str, Callable[[Sequence[np.ndarray]], object]] = field(default_factory=dict)
    compute: Callable[[dict, Sequence[np.ndarray]], np.ndarray] | None = None
    requires: Callable[..., z3.BoolRef] | None = None

    @cached_property
    def layout(self) -> tuple[tuple[str, int | None], ...]:
        """(name, length) per attribute; length None for a scalar."""
        out = []
        for a in self.attrs:
            m = _ATTR.fullmatch(a)
            if not m:
                raise BadInput(f"symbol {self.name}: bad attribute {a!r} (want 'name' or 'name[n]')")
            out.append((m.group(1), int(m.group(2)) if m.group(2) else None))
        return tuple(out)

    @cached_property
    def n_ints(self) -> int:
        return sum(1 if n is None else n for _, n in self.layout)

    @cached_property
    def fn(self) -> z3.FuncDeclRef:
        return z3.Function(self.name, *[z3.IntSort()] * self.n_ints, *[T] * self.arity, T)

    def flat(self, attrs: Mapping[str, object]) -> list[IntExpr]:
        """Attribute values in argument order; raises KeyError/ValueError on a missing or mis-sized one."""
        out: list[IntExpr] = []
        for name, n in self.layout:
            v = attrs[name]
            if n is None:
                out.append(v)  # type: ignore[arg-type]
            else:
                if len(v) != n:  # type: ignore[arg-type]
                    raise ValueError(f"{self.name}.{name} needs {n} values, got {v}")
                out.extend(v)  # type: ignore[arg-type]
        return out

    def group(self, flat: Sequence[object]) -> dict[str, object]:
        """Inverse of `flat`: a dict of scalars and tuples."""
        out, k = {}, 0
        for name, n in self.layout:
            if n is None:
                out[name], k = flat[k], k + 1
            else:
                out[name], k = tuple(flat[k : k + n]), k + n
        return out

    def __call__(self, *xs: z3.ExprRef, **attrs: object) -> z3.ExprRef:
        if len(xs) != self.arity:
            raise TypeError(f"{self.name} takes {self.arity} tensors, got {len(xs)}")
        return z3.ExprRef(_app(self.fn, *self.flat(attrs), *xs), self.fn.ctx)

    def shape_axioms(self) -> list[z3.BoolRef]:
        """dim and rank of every application, each triggered only when a condition asks for it. A dimension is
        defined only below the rank: out of range, two shape rules that agree in range (the transpose's
        ``1 - i``, a constant's last size) could disagree, and an axiom equating their terms would then make
        the premises contradictory, which proves every goal."""
        flat = [z3.Int(f"{self.name}_a{k}") for k in range(self.n_ints)]
        xs = [z3.Const(f"{self.name}_x{k}", T) for k in range(self.arity)]
        i = z3.Int(f"{self.name}_i")
        t = self.fn(*flat, *xs)
        a = SimpleNamespace(**self.group(flat))
        bound = [*flat, *xs]
        in_range = z3.And(i >= 0, i < self.rank(a, *xs))
        return [
            z3.ForAll(
                [*bound, i],
                z3.Implies(in_range, DIM(t, i) == self.dims(i, a, *xs)),
                patterns=[DIM(t, i)],
                qid=f"dim-{self.name}",
            ),
            z3.ForAll(bound, RANK(t) == self.rank(a, *xs), patterns=[RANK(t)], qid=f"rank-{self.name}")
            if bound
            else RANK(t) == self.rank(a),
        ]

    def run(self, attrs: dict, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """The concrete value of one application (numpy reference semantics)."""
        if self.compute is not None:
            return self.compute(attrs, arrays)
        full = {**self.fixed, **{k: f(arrays) for k, f in self.derived.items()}, **attrs}
        infer(self.op, [TensorType("float32", x.shape) for x in arrays], full)  # refuses ill-typed arguments
        return OPS[self.op].run(list(arrays), full)[0]


@dataclass(frozen=True, eq=False)
class Axiom:
    """``lhs == rhs`` for all values of the variables whose shapes are ``shapes`` and where ``when`` holds.

    ``shapes`` maps each tensor variable's name to its shape (ints or integer variables): a size variable
    used twice is a side condition (the two dimensions are equal), and the declared shapes make both sides
    well-typed, so the axiom is sound in both directions. A ``generic`` axiom holds at every rank wherever one
    side is well-typed and that makes the other well-typed too (``when`` may name dims with `D` for that):
    z3 gets it without the shape conditions, and the spec check uses ``shapes`` as its example. Integer
    variables that appear only in the shapes (not on the left side) are read off the tensors, so the left side
    is always a trigger. ``domains`` gives the values the spec check tries per integer variable (default 1..3).
    """

    name: str
    lhs: z3.ExprRef
    rhs: z3.ExprRef
    shapes: Mapping[str, tuple[IntExpr, ...]]
    when: tuple[z3.BoolRef, ...] = ()
    domains: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    generic: bool = False
    oriented: bool = False
    """Only the left side triggers it: a rewrite toward a normal form (slices move toward the inputs), which
    keeps the search from growing terms both ways."""
    last_resort: bool = False
    """Tried only on rules the other relevant axioms leave open, and never on a rule that does not mention its
    symbols (not even in the verifier's last stage, which tries every other axiom): an axiom whose trigger
    also fires inside proofs that do not need it (slices of slices can appear as the slice axioms rewrite)
    would otherwise spend their budget."""
    eager: bool = False
    """Arithmetic on known numbers (specs/numbers.py: x / sqrt 2 is x * (1 / sqrt 2)): wherever a rule's terms
    trigger it, the symbols it rewrites into count as the rule's own, so the axioms over that form (GELU's
    definition by a product where the rule divides) are among its relevant ones (`taso.verify.run`), not only in
    the last stage."""
    spec: str = ""

    @cached_property
    def tensor_vars(self) -> list[z3.ExprRef]:
        return _consts([self.lhs, self.rhs], T)

    @cached_property
    def int_vars(self) -> list[z3.ExprRef]:
        dims = [z3.IntVal(d) if isinstance(d, int) else d for s in self.shapes.values() for d in s]
        return _consts([self.lhs, self.rhs, *dims, *self.when], z3.IntSort())

    @cached_property
    def symbols(self) -> frozenset[str]:
        """Names of the functions the axiom mentions (what makes it relevant to a rule)."""
        return frozenset(_decls([self.lhs, self.rhs]))

    @cached_property
    def triggers(self) -> tuple[frozenset[str], ...]:
        """The symbols of each of its patterns (a side that can serve as one, the left only where `oriented`):
        z3 instantiates it only once terms with all of one pattern's symbols exist (`taso.verify.run.reachable`)."""
        q = self.formula
        return tuple(frozenset(_decls([q.pattern(k).arg(0)])) for k in range(q.num_patterns()))

    @cached_property
    def read_off(self) -> dict[str, tuple[str, int]]:
        """Integer variable -> (tensor variable, dimension) it is read off: those only the shapes hold."""
        in_lhs = {_name(v) for v in _consts([self.lhs], z3.IntSort())}
        out: dict[str, tuple[str, int]] = {}
        for v in self.tensor_vars:
            for j, d in enumerate(self.shapes.get(_name(v), ())):
                if _is_var(d) and _name(d) not in in_lhs and _name(d) not in out:
                    out[_name(d)] = (_name(v), j)
        return out

    @cached_property
    def formula(self) -> z3.BoolRef:
        """The quantified z3 formula, with E-matching patterns on each side that can serve as one."""
        missing = [v for v in self.tensor_vars if _name(v) not in self.shapes]
        if missing:
            raise BadInput(f"axiom {self.name} ({self.spec}): no shape for {', '.join(map(str, missing))}")
        in_lhs = {_name(v) for v in _consts([self.lhs], z3.IntSort())}
        subst = {k: D(z3.Const(t, T), j) for k, (t, j) in self.read_off.items()}
        defining = set(self.read_off.values())
        conds: list[z3.BoolRef] = []
        if not self.generic:
            for v in self.tensor_vars:
                shape = self.shapes[_name(v)]
                conds.append(R(v) == len(shape))
                conds.extend(D(v, j) == d for j, d in enumerate(shape) if (_name(v), j) not in defining)
        pairs = [(z3.Int(k), e) for k, e in subst.items()]
        lhs, rhs, *conds = (z3.substitute(e, *pairs) if pairs else e for e in (self.lhs, self.rhs, *conds, *self.when))
        conds = [c for c in (z3.simplify(c) for c in conds) if not z3.is_true(c)]
        bound_ints = _consts([lhs, rhs, *conds], z3.IntSort())
        leftover = {_name(v) for v in bound_ints} - in_lhs
        if leftover:
            raise BadInput(
                f"axiom {self.name} ({self.spec}): {sorted(leftover)} must be on the left or a bare dimension"
            )
        bound = [*self.tensor_vars, *bound_ints]
        body = lhs == rhs
        if conds:
            body = z3.Implies(z3.And(*conds), body)
        pats = [s for s in ((lhs,) if self.oriented else (lhs, rhs)) if _pattern_ok(s, bound)]
        if not pats:
            raise BadInput(
                f"axiom {self.name} ({self.spec}): neither side can trigger it (a side must hold every variable)"
            )
        return z3.ForAll(bound, body, patterns=pats, qid=self.name)


class Unsupported(Exception):
    """A node the specs cannot express (an op without a spec, broadcasting, an attribute not modelled)."""


def subterms(exprs: Sequence[z3.ExprRef]) -> list[z3.ExprRef]:
    """Every subterm of ``exprs``, once, in the order a depth-first walk meets them (``children()`` order)."""
    ctx = exprs[0].ctx if exprs else z3.main_ctx()
    return [_to_expr_ref(a, ctx) for a in _walk(exprs)]


def applications(exprs: Sequence[z3.ExprRef], names: Container[str]) -> list[z3.ExprRef]:
    """The subterms of ``exprs`` (in `subterms` order) that apply a tensor-valued function named in ``names``."""
    if not exprs:
        return []
    ctx = exprs[0].ctx
    ref = ctx.ref()
    out = []
    for a in _walk(exprs):
        if z3core.Z3_get_ast_kind(ref, a) != z3.Z3_APP_AST or not z3core.Z3_get_app_num_args(ref, a):
            continue
        name = z3core.Z3_get_symbol_string(ref, z3core.Z3_get_decl_name(ref, z3core.Z3_get_app_decl(ref, a)))
        if name in names and z3core.Z3_is_eq_sort(ref, z3core.Z3_get_sort(ref, a), T.ast):
            out.append(_to_expr_ref(a, ctx))
    return out


def _walk(exprs: Sequence[z3.ExprRef]) -> list[z3.Ast]:
    """The ASTs of `subterms`, read through z3's C API: wrapping every child, as ``children()`` does, cost most
    of a premise check (`taso.verify.premises`). Each stays alive while ``exprs`` are."""
    if not exprs:
        return []
    ref = exprs[0].ctx.ref()
    seen: dict[int, z3.Ast] = {}
    todo = [e.as_ast() for e in exprs]
    while todo:
        a = todo.pop()
        key = z3core.Z3_get_ast_id(ref, a)
        if key in seen:
            continue
        seen[key] = a
        kind = z3core.Z3_get_ast_kind(ref, a)
        if kind == z3.Z3_APP_AST:
            todo.extend(z3core.Z3_get_app_arg(ref, a, k) for k in range(z3core.Z3_get_app_num_args(ref, a)))
        elif kind == z3.Z3_QUANTIFIER_AST:
            todo.append(z3core.Z3_get_quantifier_body(ref, a))
    return list(seen.values())


def _consts(exprs: Sequence[z3.ExprRef], sort: z3.SortRef) -> list[z3.ExprRef]:
    found = {
        _name(e): e
        for e in subterms(exprs)
        if z3.is_const(e) and e.sort() == sort and e.decl().kind() == z3.Z3_OP_UNINTERPRETED
    }
    return [found[k] for k in sorted(found)]


def _decls(exprs: Sequence[z3.ExprRef]) -> set[str]:
    """Operator symbols (functions returning a tensor) used in ``exprs``."""
    return {e.decl().name() for e in subterms(exprs) if z3.is_app(e) and e.sort() == T and e.decl().arity()}


def _is_var(d: object) -> bool:
    return isinstance(d, z3.ExprRef) and z3.is_const(d) and not z3.is_int_value(d)


def _pattern_ok(side: z3.ExprRef, bound: Sequence[z3.ExprRef]) -> bool:
    """A side triggers the axiom if it is an application holding every variable, with no arithmetic in it."""
    if not z3.is_app(side) or side.decl().arity() == 0:
        return False
    nodes = subterms([side])
    if any(z3.is_arith(e) and not (z3.is_const(e)) for e in nodes):
        return False
    names = {_name(e) for e in nodes if z3.is_const(e)}
    return all(_name(v) in names for v in bound)


def _name(e: z3.ExprRef) -> str:
    """What ``str(e)`` prints for a constant: a variable's name read without z3's printer, which took most of
    loading the specs (once in each process that verifies)."""
    return e.decl().name() if e.decl().kind() == z3.Z3_OP_UNINTERPRETED else str(e)


@dataclass(frozen=True)
class Specs:
    """Every loaded symbol, axiom and custom lowering (each axiom knows its spec file)."""

    symbols: Mapping[str, Symbol]
    axioms: tuple[Axiom, ...]
    lowerings: Mapping[str, Callable]
    root: Path
    """The specs folder they were loaded from."""

    @cached_property
    def by_op(self) -> dict[str, Symbol]:
        """The symbol that lowers each IR op one to one (ops with a custom lowering excluded)."""
        out: dict[str, Symbol] = {}
        for s in self.symbols.values():
            if s.op and s.op not in self.lowerings:
                out.setdefault(s.op, s)
        return out

    @cached_property
    def f(self) -> SimpleNamespace:
        return SimpleNamespace(**self.symbols)


def load_specs(folder: str | Path) -> Specs:
    """Load every ``*.py`` spec under ``folder``; refuses (BadInput) a folder without specs or a broken spec."""
    root = Path(folder)
    if not root.is_dir():
        raise BadInput(f"{root}: no such specs folder")
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise BadInput(f"{root}: no spec files (*.py) in it")
    modules = []
    for p in files:
        spec = importlib.util.spec_from_file_location(f"subst_specs.{p.stem}", p)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise BadInput(f"{p}: spec does not load ({type(e).__name__}: {e})") from None
        modules.append((p.stem, module))
    symbols: dict[str, Symbol] = {}
    lowerings: dict[str, Callable] = {}
    for stem, m in modules:
        for s in getattr(m, "SYMBOLS", []):
            if s.name in symbols:
                raise BadInput(f"{stem}: symbol {s.name!r} is declared twice")
            symbols[s.name] = s
        lowerings.update(getattr(m, "LOWER", {}))
    f = SimpleNamespace(**symbols)
    axioms: list[Axiom] = []
    for stem, m in modules:
        if hasattr(m, "axioms"):
            try:
                made = m.axioms(f)
            except Exception as e:
                raise BadInput(f"{root / stem}.py: axioms() fails ({type(e).__name__}: {e})") from None
            axioms.extend(_with_spec(a, stem) for a in made)
    names = [a.name for a in axioms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise BadInput(f"{root}: axiom names used twice: {', '.join(dup)}")
    for a in axioms:
        a.formula  # noqa: B018 - validate every axiom at load time, not at first use
    return Specs(symbols, tuple(axioms), lowerings, root)


def _with_spec(a: Axiom, stem: str) -> Axiom:
    return a if a.spec else replace(a, spec=stem)
