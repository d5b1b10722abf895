"""PET mutants: compute ops rewritten so they are right on most of the output, then corrected."""

from taso.pet.mutants import (
    MAX_FRACTION,
    MUTATORS,
    PREFIX,
    Builder,
    Fix,
    Mutant,
    MutantKind,
    Mutator,
    Plan,
    mutate,
    mutations,
    plan,
    single,
    sites,
)

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
