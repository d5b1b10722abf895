"""MatMul: the 2-D matrix product ``mm(x, y)``; a 3-D operand times a matrix ([B, S, K] @ [K, N], a transformer's
projection) is the product of its rows regrouped (``reshape2``/``reshape3``, specs/reshape.py); two 4-D operands
of one batch and head count are ``bmm(x, y)``, the product of each pair of matrices (attention's, per head). Other
batched products, and broadcasting batch axes, are not modelled."""

from taso.verify import Axiom, D, If, Symbol, Unsupported, ints, tensors

SYMBOLS = [
    Symbol("mm", 2, dims=lambda i, a, x, y: If(i == 0, D(x, 0), D(y, 1)), rank=lambda a, x, y: 2, op="MatMul"),
    Symbol("bmm", 2, dims=lambda i, a, x, y: If(i == 3, D(y, 3), D(x, i)), rank=lambda a, x, y: 4, op="MatMul"),
]


def _lower(node, args, types, f):
    tx, ty = (types[v] for v in node.inputs)
    rx, rw = tx.rank, ty.rank
    if rx == 3 and rw == 2:  # [B, S, K] @ [K, N]: the product of the stacked rows, regrouped
        x, w = args
        f.fact(D(x, 2) == D(w, 0))
        rows = f.mm(f.reshape2(x, shape=(D(x, 0) * D(x, 1), D(x, 2))), w)
        return [f.reshape3(rows, shape=(D(x, 0), D(x, 1), D(w, 1)))]
    if rx == 4 and rw == 4:  # [B, N, S, K] @ [B, N, K, L]: one product per (batch, head)
        if tx.shape[:2] != ty.shape[:2]:
            raise Unsupported("MatMul of 4-D operands whose batch axes broadcast")
        x, y = args
        f.fact(D(x, 0) == D(y, 0), D(x, 1) == D(y, 1), D(x, 3) == D(y, 2))
        return [f.bmm(x, y)]
    if rx != 2 or rw != 2:
        raise Unsupported("MatMul of operands other than 2-D, a 3-D one times a matrix, or two 4-D ones")
    f.fact(D(args[0], 1) == D(args[1], 0))
    return [f.mm(*args)]


LOWER = {"MatMul": _lower}


def axioms(f):
    x, y, z, w, s = tensors("x y z w s")
    m, k, n, p, ln, b, h = ints("m k n p l b h")
    heads = {"x": (b, h, m, k), "y": (b, h, k, n), "s": ()}
    chain = {"x": (m, k), "y": (k, n), "z": (n, p)}
    right = {"x": (m, k), "y": (k, n), "z": (k, n)}
    left = {"x": (m, k), "y": (m, k), "z": (k, n)}
    return [
        Axiom("mm-assoc", f.mm(f.mm(x, y), z), f.mm(x, f.mm(y, z)), chain),
        # attention's scale applied to Q, to K^T or to the scores (target-directed generation finds all three)
        Axiom("smul-bmm-left", f.bmm(f.smul(x, s), y), f.smul(f.bmm(x, y), s), heads, generic=True),
        Axiom("smul-bmm-right", f.bmm(x, f.smul(y, s)), f.smul(f.bmm(x, y), s), heads, generic=True),
        Axiom("mm-add-right", f.mm(x, f.add(y, z)), f.add(f.mm(x, y), f.mm(x, z)), right, generic=True),
        Axiom("mm-add-left", f.mm(f.add(x, y), z), f.add(f.mm(x, z), f.mm(y, z)), left, generic=True),
        Axiom(
            "mm-cat-right",
            f.mm(x, f.cat(y, z, axis=1)),
            f.cat(f.mm(x, y), f.mm(x, z), axis=1),
            {"x": (m, k), "y": (k, n), "z": (k, p)},
            generic=True,
        ),
        Axiom(
            "mm-cat-left",
            f.mm(f.cat(x, y, axis=0), z),
            f.cat(f.mm(x, z), f.mm(y, z), axis=0),
            {"x": (m, k), "y": (n, k), "z": (k, p)},
            generic=True,
        ),
        # x.y + z.w = [x z].[y; w]: only when x's columns meet y's rows (the right side alone does not say)
        Axiom(
            "mm-sum-cat",
            f.add(f.mm(x, y), f.mm(z, w)),
            f.mm(f.cat(x, z, axis=1), f.cat(y, w, axis=0)),
            {"x": (m, k), "y": (k, n), "z": (m, ln), "w": (ln, n)},
        ),
        Axiom(
            "mm-slice-rows",
            f.slice(f.mm(x, y), axis=0, start=p, size=ln),
            f.mm(f.slice(x, axis=0, start=p, size=ln), y),
            {"x": (m, k), "y": (k, n)},
            domains={"p": (0, 1), "l": (1, 2)},
            generic=True,
            oriented=True,
        ),
        Axiom(
            "mm-slice-cols",
            f.slice(f.mm(x, y), axis=1, start=p, size=ln),
            f.mm(x, f.slice(y, axis=1, start=p, size=ln)),
            {"x": (m, k), "y": (k, n)},
            domains={"p": (0, 1), "l": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
