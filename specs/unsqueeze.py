"""Unsqueeze and Squeeze: row-major reshapes that add or drop size-1 axes, lowered onto ``reshape2`` and
``reshape3`` (specs/reshape.py) at the result's exact sizes: the input's dims, with 1 at the axes added. Unlike
a Reshape's target, which the lowering leaves free, these sizes are fixed by the input and the axes, so an
Unsqueeze at one axis is a different term from one at another, and a Squeeze states that its axes are 1.
Results of rank 2 or 3 are modelled (as reshapes are); other rules stay unknown.

The reshape axioms then give what these ops satisfy: one undone by the other is the tensor itself, and a sum
regrouped is the sum of the regrouped operands; the axioms below add the product and Relu (whose axioms hold
of any element-wise function)."""

from taso.verify import Axiom, D, Unsupported, ints, tensors


def _reshaped(args, rank, dims, f):
    if rank not in (2, 3):
        raise Unsupported("Unsqueeze or Squeeze to a rank other than 2 or 3")
    return [getattr(f, f"reshape{rank}")(args[0], shape=tuple(dims))]


def _unsqueeze(node, args, types, f):
    axes = set(node.attr["axes"])
    rank = types[node.outputs[0]].rank
    inner = iter(range(types[node.inputs[0]].rank))
    return _reshaped(args, rank, [1 if i in axes else D(args[0], next(inner)) for i in range(rank)], f)


def _squeeze(node, args, types, f):
    axes = set(node.attr["axes"])
    f.fact(*(D(args[0], a) == 1 for a in axes))
    kept = [D(args[0], i) for i in range(types[node.inputs[0]].rank) if i not in axes]
    return _reshaped(args, len(kept), kept, f)


LOWER = {"Unsqueeze": _unsqueeze, "Squeeze": _squeeze}


def axioms(f):
    x, y = tensors("x y")
    p, q, n, m, k = ints("p q n m k")
    rows = {"p": (1, 2, 3), "q": (1, 2), "m": (2, 3, 6), "n": (1, 3), "k": (1, 2, 3)}
    to2, to3 = dict(shape=(m, k)), dict(shape=(p, q, n))
    cube, mat = {"x": (p, q, n), "y": (p, q, n)}, {"x": (m, k), "y": (m, k)}
    return [
        # a product, like a sum (reshape-add-2, -3), is taken before or after regrouping
        Axiom(
            "reshape-mul-2",
            f.reshape2(f.mul(x, y), **to2),
            f.mul(f.reshape2(x, **to2), f.reshape2(y, **to2)),
            cube,
            when=(m * k == D(x, 0) * D(x, 1) * D(x, 2),),
            domains=rows,
            generic=True,
        ),
        Axiom(
            "reshape-mul-3",
            f.reshape3(f.mul(x, y), **to3),
            f.mul(f.reshape3(x, **to3), f.reshape3(y, **to3)),
            mat,
            when=(p * q * n == D(x, 0) * D(x, 1),),
            domains=rows,
            generic=True,
        ),
        # an element-wise function (any: these hold of every function) is applied before or after regrouping
        Axiom(
            "reshape-relu-2",
            f.relu(f.reshape2(x, **to2)),
            f.reshape2(f.relu(x), **to2),
            {"x": (p, q, n)},
            when=(m * k == p * q * n,),
            domains=rows,
        ),
        Axiom(
            "reshape-relu-3",
            f.relu(f.reshape3(x, **to3)),
            f.reshape3(f.relu(x), **to3),
            {"x": (m, k)},
            when=(m * k == p * q * n,),
            domains=rows,
        ),
    ]
