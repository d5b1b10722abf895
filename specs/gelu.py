"""Gelu, element-wise, as two symbols: ``gelu`` (``approximate='none'``, x * Phi(x) by erf) and ``gelu_tanh``
(its tanh approximation). They are different functions, so no axiom relates them; each moves through
transposes, concats and slices.

Each is defined by its decomposition (``gelu-def``, ``gelu-tanh-def``), ONNX's and onnxruntime's: x * 1/2 * (1 +
erf(x * 1/sqrt 2)) and x * 1/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x))), its constants the numbers of
specs/numbers.py. That proves an exporter's spelled-out GELU equal to Gelu (`subst generate --target gelu`),
with its constants read as the numbers they round (1.4142135 as sqrt 2): the approximation the model's floats
already make, checked numerically on each application. Nothing makes erf and tanh one, so neither definition
proves the other GELU, nor QuickGelu's x * sigmoid(1.702 x)."""

from fractions import Fraction

from taso.ops import numbers
from taso.verify import Axiom, D, R, Symbol, elementwise_axioms, ints, lower_plain, tensors

_FORMS = {"none": "gelu", "tanh": "gelu_tanh"}
SYMBOLS = [
    Symbol(name, 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Gelu", fixed={"approximate": form})
    for form, name in _FORMS.items()
]


def _lower(node, args, types, f):
    return [lower_plain(getattr(f, _FORMS[node.attr["approximate"]]), node, args)]


LOWER = {"Gelu": _lower}


def _num(f, n):
    return f.num(value=n.bits)


def axioms(f):
    (x,) = tensors("x")
    m, n = ints("m n")
    half, one = (_num(f, numbers.Number(Fraction(c))) for c in ("1/2", "1"))
    cube = f.smul(f.mul(x, f.mul(x, x)), _num(f, numbers.Number(Fraction("0.044715"))))
    inner = f.smul(f.add(x, cube), _num(f, numbers.G))
    return [
        *elementwise_axioms(f, f.gelu),
        *elementwise_axioms(f, f.gelu_tanh),
        Axiom(
            "gelu-def",
            f.gelu(x),
            f.mul(f.smul(x, half), f.sadd(f.erf(f.smul(x, _num(f, numbers.SQRT2.inverse()))), one)),
            {"x": (m, n)},
            generic=True,
        ),
        Axiom(
            "gelu-tanh-def",
            f.gelu_tanh(x),
            f.mul(f.smul(x, half), f.sadd(f.tanh(inner), one)),
            {"x": (m, n)},
            generic=True,
        ),
    ]
