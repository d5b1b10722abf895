"""Partially-equivalent transformations (PET, OSDI'21): a mutant of compute ops plus an exact correction.

A *mutant* computes the output of one compute op (or of several sibling ops at once) another way that agrees
with it on most of the output but not all: the batch laid side by side as one wide image lets the kernel see
the neighbour's pixels instead of zero padding at the seams. Where a mutant differs is found exactly, never
guessed:

1. The ops and their mutant are evaluated over Z_p (`taso.generate.field_eval`) on random inputs, twice,
   at the model's sizes, except along the axes each op declares reducible (`COMPUTE`): a conv's channels and
   groups, a matmul's inner dimension. Those are summed (or run side by side) the same way on both sides, so
   they do not change *where* the two differ, and the test stays cheap at any size.
2. The compute ops are multi-linear, so the positions where the two differ form boxes. Each mutant names its
   per-axis split points (the seams); a few test positions per box of that grid (corners and centre) decide it.
3. Each output's mismatched boxes are covered by slabs along one output axis (the axis that recomputes least),
   and each slab is recomputed by the original op on just the input region it reads (the op's `Compute.slab`):
   Split -> op -> Concat into the mutant's output.
4. The corrected mutant is evaluated once more on fresh inputs and must equal the original *everywhere*; a
   mutant whose mismatch the boxes did not fully cover is rejected here.

Mutant kinds are data (`MUTATORS`): the op they apply to, whether they merge sibling nodes, and a function that
builds the mutant with a `Builder`. The search (`taso.search`) takes the corrected mutants as candidates beside
the proved rules' rewrites, and the measured cost model decides, correction kernels included.

- `mutants`: the `Builder` and the mutant kinds (`MUTATORS`)
- `correct`: where a mutant differs (steps 1-2), its correction and the plan that checks it (steps 3-4)
- `candidates`: the sites in a model graph, the graph with a corrected mutant in place, the search's candidates
"""

from taso.pet.candidates import PREFIX, mutate, mutations, sites
from taso.pet.correct import MAX_FRACTION, Fix, Plan, plan
from taso.pet.mutants import MUTATORS, Builder, Mutant, MutantKind, Mutator, single

__all__ = [
    "Builder",
    "Fix",
    "MAX_FRACTION",
    "MUTATORS",
    "Mutant",
    "MutantKind",
    "Mutator",
    "PREFIX",
    "Plan",
    "mutate",
    "mutations",
    "plan",
    "single",
    "sites",
]
