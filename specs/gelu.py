"""Gelu, element-wise, as two symbols: ``gelu`` (``approximate='none'``, x * Phi(x) by erf) and ``gelu_tanh``
(its tanh approximation). They are different functions, so no axiom relates them; each moves through
transposes, concats and slices."""

from taso.verify import D, R, Symbol, elementwise_axioms, lower_plain

_FORMS = {"none": "gelu", "tanh": "gelu_tanh"}
SYMBOLS = [
    Symbol(name, 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Gelu", fixed={"approximate": form})
    for form, name in _FORMS.items()
]


def _lower(node, args, types, f):
    return [lower_plain(getattr(f, _FORMS[node.attr["approximate"]]), node, args)]


LOWER = {"Gelu": _lower}


def axioms(f):
    return [*elementwise_axioms(f, f.gelu), *elementwise_axioms(f, f.gelu_tanh)]
