"""Running a model: its inputs (feeds), a reference evaluation, the check that a rewrite computes the same,
and constant subgraphs evaluated once (precompute). Below `taso.cost` and `taso.optimize`, which both run models."""

from taso.execute.check import Runner, compare, random_inputs, tolerance
from taso.execute.precompute import fold_static_shapes

__all__ = [
    "Runner",
    "compare",
    "fold_static_shapes",
    "random_inputs",
    "tolerance",
]
