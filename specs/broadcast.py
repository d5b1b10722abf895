"""Numpy broadcasting of one operand to another's shape: ``bcast(y, x)`` is ``y`` spread to the shape of ``x``
along the axes where ``y`` has size 1. Element-wise lowerings use it for an operand that broadcasts otherwise
than per channel or by a 0-d scalar (specs/mul.py, specs/div.py, specs/sub.py, specs/pow.py): RMSNorm's (B, S, 1)
factor over (B, S, D), LayerNorm's x - mean(x). A 0-d operand is the s-symbols' (``smul``, ``sadd``, ``sdiv``,
``spow``), never spread.
What broadcasting is never matters to a proof, only that both sides spread the same values the same way."""

import numpy as np

from taso.verify import D, R, Symbol


def _bcast(attrs, xs):
    y, x = xs
    if y.ndim != x.ndim or any(b not in (a, 1) for a, b in zip(x.shape, y.shape)):
        raise ValueError(f"{y.shape} does not broadcast to {x.shape} at one rank")
    return np.broadcast_to(y, x.shape).copy()


SYMBOLS = [Symbol("bcast", 2, dims=lambda i, a, y, x: D(x, i), rank=lambda a, y, x: R(x), compute=_bcast)]
