"""Abstract expressions for target-directed generation (Mirage's pruning, `taso.generate.target`): a value's
expression over +, x, 1/., functions and reductions, in a normal form that makes the axioms the exporters'
spellings differ by into equalities, and the pieces of a target's expression a prefix may compute.

The normal form, instead of an e-graph saturated with the same axioms: sums and products are flat and sorted
(commutativity, associativity), their constants folded; x - y is x + (-1 * y), x / y is x * (1/y), 1/(x * y) is
1/x * 1/y, Pow(x, 2) is x * x, Pow(x, 0.5) is Sqrt(x), a mean is a sum times 1/n. Distributivity is left out: no
exporter spelling of the shipped targets needs it, and without it the normal form is unique and cheap. A term is
a nested tuple (hashable, ordered by its repr): ``("in", name)``, ``("c", value)``, ``("add", args)``,
``("mul", args)``, ``("inv", x)``, ``("f", name, params, x)``, ``("mm", a, b)``.

Attention's layouts and products (issue 48): a (batched) matrix product ``("mm", a, b)`` keeps its operands'
order (it does not commute) and takes their constant factors out, (c*A) @ B = c * (A @ B) = A @ (c*B), so Q and
K^T each scaled by c and the scores scaled by c*c are one expression; a Transpose is ``("f", "transpose",
(perm,), x)`` whose compositions fold, whose identity vanishes and out of which a constant factor moves; Softmax
is ``("f", "softmax", (axis,), x)``, opaque. Deliberately not seen: (A @ B)^T = B^T @ A^T (no exporter spells
attention's scores so), a transpose moved through a product's broadcast axes or through an element-wise op of
two tensors, matrix products' associativity, and a scale moved into Softmax: each is an e-graph's job, and none
of them is needed by the corpus's spellings.

Constants compare at 5 significant digits: ``x / 1.4142135`` and ``x * 0.70710677`` are one expression here
(the float spellings differ in the last bit; the exact fingerprint, not this, decides a pair)."""

from __future__ import annotations

from itertools import combinations

Term = tuple
ONE: Term = ("c", 1.0)


def const(v: float) -> Term:
    """A constant, rounded so that float spellings of one number agree."""
    return ("c", float(f"{float(v):.5g}") + 0.0)


def leaf(name: str) -> Term:
    return ("in", name)


def _flat(op: str, args: tuple[Term, ...]) -> list[Term]:
    out: list[Term] = []
    for a in args:
        out += list(a[1]) if a[0] == op else [a]
    return out


def add(*args: Term) -> Term:
    """A sum: flat, its constants added, sorted."""
    terms = _flat("add", args)
    c = sum(t[1] for t in terms if t[0] == "c")
    rest = sorted((t for t in terms if t[0] != "c"), key=repr)
    if c:
        rest = sorted([*rest, const(c)], key=repr)
    return rest[0] if len(rest) == 1 else ("add", tuple(rest)) if rest else const(0.0)


def mul(*args: Term) -> Term:
    """A product: flat, its constants multiplied, sorted."""
    terms = _flat("mul", args)
    c = 1.0
    for t in terms:
        c *= t[1] if t[0] == "c" else 1.0
    rest = [t for t in terms if t[0] != "c"]
    if c == 0 or not rest:
        return const(c)
    rest = sorted([*rest, const(c)] if const(c) != ONE else rest, key=repr)
    return rest[0] if len(rest) == 1 else ("mul", tuple(rest))


def inv(x: Term) -> Term:
    """1/x, through constants, reciprocals and products."""
    if x[0] == "c":
        return const(1.0 / x[1]) if x[1] else ("inv", x)
    if x[0] == "inv":
        return x[1]
    if x[0] == "mul":
        return mul(*(inv(a) for a in x[1]))
    return ("inv", x)


def fn(name: str, x: Term, *params: object) -> Term:
    """A function of x (sqrt, exp, erf, a reduction along an axis, ...), opaque to the normal form."""
    return ("f", name, params, x)


def _factor(t: Term) -> tuple[float, Term]:
    """``t`` as c * rest with c its constant factor (1 where it has none)."""
    consts = [a[1] for a in t[1] if a[0] == "c"] if t[0] == "mul" else []
    return (consts[0], mul(*(a for a in t[1] if a[0] != "c"))) if consts else (1.0, t)


def matmul(a: Term, b: Term) -> Term:
    """a @ b, over the last two axes: the operands' constant factors taken out, their order kept."""
    (ca, ra), (cb, rb) = _factor(a), _factor(b)
    return mul(const(ca * cb), ("mm", ra, rb))


def transpose(x: Term, perm: tuple[int, ...]) -> Term:
    """x with its axes permuted by ``perm``: a constant factor taken out, two permutations folded into one, the
    identity left out."""
    c, rest = _factor(x)
    if rest[0] == "f" and rest[1] == "transpose":
        perm, rest = tuple(rest[2][0][i] for i in perm), rest[3]
    inner = rest if perm == tuple(range(len(perm))) else ("f", "transpose", (tuple(perm),), rest)
    return mul(const(c), inner)


def power(x: Term, e: float) -> Term:
    """x ** e for a constant exponent: small integers as products, 0.5 as Sqrt, -1 as a reciprocal."""
    if e == 0.5:
        return fn("sqrt", x)
    if e == -0.5:
        return inv(fn("sqrt", x))
    if float(e).is_integer() and 1 <= abs(e) <= 4:
        p = mul(*([x] * int(abs(e))))
        return p if e > 0 else inv(p)
    return fn("pow", x, const(e)[1])


def pieces(t: Term, scalars: tuple[Term, ...] = ()) -> frozenset[Term]:
    """Every expression a prefix of a spelling of ``t`` may compute: ``t``, its subterms, and every part of a sum
    or product (a sub-multiset of its terms), with or without its constant, or with the constant negated (a Neg
    or Sub moved the sign); and every piece of a matrix product's operand times one of ``scalars`` (the pool's
    constants: Q or K^T scaled before the product). Constants themselves are leaves of the pool, not pieces."""
    out: set[Term] = set()
    _pieces(t, out)
    for m in [p for p in out if p[0] == "mm"]:
        inner: set[Term] = set()
        _pieces(m[1], inner)
        _pieces(m[2], inner)
        out |= {mul(s, p) for s in scalars for p in inner if p[0] != "c"}
    return frozenset(p for p in out if p[0] != "c")


def _pieces(t: Term, out: set[Term]) -> None:
    if t in out:
        return
    out.add(t)
    if t[0] == "inv":
        _pieces(t[1], out)
    elif t[0] == "f":
        _pieces(t[3], out)
    elif t[0] == "mm":
        _pieces(t[1], out)
        _pieces(t[2], out)
    elif t[0] in ("add", "mul"):
        build = add if t[0] == "add" else mul
        consts = [a for a in t[1] if a[0] == "c"]
        rest = [a for a in t[1] if a[0] != "c"]
        for a in rest:
            _pieces(a, out)
        signs = [()] + [(c,) for c in consts] + [(mul(c, const(-1.0)),) for c in consts]
        if t[0] == "mul" and not consts:
            signs.append((const(-1.0),))
        for k in range(1, len(rest) + 1):
            for part in set(combinations(rest, k)):
                for s in signs:
                    out.add(build(*part, *s))
