"""Where a verdict came from, so a proof is only trusted under the specs that made it.

Every verdict records the z3 that decided it and the verifier's version (`record`), and a proof the digest of
what it rested on: the axioms it used, the symbols in play and how the rule's ops are lowered, each by its
content (`taso.verify.basis`). `subst optimize` applies a proved rule only when this verifier made it and that
digest, taken again under the specs it runs with, matches (`why_untrusted`): a rule marked ``proved`` by hand, or
proved from an axiom since changed (found wrong and mended) or removed, is skipped and counted, never applied;
a spec added for another op, or a comment, leaves it trusted. The z3 version is recorded, not required: a proof
by another z3 is still a proof from the same axioms; only which rules end unknown can differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from taso.rules.rule import Rule
from taso.shipped import shipped

SPECS_DIR = shipped("specs")
"""The shipped specs: what `subst verify` proves from and `subst optimize` trusts proofs from by default."""
VERIFIER_VERSION = 3
"""Raised whenever lowering or the proof's meaning changes: verdicts of an older verifier are then stale.
2: sizes and free attributes symbolic, conditions a proof needs recorded with it. 3: a proof's specs digest is
over what it rested on (`taso.verify.basis`), not every spec file's bytes."""


def record(digest: str | None) -> dict[str, object]:
    """The provenance a verdict stores in its detail under ``proof``: ``digest`` is that of what a proof rested
    on (None for a verdict that is no proof). z3 is imported here, by the verifier's call: generation and
    optimize read provenance and must run where z3 is not installed (a Ray worker)."""
    import z3

    return {"specs": digest, "z3": z3.get_full_version(), "verifier": VERIFIER_VERSION}


def why_untrusted(rule: Rule, digest_of: Callable[[Rule], str | None]) -> str | None:
    """Why ``rule``, marked proved, must not be applied under specs whose digest of a rule's proof is
    ``digest_of`` (`taso.verify.basis.Basis.digest_of`; None where they lack a part it used). None: it may."""
    proof = rule.detail.get("proof")
    if not isinstance(proof, dict) or "axioms" not in rule.detail:
        return "no proof record (not proved by `subst verify`)"
    if proof.get("verifier") != VERIFIER_VERSION:
        return "proved by an older verifier"
    if proof.get("specs") is None or proof.get("specs") != digest_of(rule):
        return "proved under other specs"
    return None


def trusted(rules: Iterable[Rule], digest_of: Callable[[Rule], str | None]) -> tuple[list[Rule], Counter[str]]:
    """The rules that may be applied under specs whose proof digests are ``digest_of``, and how many were
    skipped, by reason."""
    kept: list[Rule] = []
    skipped: Counter[str] = Counter()
    for r in rules:
        why = why_untrusted(r, digest_of) if r.status == "proved" else f"status {r.status}"
        if why is None:
            kept.append(r)
        else:
            skipped[why] += 1
    return kept, skipped
