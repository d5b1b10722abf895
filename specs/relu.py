"""Relu: max(x, 0), element-wise. The axioms here hold for any element-wise function; those that need
relu(0) = 0 or monotonicity sit with enlarge, the identity kernel (constants.py) and max pooling."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("relu", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Relu")]


def axioms(f):
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}
    return [
        Axiom("relu-transpose", f.relu(f.tr(x)), f.tr(f.relu(x)), shapes, generic=True),
        Axiom(
            "relu-cat",
            f.relu(f.cat(x, y, axis=a)),
            f.cat(f.relu(x), f.relu(y), axis=a),
            shapes,
            domains={"a": (0, 1)},
            generic=True,
        ),
        Axiom(
            "relu-slice",
            f.relu(f.slice(x, axis=a, start=s, size=k)),
            f.slice(f.relu(x), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
            generic=True,
            oriented=True,
        ),
    ]
