"""HardSwish: x * HardSigmoid(x) at alpha = 1/6 (as the float32 ONNX stores), beta = 0.5 (specs/hardsigmoid.py),
which is what moves it through transposes, concats and slices too."""

import numpy as np

from taso.verify import Axiom, D, R, Symbol, attr_int, ints, tensors

SYMBOLS = [Symbol("hardswish", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="HardSwish")]
_SIXTH, _HALF = attr_int(float(np.float32(1 / 6))), attr_int(0.5)


def axioms(f):
    (x,) = tensors("x")
    m, n = ints("m n")
    return [
        Axiom(
            "hardswish-hardsigmoid",
            f.hardswish(x),
            f.mul(x, f.hardsigmoid(x, alpha=_SIXTH, beta=_HALF)),
            {"x": (m, n)},
            generic=True,
        )
    ]
