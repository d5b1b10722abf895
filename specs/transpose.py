"""Transpose: only the 2-D transpose ``tr(x)`` (perm [1, 0]) is modelled."""

from taso.verify import Axiom, D, Symbol, ints, tensors

SYMBOLS = [
    Symbol("tr", 1, dims=lambda i, a, x: D(x, 1 - i), rank=lambda a, x: 2, op="Transpose", fixed={"perm": (1, 0)})
]


def axioms(f):
    x, y = tensors("x y")
    m, k, n, s, ln = ints("m k n s l")
    two = {"x": (m, n), "y": (m, n)}
    slices = {"s": (0, 1), "l": (1, 2)}
    return [
        Axiom("transpose-transpose", f.tr(f.tr(x)), x, {"x": (m, n)}),
        Axiom("transpose-mm", f.tr(f.mm(x, y)), f.mm(f.tr(y), f.tr(x)), {"x": (m, k), "y": (k, n)}, generic=True),
        Axiom("transpose-add", f.tr(f.add(x, y)), f.add(f.tr(x), f.tr(y)), two, generic=True),
        Axiom("transpose-mul", f.tr(f.mul(x, y)), f.mul(f.tr(x), f.tr(y)), two, generic=True),
        Axiom(
            "transpose-cat0",
            f.tr(f.cat(x, y, axis=0)),
            f.cat(f.tr(x), f.tr(y), axis=1),
            {"x": (m, n), "y": (k, n)},
            generic=True,
        ),
        Axiom(
            "transpose-cat1",
            f.tr(f.cat(x, y, axis=1)),
            f.cat(f.tr(x), f.tr(y), axis=0),
            {"x": (m, n), "y": (m, k)},
            generic=True,
        ),
        Axiom("transpose-single", f.tr(x), x, {"x": (1, 1)}, oriented=True),  # a 1x1 matrix is its own transpose
        Axiom(
            "transpose-slice0",
            f.slice(f.tr(x), axis=1, start=s, size=ln),
            f.tr(f.slice(x, axis=0, start=s, size=ln)),
            {"x": (m, n)},
            domains=slices,
            generic=True,
            oriented=True,
        ),
        Axiom(
            "transpose-slice1",
            f.slice(f.tr(x), axis=0, start=s, size=ln),
            f.tr(f.slice(x, axis=1, start=s, size=ln)),
            {"x": (m, n)},
            domains=slices,
            generic=True,
            oriented=True,
        ),
    ]
