"""A planted contradictory lowering (tests/test_planted.py copies this file into a copy of specs/): Relu lowered
with a fact its own shape rule contradicts (its result one row longer than its input). Every goal follows from
premises that contradict each other, so a verifier that looks for a model only among the facts, without the
shape axioms, proves "Relu dropped"; one that needs a model of all premises first proves nothing."""

from taso.verify import D


def _lower(node, args, types, f):
    y = f.relu(args[0])
    f.fact(D(y, 0) == D(args[0], 0) + 1)
    return [y]


LOWER = {"Relu": _lower}
