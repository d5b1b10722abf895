"""Transpose: the 2-D transpose ``tr(x)`` (perm [1, 0]), and any permutation of a 4-D tensor's axes,
``tp4(x, perm)`` (attention's heads moved before the sequence and the key's head axes swapped, taso/ops/attention.py);
other ranks are not modelled. Two 4-D transposes in a row are one, by the composed permutation."""

from taso.verify import Axiom, D, If, Symbol, Unsupported, ints, pick, tensors

SYMBOLS = [
    Symbol("tr", 1, dims=lambda i, a, x: D(x, 1 - i), rank=lambda a, x: 2, op="Transpose", fixed={"perm": (1, 0)}),
    Symbol(
        "tp4", 1, dims=lambda i, a, x: D(x, pick(i, a.perm)), rank=lambda a, x: 4, attrs=("perm[4]",), op="Transpose"
    ),
]


def _lower(node, args, types, f):
    perm = tuple(node.attr["perm"])
    if perm == (1, 0):
        return [f.tr(args[0])]
    if len(perm) == 4:
        return [f.tp4(args[0], perm=perm)]
    raise Unsupported(f"Transpose with perm {perm} (only the 2-D one and 4-D ones are modelled)")


LOWER = {"Transpose": _lower}


def _composed(p, r):
    """The permutation of ``tp4(tp4(x, p), r)``: axis i of the result is axis p[r[i]] of ``x``."""
    return tuple(If(r[i] == 0, p[0], If(r[i] == 1, p[1], If(r[i] == 2, p[2], p[3]))) for i in range(4))


def _is_perm(p):
    """Four distinct axes of four."""
    return [*(p[i] != p[j] for i in range(4) for j in range(i)), *(a >= 0 for a in p), *(a <= 3 for a in p)]


def axioms(f):
    x, y, c = tensors("x y c")
    m, k, n, s, ln = ints("m k n s l")
    two = {"x": (m, n), "y": (m, n)}
    slices = {"s": (0, 1), "l": (1, 2)}
    p4, r4 = tuple(ints("p0 p1 p2 p3")), tuple(ints("r0 r1 r2 r3"))
    perms = {str(v): (0, 1, 2, 3) for v in (*p4, *r4)}
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
        Axiom("tp4-id", f.tp4(x, perm=(0, 1, 2, 3)), x, {"x": (m, k, n, s)}),
        Axiom(  # attention's scale applied to K before or after its heads move
            "smul-tp4",
            f.tp4(f.smul(x, c), perm=p4),
            f.smul(f.tp4(x, perm=p4), c),
            {"x": (m, k, n, s), "c": ()},
            when=_is_perm(p4),
            domains={str(v): (0, 1, 2, 3) for v in p4},
        ),
        Axiom(
            "tp4-tp4",
            f.tp4(f.tp4(x, perm=p4), perm=r4),
            f.tp4(x, perm=_composed(p4, r4)),
            {"x": (m, k, n, s)},
            when=(*_is_perm(p4), *_is_perm(r4)),
            domains=perms,
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
