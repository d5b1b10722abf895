"""`subst verify --check-specs`: every axiom, and every shape rule it touches, against the concrete semantics.

Bounded model checking by evaluation: each axiom is instantiated at every assignment of its integer variables
(sizes, attributes) from their small domains (a seeded sample when there are more than ``limit``); where the
declared shapes and ``when`` hold and the left side is well-typed, both sides are computed with the catalogue's
numpy code on small random integers and compared (exact in float64, but for pooling's division and float32
constants: hence a 1e-6 tolerance). Every symbol's shape rule is compared with the shape its semantics gives on
the way. A wrong axiom proves wrong rules, so a failure here must stop the verifier being trusted.

A ``generic`` axiom reaches z3 without its declared shapes (`taso.spec.Axiom.formula`), so it is checked as z3
uses it too: at seeded draws of free shapes (the declared shapes with a few dims redrawn from `FREE_DIMS` and now
and then a rank moved by one; the integer variables only the shapes hold read off them, as the formula
does), wherever ``when`` holds and the left side is well-typed. Well-typed means more there than the semantics
accepting the arguments: each application's shape must be what its symbol's shape rule says (z3 knows it by
that rule alone; Add's broadcasting, say, is outside it) and what its ``requires`` asks must hold.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import z3

from taso import ops
from taso.ir import TensorType
from taso.verify.spec import Axiom, Shape, Specs, Symbol, T

DEFAULT_DOMAIN = (1, 2, 3)
FLOORS = {
    "size": (1, 2, 3, 4),
    "kernel_shape": (1, 2, 3),
    "pads": (0, 1, 2),
    "group": (1, 2),
    "strides": (1, 2),
    "start": (0, 1, 2, 3),
    "axis": (0, 1, 2, 3),
}
"""Values every integer variable is tried at, whatever the axiom's ``domains`` say, by what it stands for: a
size (a dim of a declared shape, a slice's size, a generated shape), a window, a pad, a group, a stride, a
slice's start, an axis. An axiom's domains can add values, never narrow these: z3 applies an axiom at every
value its formula admits, so one true only at the values its author listed (a product commuted at 1x1, a 1x1
max pool as an average pool) must fail here."""
_SIZE_ATTRS = ("size", "n", "shape", "from_shape")
"""Symbol attributes that are sizes."""
DEFAULT_LIMIT = 200
_DRAWS = 20
TOL = 1e-6
FREE_DIMS = (1, 2, 3, 4)
FREE_DRAWS = 300
"""Free-shape draws per generic axiom: most are ill-typed (a redrawn dim rarely fits), and this many keep the
whole check within seconds while each generic axiom still gets dozens of well-typed free instances."""
_RANK_MOVE = 0.2
"""Chance that a free draw moves one tensor's rank by one."""


class _IllTyped(Exception):
    """The concrete semantics refuses these arguments (the instance is outside the axiom's reach)."""


class _WrongShapeRule(Exception):
    """A symbol's shape rule disagrees with the shape its semantics computes."""


@dataclass
class AxiomCheck:
    name: str
    spec: str
    instances: int = 0
    exhaustive: bool = True
    free_instances: int = 0
    """Well-typed instances at free shapes (generic axioms only)."""
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_specs(specs: Specs, limit: int = DEFAULT_LIMIT, seed: int = 0) -> list[AxiomCheck]:
    with np.errstate(all="ignore"):  # padding-only pooling windows divide by zero; such instances are skipped
        return [check_axiom(a, specs, limit, seed) for a in specs.axioms]


def check_axiom(ax: Axiom, specs: Specs, limit: int = DEFAULT_LIMIT, seed: int = 0) -> AxiomCheck:
    report = AxiomCheck(ax.name, ax.spec)
    names = [str(v) for v in ax.int_vars]
    roles = _roles(ax, specs)
    domains = [_domain(ax.domains.get(n, DEFAULT_DOMAIN), roles.get(n)) for n in names]
    shape_of = {str(v): [_compile_int(d) for d in ax.shapes[str(v)]] for v in ax.tensor_vars}
    when = [_compile_int(c) for c in ax.when]
    lhs, rhs = _compile_term(ax.lhs, specs), _compile_term(ax.rhs, specs)
    data = np.random.default_rng(seed)
    for values in _assignments(domains, limit, random.Random(seed), report):
        ints = dict(zip(names, values))
        shapes = {v: tuple(f((ints, {}, {})) for f in fs) for v, fs in shape_of.items()}
        if any(d <= 0 for s in shapes.values() for d in s):
            continue
        outcome = _instance(lhs, rhs, when, ints, shapes, data, free=False)
        if outcome is not None:
            report.instances += 1
            if outcome:
                report.failures.append(outcome)
        if len(report.failures) >= 3 or report.instances >= limit:
            break
    if ax.generic and report.ok:
        _check_free(ax, report, domains, shape_of, (lhs, rhs, when), random.Random(seed), data)
    if report.instances == 0 and not report.failures:
        report.failures.append("no well-typed instance in its domains: the axiom was never checked")
    return report


def _domain(given: tuple[int, ...], role: str | None) -> tuple[int, ...]:
    """The values a variable is tried at: its axiom's, and at least its role's `FLOORS`."""
    return tuple(sorted(set(given) | set(FLOORS.get(role, ())))) if role else tuple(given)


def _roles(ax: Axiom, specs: Specs) -> dict[str, str]:
    """What each integer variable of ``ax`` stands for (a `FLOORS` key): the attribute it is an argument for,
    else a size where a declared shape holds it."""
    roles: dict[str, str] = {}
    for v in ax.int_vars:
        if any(str(d) == str(v) for shape in ax.shapes.values() for d in shape):
            roles[str(v)] = "size"
    todo = [ax.lhs, ax.rhs]
    while todo:
        e = todo.pop()
        todo.extend(e.children())
        layout = _layout(e, specs)
        for k, name in enumerate(layout):
            arg = e.arg(k)
            if z3.is_const(arg) and not z3.is_int_value(arg):
                roles[str(arg)] = "size" if name in _SIZE_ATTRS else name
    return roles


def _layout(e: z3.ExprRef, specs: Specs) -> list[str]:
    """The attribute name of each integer argument of a symbol application (none for anything else)."""
    if not z3.is_app(e) or e.sort() != T or not e.num_args():
        return []
    sym = specs.symbols.get(e.decl().name())
    return [] if sym is None else [n for n, length in sym.layout for _ in range(length or 1)]


def _check_free(
    ax: Axiom,
    report: AxiomCheck,
    domains: list[tuple[int, ...]],
    shape_of: Mapping[str, list[Callable[[Env], int]]],
    compiled: tuple[Callable, Callable, list[Callable]],
    rng: random.Random,
    data: np.random.Generator,
) -> None:
    """The generic axiom at free shapes: each draw starts from a declared instance and moves its shapes. Where
    the right side triggers it too, z3 also reads it right to left: from a well-typed right side."""
    lhs, rhs, when = compiled
    names = [str(v) for v in ax.int_vars]
    ways = [(lhs, rhs, "")]
    if ax.formula.num_patterns() == 2:
        ways.append((rhs, lhs, "read right to left, "))
    for _ in range(FREE_DRAWS):
        ints = {n: rng.choice(d) for n, d in zip(names, domains)}
        shapes = _move({v: tuple(f((ints, {}, {})) for f in fs) for v, fs in shape_of.items()}, rng)
        for name, (t, j) in ax.read_off.items():  # beyond a tensor's rank, z3's dim(t, j) is any integer
            ints[name] = shapes[t][j] if j < len(shapes[t]) else rng.choice(FREE_DIMS)
        if any(d <= 0 for s in shapes.values() for d in s):
            continue
        outcomes = [(how, _instance(a, b, when, ints, shapes, data, free=True)) for a, b, how in ways]
        report.free_instances += any(o is not None for _, o in outcomes)
        report.failures.extend(how + o for how, o in outcomes if o)
        if len(report.failures) >= 3:
            return


def _move(shapes: dict[str, tuple[int, ...]], rng: random.Random) -> dict[str, tuple[int, ...]]:
    """Declared shapes moved: one to three dims redrawn from `FREE_DIMS`, and now and then a rank moved by one."""
    out = {v: list(s) for v, s in shapes.items()}
    shaped = [v for v, s in out.items() if s]
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        if shaped:
            v = rng.choice(shaped)
            out[v][rng.randrange(len(out[v]))] = rng.choice(FREE_DIMS)
    if out and rng.random() < _RANK_MOVE:
        dims = out[rng.choice(sorted(out))]
        if dims and rng.random() < 0.5:
            del dims[rng.randrange(len(dims))]
        else:
            dims.insert(rng.randint(0, len(dims)), rng.choice(FREE_DIMS))
    return {v: tuple(s) for v, s in out.items()}


def _instance(
    lhs: Callable[[Env], np.ndarray],
    rhs: Callable[[Env], np.ndarray],
    when: list[Callable[[Env], int]],
    ints: dict[str, int],
    shapes: dict[str, tuple[int, ...]],
    data: np.random.Generator,
    free: bool,
) -> str | None:
    """Check one instance: None where it is outside the axiom's reach, "" where it holds, else the failure."""
    try:
        if not all(c((ints, shapes, {})) for c in when):
            return None
    except (_IllTyped, ArithmeticError):  # ``when`` names a dim the drawn rank lacks, or divides by 0
        return None
    env = (ints, shapes, {v: data.integers(-3, 4, s).astype(np.float64) for v, s in shapes.items()})
    where = ", ".join(f"{k}={v}" for k, v in ints.items()) or "no variables"
    if free:
        where = f"free shapes {', '.join(f'{v}{s}' for v, s in shapes.items())}, {where}"
    try:
        left = lhs(env)
    except _IllTyped:
        return None
    except _WrongShapeRule as e:
        return None if free else f"{where}: {e}"  # at free shapes: outside where z3 knows the symbol
    try:
        right = rhs(env)
    except (_IllTyped, _WrongShapeRule) as e:
        return f"{where}: the right side fails where the left holds ({e})"
    if left.shape != right.shape:
        return f"{where}: shapes differ, {left.shape} vs {right.shape}"
    if not np.allclose(left, right, rtol=TOL, atol=TOL):
        at = tuple(int(i) for i in np.argwhere(~np.isclose(left, right, rtol=TOL, atol=TOL))[0])
        return f"{where}: sides differ at {at}: {left[at]:g} vs {right[at]:g}"
    return ""


def _assignments(
    domains: list[tuple[int, ...]], limit: int, rng: random.Random, report: AxiomCheck
) -> Iterator[tuple[int, ...]]:
    """Every assignment in a seeded order when there are few enough, else seeded random draws."""
    total = int(np.prod([len(d) for d in domains], dtype=np.int64))
    if total <= _DRAWS * limit:
        every = list(itertools.product(*domains))
        rng.shuffle(every)
        report.exhaustive = total <= limit
        yield from every
        return
    report.exhaustive = False
    for _ in range(_DRAWS * limit):
        yield tuple(rng.choice(d) for d in domains)


Env = tuple[Mapping[str, int], Mapping[str, tuple[int, ...]], Mapping[str, np.ndarray]]
"""Values of the integer variables, shapes and arrays of the tensor variables, for one instance."""


def _compile_term(term: z3.ExprRef, specs: Specs) -> Callable[[Env], np.ndarray]:
    """An axiom side as a Python closure (walking z3 terms per instance is far slower than evaluating).

    The closure raises _IllTyped where the semantics refuses the arguments, _WrongShapeRule where a symbol's
    shape rule disagrees with its semantics."""
    if z3.is_const(term) and term.sort() == T:
        name = term.decl().name()
        return lambda env: env[2][name]
    sym = specs.symbols[term.decl().name()]
    flat = [_compile_int(term.arg(k)) for k in range(sym.n_ints)]
    args = [_compile_term(term.arg(sym.n_ints + k), specs) for k in range(sym.arity)]

    refusing = _refusing(sym)

    def run(env: Env) -> np.ndarray:
        ints = [f(env) for f in flat]
        xs = [f(env) for f in args]
        try:
            if refusing:
                ops.infer(sym.op, [TensorType("float32", x.shape) for x in xs], {**sym.fixed, **sym.group(ints)})
            out = np.asarray(sym.run(sym.group(ints), xs))
        except (ValueError, IndexError, KeyError, ArithmeticError) as e:
            raise _IllTyped(str(e)) from None
        if out.size == 0 or not np.isfinite(out).all():
            raise _IllTyped("empty or non-finite result (a window of padding only)")
        shapes = [Shape(x.shape) for x in xs]
        a = SimpleNamespace(**sym.group(ints))
        try:
            rule = tuple(_python_int(sym.dims(i, a, *shapes)) for i in range(_python_int(sym.rank(a, *shapes))))
        except (_IllTyped, IndexError) as e:
            raise _WrongShapeRule(f"shape rule of {sym.name} does not evaluate: {e}") from None
        if rule != out.shape:
            raise _WrongShapeRule(f"shape rule of {sym.name} says {rule}, its semantics gives {out.shape}")
        if sym.requires is not None and not _python_int(sym.requires(a, *shapes)):
            raise _IllTyped(f"{sym.name} requires what these arguments lack")
        return out

    return run


def _refusing(sym: Symbol) -> bool:
    """Whether the catalogue's shape rule of ``sym``'s op can tell the arguments it refuses, where ``compute``
    stands in for the op (an Enlarge of a kernel it cannot centre): the op takes no input's values and every
    attribute it requires is the symbol's. Such instances are outside the op's domain (no lowered rule has
    them) rather than a wrong shape rule, and the wider domains (`FLOORS`) reach them."""
    d = ops.OPS.get(sym.op)
    if sym.compute is None or d is None or d.static_inputs:
        return False
    names = {n for n, _ in sym.layout} | set(sym.fixed)
    return all(k in names for k, v in d.attrs.items() if v is ops.REQUIRED)


def _python_int(v: object) -> int:
    """A shape rule evaluated on concrete shapes is a plain int, or a z3 numeral when it used z3 arithmetic."""
    if isinstance(v, int):
        return v
    return _compile_int(v)(({}, {}, {}))  # type: ignore[arg-type]


_OPS = {
    z3.Z3_OP_ADD: lambda *v: sum(v),
    z3.Z3_OP_SUB: lambda a, *b: a - sum(b),
    z3.Z3_OP_UMINUS: lambda a: -a,
    z3.Z3_OP_MUL: lambda a, b: a * b,
    z3.Z3_OP_IDIV: lambda a, b: a // b,
    z3.Z3_OP_MOD: lambda a, b: a % b,
    z3.Z3_OP_ITE: lambda c, a, b: a if c else b,
    z3.Z3_OP_EQ: lambda a, b: a == b,
    z3.Z3_OP_DISTINCT: lambda a, b: a != b,
    z3.Z3_OP_LE: lambda a, b: a <= b,
    z3.Z3_OP_LT: lambda a, b: a < b,
    z3.Z3_OP_GE: lambda a, b: a >= b,
    z3.Z3_OP_GT: lambda a, b: a > b,
    z3.Z3_OP_AND: lambda *v: all(v),
    z3.Z3_OP_OR: lambda *v: any(v),
    z3.Z3_OP_NOT: lambda a: not a,
}


def _compile_int(e: object) -> Callable[[Env], int]:
    """An integer or boolean expression over size variables and dims of tensor variables, as a closure."""
    if isinstance(e, int):
        return lambda env: e
    assert isinstance(e, z3.ExprRef)
    if z3.is_int_value(e):
        v = e.as_long()
        return lambda env: v
    if z3.is_true(e) or z3.is_false(e):
        b = z3.is_true(e)
        return lambda env: b
    if z3.is_const(e):
        name = e.decl().name()
        return lambda env: env[0][name]
    kind, name = e.decl().kind(), e.decl().name()
    if name == "rank":
        t = e.arg(0).decl().name()
        return lambda env: len(env[1][t])
    if name == "dim":
        t, index = e.arg(0).decl().name(), _compile_int(e.arg(1))

        def dim(env: Env) -> int:
            shape, i = env[1][t], index(env)
            if not 0 <= i < len(shape):
                raise _IllTyped(f"dim {i} of a rank-{len(shape)} tensor")
            return shape[i]

        return dim
    if kind not in _OPS:
        raise _IllTyped(f"cannot evaluate {e}")
    op, kids = _OPS[kind], [_compile_int(c) for c in e.children()]
    return lambda env: op(*(k(env) for k in kids))
