"""Where a verdict came from, so a proof is only trusted under the specs that made it.

Every verdict records the digest of the specs it was decided from, the z3 that decided it and the verifier's
version (`record`). `subst optimize` applies a proved rule only when that record matches the specs it runs with
and this verifier (`why_untrusted`): a rule marked ``proved`` by hand, or proved from specs since changed (an
axiom found wrong and mended), is skipped and counted, never applied. The z3 version is recorded, not required:
a proof by another z3 is still a proof from the same axioms; only which rules end unknown can differ.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from taso.rules.rule import Rule
from taso.shipped import shipped

SPECS_DIR = shipped("specs")
"""The shipped specs: what `subst verify` proves from and `subst optimize` trusts proofs from by default."""
VERIFIER_VERSION = 2
"""Raised whenever lowering or the proof's meaning changes: verdicts of an older verifier are then stale.
2: sizes and free attributes symbolic, conditions a proof needs recorded with it."""


def specs_digest(folder: str | Path) -> str:
    """A digest of every spec file's name and bytes (what `taso.spec.load_specs` reads)."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).glob("*.py")):
        if not p.name.startswith("_"):
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def record(digest: str) -> dict[str, object]:
    """The provenance a verdict stores in its detail under ``proof``. z3 is imported here, by the verifier's
    call: generation and optimize read provenance and must run where z3 is not installed (a Ray worker)."""
    import z3

    return {"specs": digest, "z3": z3.get_full_version(), "verifier": VERIFIER_VERSION}


def why_untrusted(detail: dict, digest: str) -> str | None:
    """Why a rule marked proved must not be applied under specs of ``digest`` (None: it may)."""
    proof = detail.get("proof")
    if not isinstance(proof, dict) or "axioms" not in detail:
        return "no proof record (not proved by `subst verify`)"
    if proof.get("verifier") != VERIFIER_VERSION:
        return "proved by an older verifier"
    if proof.get("specs") != digest:
        return "proved under other specs"
    return None


def trusted(rules: Iterable[Rule], digest: str) -> tuple[list[Rule], Counter[str]]:
    """The rules that may be applied under specs of ``digest``, and how many were skipped, by reason."""
    kept: list[Rule] = []
    skipped: Counter[str] = Counter()
    for r in rules:
        why = why_untrusted(r.detail, digest) if r.status == "proved" else f"status {r.status}"
        if why is None:
            kept.append(r)
        else:
            skipped[why] += 1
    return kept, skipped
