"""Gelu, element-wise, as two symbols: ``gelu`` (``approximate='none'``, x * Phi(x) by erf) and ``gelu_tanh``
(its tanh approximation). They are different functions, so no axiom relates them; each moves through
transposes, concats and slices."""

from taso.verify import Axiom, D, R, Symbol, ints, lower_plain, tensors

_FORMS = {"none": "gelu", "tanh": "gelu_tanh"}
SYMBOLS = [
    Symbol(name, 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Gelu", fixed={"approximate": form})
    for form, name in _FORMS.items()
]


def _lower(node, args, types, f):
    return [lower_plain(getattr(f, _FORMS[node.attr["approximate"]]), node, args)]


LOWER = {"Gelu": _lower}


def axioms(f):
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}
    out = []
    for g in (f.gelu, f.gelu_tanh):
        out += [
            Axiom(f"{g.name}-transpose", g(f.tr(x)), f.tr(g(x)), shapes, generic=True),
            Axiom(
                f"{g.name}-cat",
                g(f.cat(x, y, axis=a)),
                f.cat(g(x), g(y), axis=a),
                shapes,
                domains={"a": (0, 1)},
                generic=True,
            ),
            Axiom(
                f"{g.name}-slice",
                g(f.slice(x, axis=a, start=s, size=k)),
                f.slice(g(x), axis=a, start=s, size=k),
                shapes,
                domains={"a": (0, 1), "s": (0, 1), "k": (1, 2)},
                generic=True,
                oriented=True,
            ),
        ]
    return out
