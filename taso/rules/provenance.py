"""Where a verdict came from, so a proof is only trusted for its own rule, under the specs and code that made it.

Every verdict records the z3 that decided it and a digest of the verifier's code by content (`verifier_digest`
over `VERIFIER_CODE`); a proof also records the digest of what it rested on: the axioms it used, the symbols in
play and how the rule's ops are lowered, each by its content (`taso.verify.basis`). A proof's record binds its
rule (`bound`): the whole digest of what the rule says (`taso.rules.rule_digest`: both sides, conditions), the
catalogue entries of its ops by content, the facts the proof recorded (axioms, symbols, the conditions it needs,
sizes, whether it reads backwards), the specs digest and the verifier's. `subst verify` signs that binding with
the user's key (`taso.rules.signing`).

`subst optimize` applies a proved rule only when (`why_untrusted`) this verifier's code made it, the specs
digest, taken again under the specs it runs with, matches, the binding recomputed from the rule matches, and
either the signature verifies under the user's key or the store's proofs are the shipped ones, whose digest
the package pins (`SHIPPED`, written by `make rulecache`: whoever can change the package can change the code).
The pin also names the shipped store's proved rows as stored and the catalogue entries of their ops, and `pin`
took every binding: a run on those rows under those entries does not take the ~4,000 bindings again (`trusted`).
So a rule marked ``proved`` by hand, a record pasted onto another rule, a record computed from scratch with the
public code, a proof from an axiom since changed or removed, or by a verifier since changed, is skipped and
counted, never applied; a spec added for another op, or a comment in one, leaves it trusted. Another user's
store is untrusted until `subst verify --force` proves it again under this user's key. The z3 version is
recorded, not required: a proof by another z3 is still a proof from the same axioms.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache, cached_property
from pathlib import Path

import sqlite_utils

from taso.errors import BadInput
from taso.rules import signing, store
from taso.rules.rule import Rule, rule_digest
from taso.shipped import shipped

SPECS_DIR = shipped("specs")
"""The shipped specs: what `subst verify` proves from and `subst optimize` trusts proofs from by default."""
VERIFIER_CODE = (
    "verify/lowering.py",  # a rule's sides as z3 terms, the facts and conditions a proof may assume
    "verify/run.py",  # what counts as a proof: goals, stages, which conditions are recorded
    "verify/premises.py",  # no goal before the premises have a model: a contradiction proves anything
    "verify/admit.py",  # rule text normalised through the catalogue before it is proved
    "verify/spec.py",  # the spec vocabulary: symbols' shape axioms, requirements, semantics
    "verify/speccheck.py",  # the gate that refuses specs whose axioms fail the ops' semantics
    "verify/basis.py",  # what a specs digest covers
    "verify/content.py",
    "rules/rule.py",  # what a rule, its free attributes and recorded conditions say; its id
    "rules/match.py",  # how a rule's source binds a model (free attributes, commuted operands)
    "ops/opdef.py",  # the catalogue's machinery; each entry a rule uses is bound by its content (`bound`)
    "ops/traits.py",
)
"""The modules (under taso/, globs allowed) whose code decides what a proof means: a change to any of them makes
every proof stale until `subst verify --force`. Not here: the pre-check (it only refutes), the rewrite (it
enforces the recorded conditions; re-proving would not mend it), the IR's text form (a change to what a rule's
text means changes its id, which refuses the store: `taso.rules.store`)."""
SHIPPED = Path(__file__).with_name("shipped_proofs.json")
"""The pinned digest of the shipped store's proofs (`pin`, `proofs_digest`): package data, like the store."""
BOUND = ("axioms", "symbols", "conditions", "sizes", "reversible")
"""The facts of a proof's detail its binding covers: what `taso.search` and the specs digest read of it."""


@cache
def verifier_digest() -> str:
    """A digest of the code in `VERIFIER_CODE`, by name and bytes."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pattern in VERIFIER_CODE:
        for path in sorted(root.glob(pattern)):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:32]


def record(digest: str | None) -> dict[str, object]:
    """The provenance a verdict stores in its detail under ``proof``: ``digest`` is that of what a proof rested
    on (None for a verdict that is no proof; `seal` completes a proof's). z3 is imported here, by the verifier's
    call: generation and optimize read provenance and must run where z3 is not installed (a Ray worker)."""
    import z3

    return {"specs": digest, "z3": z3.get_full_version(), "verifier": verifier_digest()}


def bound(rule: Rule, detail: Mapping[str, object], specs: str) -> str:
    """The binding of a proof to its rule: a digest of what the rule says (not its 40-bit id), the proof's facts
    (`BOUND`) in ``detail``, the specs digest ``specs``, the verifier's code and the catalogue entries of the
    rule's ops. ``rule.id`` must be its content's
    (`taso.rules.store` refuses a row whose id is not)."""
    facts = {k: detail.get(k) for k in BOUND}
    entries = {op: _entry_digest(op) for op in rule.ops}
    text = json.dumps([rule_digest(rule), facts, specs, verifier_digest(), entries], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@cache
def _entry_digest(op: str) -> str:
    """The digest of ``op``'s catalogue entry by content (`taso.verify.content.entry`): what the lowering, the
    matcher and the spec check read of it. Imported here: generation reads provenance where z3 may be absent."""
    from taso import ops
    from taso.verify import content

    return content.digest(content.entry(ops.get(op))) if op in ops.OPS else "not in the catalogue"


def seal(rule: Rule, detail: Mapping[str, object], specs: str, key: bytes) -> dict[str, object]:
    """The record of a proof of ``rule`` with facts ``detail`` from specs of digest ``specs``: bound to the
    rule and signed with the user's ``key``."""
    binding = bound(rule, detail, specs)
    return {**record(specs), "bound": binding, "signature": signing.sign(key, binding)}


def proofs_digest(rules: Sequence[Rule]) -> str:
    """A digest of the proved rules' ids and proof bindings, in order: what `SHIPPED` pins."""
    proofs = [(r.id, r.detail.get("proof")) for r in rules if r.status == "proved"]
    lines = [f"{name} {proof.get('bound') if isinstance(proof, dict) else None}" for name, proof in proofs]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def rows_digest(db: sqlite_utils.Database) -> str:
    """A digest of the store's proved rows as stored (row and rule ids, both sides' text, conditions, detail with
    its proof record): strings hashed, nothing parsed, so it costs a read of the rows (`trusted`'s pinned path)."""
    h = hashlib.sha256()
    query = "SELECT id, rule_id, src, dst, conditions, detail FROM rules WHERE status = 'proved' ORDER BY id"
    for row in db.conn.execute(query):
        h.update(repr(row).encode())
    return h.hexdigest()


def pin(db: sqlite_utils.Database) -> None:
    """Write `SHIPPED` for the shipped store ``db`` (through a temp file and a rename): for `make rulecache` only,
    since a run never writes into the package. Pinned: its proofs (`proofs_digest`), its proved rows as stored
    (`rows_digest`) and the catalogue entries of their ops; a run whose store and entries are those trusts each
    binding without taking it again (`trusted`), so each is taken here, and a store with one record that is not
    this verifier's binding of its rule as it stands is refused (`BadInput`), nothing written."""
    rules = list(store.load_rules(db, status="proved"))
    for r in rules:
        proof = r.detail.get("proof")
        specs = proof.get("specs") if isinstance(proof, dict) else None
        if not (
            isinstance(specs, str)
            and proof.get("verifier") == verifier_digest()
            and proof.get("bound") == bound(r, r.detail, specs)
        ):
            raise BadInput(f"rule {r.id}: its proof record is not this verifier's binding of it; not pinned")
    entries = {op: _entry_digest(op) for op in sorted({op for r in rules for op in r.ops})}
    pinned = {"proofs": proofs_digest(rules), "rules": len(rules), "rows": rows_digest(db), "entries": entries}
    with tempfile.NamedTemporaryFile("w", dir=SHIPPED.parent, delete=False, suffix=".tmp") as f:
        f.write(json.dumps(pinned, sort_keys=True) + "\n")
    os.chmod(f.name, 0o644)  # package data: read by every user
    os.replace(f.name, SHIPPED)


def _pinned() -> dict:
    """What `SHIPPED` pins (empty where it cannot be read as `pin` writes it)."""
    try:
        pinned = json.loads(SHIPPED.read_text())
    except (OSError, ValueError):
        return {}
    return pinned if isinstance(pinned, dict) else {}


def is_shipped(rules: Sequence[Rule]) -> bool:
    """Whether ``rules`` (a store's proved rules) are the shipped store's, as `SHIPPED` pins them."""
    return _pinned().get("proofs") == proofs_digest(rules)


def _as_pinned(pinned: Mapping[str, object], db: sqlite_utils.Database) -> bool:
    """Whether ``db``'s proved rows are those `pin` took each binding from, stored as they were, and the
    catalogue entries of their ops are unchanged: then every binding taken again would be the pinned one (the
    verifier's digest is in each record, the specs' checked per rule: `why_untrusted`)."""
    entries = pinned.get("entries")
    return (
        isinstance(entries, dict)
        and all(_entry_digest(op) == digest for op, digest in entries.items())
        and pinned.get("rows") == rows_digest(db)
    )


class Voucher:
    """What vouches for proofs besides their binding: the shipped pin, else the user's key, read on first
    need (a store whose proofs are the shipped ones never reads it). ``as_pinned``: the store's rows are the
    pinned ones too (`_as_pinned`), so their bindings were taken by `pin` and are not taken again."""

    def __init__(self, pinned: bool, as_pinned: bool = False) -> None:
        self.pinned = pinned
        self.as_pinned = as_pinned

    @cached_property
    def key(self) -> bytes | None:
        return signing.user_key()

    def why_not(self, proof: Mapping[str, object], binding: str) -> str | None:
        """Why a proof whose binding is ``binding`` is not vouched for; None: it is."""
        if self.pinned or signing.verifies(self.key, binding, proof.get("signature")):
            return None
        return "signed by another key" if proof.get("signature") else "not signed by `subst verify`"


def why_untrusted(rule: Rule, digest_of: Callable[[Rule], str | None], voucher: Voucher) -> str | None:
    """Why ``rule``, marked proved, must not be applied under specs whose digest of a rule's proof is
    ``digest_of`` (`taso.verify.basis.Basis.digest_of`; None where they lack a part it used). None: it may."""
    proof = rule.detail.get("proof")
    if not isinstance(proof, dict) or "axioms" not in rule.detail:
        return "no proof record (not proved by `subst verify`)"
    if proof.get("verifier") != verifier_digest():
        return "proved by another verifier's code"
    specs = digest_of(rule)
    if specs is None or proof.get("specs") != specs:
        return "proved under other specs"
    if voucher.as_pinned:
        return None
    binding = bound(rule, rule.detail, specs)
    if proof.get("bound") != binding:
        return "its proof record is not this rule's"
    return voucher.why_not(proof, binding)


def trusted(
    rules: Iterable[Rule], digest_of: Callable[[Rule], str | None], db: sqlite_utils.Database | None = None
) -> tuple[list[Rule], Counter[str]]:
    """The rules that may be applied under specs whose proof digests are ``digest_of``, and how many were
    skipped, by reason. ``db``: the store ``rules`` are the proved rows of, as read (`store.load_rules`,
    `taso.search.rulecache.proved_rules`): where it is the pinned store as `pin` pinned it, no binding is taken
    again (a content digest per rule: two thirds of trusting the shipped store). `BadInput` where the user's key
    is refused (`taso.rules.signing`)."""
    rules = list(rules)
    pinned = _pinned()
    shipped = pinned.get("proofs") == proofs_digest(rules)
    voucher = Voucher(shipped, shipped and db is not None and _as_pinned(pinned, db))
    kept: list[Rule] = []
    skipped: Counter[str] = Counter()
    for r in rules:
        why = why_untrusted(r, digest_of, voucher) if r.status == "proved" else f"status {r.status}"
        if why is None:
            kept.append(r)
        else:
            skipped[why] += 1
    return kept, skipped
