"""A proof binds its rule, and no one can forge one (`taso.rules.provenance`, `taso.rules.signing`): the audit's
attacks on a store, each with the real verifier, real SQLite and a real optimize run, and each with a positive
control, so a test fails when its guard is removed rather than passing because nothing applies."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import prove_into, subst
from test_provenance import DISTRIBUTE, SIBLING_CONVS, _sibling_convs, _two_matmuls

from taso.errors import BadInput
from taso.optimize import Settings, optimize
from taso.rules import Rule, parse_rules, provenance, rule_id, signing, store
from taso.rules.rule import rule_digest
from taso.search import rulecache
from taso.verify import load_specs, pending, verify_rows
from taso.verify.basis import for_folder

FALSE_DISTRIBUTE = """
rule MatMul distributes over a sum, one weight read twice (false)
graph(%x: float32[2,4], %w1: float32[4,5] weight, %w2: float32[4,5] weight):
  %a = MatMul(%x, %w1) : float32[2,5]
  %b = MatMul(%x, %w2) : float32[2,5]
  %y = Add(%a, %b) : float32[2,5]
  return %y
=>
graph(%x: float32[2,4], %w1: float32[4,5] weight, %w2: float32[4,5] weight):
  %w = Add(%w1, %w1) : float32[4,5]
  %y = MatMul(%x, %w) : float32[2,5]
  return %y
"""
"""Over the same ops as DISTRIBUTE (so the same spec parts), and false: it drops ``w2``."""


def _proved_true(tmp: Path) -> tuple[Path, dict]:
    """A store with DISTRIBUTE proved for real, and its row."""
    db = prove_into(tmp / "rules.db", [replace(parse_rules(DISTRIBUTE)[0], status="proved")])
    return db, next(store.open_store(db)["rules"].rows)


def _add_proved(path: Path, rule: Rule, detail: dict) -> None:
    """``rule`` written into the store at ``path`` as proved, with ``detail`` as its record."""
    db = store.open_store(path)
    store.add_rules(db, [replace(rule, status="proved", detail=detail)])


def _run(tmp: Path, db: Path, model: Path | None = None) -> tuple[dict, dict]:
    """optimize with the check off (so a wrong rewrite is written, not caught): the rules applied and those
    skipped, by reason."""
    model = model or _two_matmuls(tmp)
    report = optimize(model, tmp / "o.onnx", db, run_check=False, settings=Settings(device="estimate"))
    return report.rules_applied, report.search["untrusted_rules"]


def test_a_true_rules_record_pasted_onto_a_false_rule_is_not_applied(tmp_path: Path) -> None:
    """The audit's first attack: the false rule, alone in the store with the true rule's record, is skipped; the
    true rule with its own record (the control) is applied to the same model."""
    db, row = _proved_true(tmp_path)
    assert _run(tmp_path, db)[0] == {row["rule_id"]: {"name": row["name"], "count": 1}}
    store.open_store(db)["rules"].delete(row["id"])
    _add_proved(db, parse_rules(FALSE_DISTRIBUTE)[0], json.loads(row["detail"]))
    assert _run(tmp_path, db) == ({}, {"its proof record is not this rule's": 1})


def test_a_record_computed_with_the_public_code_is_not_applied(tmp_path: Path) -> None:
    """Everything a record holds but the signature can be computed for any rule with the public code; without the
    user's key the false rule's record, bound to it exactly, is not trusted, whether unsigned or signed with a key
    of the attacker's."""
    db, row = _proved_true(tmp_path)
    store.open_store(db)["rules"].delete(row["id"])
    false = parse_rules(FALSE_DISTRIBUTE)[0]
    facts = {k: v for k, v in json.loads(row["detail"]).items() if k != "proof"}
    specs = for_folder(provenance.SPECS_DIR).digest(false.ops, facts["symbols"], facts["axioms"])
    assert specs is not None
    forged = provenance.seal(false, facts, specs, os.urandom(signing.KEY_BYTES))
    _add_proved(db, false, {**facts, "proof": forged})
    assert _run(tmp_path, db) == ({}, {"signed by another key": 1})
    unsigned = {**facts, "proof": {**forged, "signature": None}}
    store.open_store(db)["rules"].update(
        next(store.open_store(db)["rules"].rows)["id"], {"detail": json.dumps(unsigned)}
    )
    assert _run(tmp_path, db) == ({}, {"not signed by `subst verify`": 1})


def test_an_edited_target_under_an_intact_record_refuses_the_store(tmp_path: Path) -> None:
    """The audit's third attack, on a copy of the shipped store: a proved rule's target edited, its id and
    record left as they were. Reading its rules, and `subst rules show` of that id, refuse the store in one line
    naming the row; the control, the copy unedited, shows the rule."""
    copy = tmp_path / "copy.db"
    shutil.copyfile(store.DEFAULT_PATH, copy)
    row = next(store.open_store(copy)["rules"].rows_where("status = 'proved' AND dst LIKE '% Add(%'", order_by="id"))
    shown = subst("rules", "show", row["rule_id"], "--store", copy)
    assert shown.returncode == 0 and row["dst"] in shown.stdout
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE rules SET dst = ? WHERE id = ?", (row["dst"].replace(" Add(", " Sub(", 1), row["id"]))
    with pytest.raises(BadInput, match=f"store row {row['id']}: rule id {row['rule_id']} is not its content's"):
        list(store.load_rules(store.open_store(copy), status="proved"))
    shown = subst("rules", "show", row["rule_id"], "--store", copy)
    assert shown.returncode == 2 and shown.stdout == "" and len(shown.stderr.strip().splitlines()) == 1
    assert f"store row {row['id']}" in shown.stderr


def test_an_edited_target_given_its_new_id_is_not_applied(tmp_path: Path) -> None:
    """The attack carried further: the target edited and the row given the new content's id. The store opens,
    and the record, bound to the old id, is not trusted; the control is the first test's."""
    db, row = _proved_true(tmp_path)
    false = parse_rules(FALSE_DISTRIBUTE)[0]
    changed = {"dst": false.to_row()["dst"], "rule_id": rule_id(false)}
    store.open_store(db)["rules"].update(row["id"], changed)
    assert _run(tmp_path, db) == ({}, {"its proof record is not this rule's": 1})


def test_a_false_rule_under_a_true_rules_id_refuses_the_store(tmp_path: Path) -> None:
    """The audit's fourth attack: a false rule inserted with an existing rule's id and its record. Opening the
    store refuses it in one line naming both rows, for optimize and `subst rules show` alike."""
    db, row = _proved_true(tmp_path)
    false = parse_rules(FALSE_DISTRIBUTE)[0]
    _add_proved(db, false, json.loads(row["detail"]))
    store.open_store(db)["rules"].update(2, {"rule_id": row["rule_id"]})
    with pytest.raises(BadInput, match=f"rows 1 and 2 both claim rule id {row['rule_id']}"):
        _run(tmp_path, db)
    shown = subst("rules", "show", row["rule_id"], "--store", db)
    assert shown.returncode == 2 and len(shown.stderr.strip().splitlines()) == 1 and "rows 1 and 2" in shown.stderr


def test_a_store_signed_with_another_key_is_untrusted_until_verified_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store proved by another user (the session's key) is skipped under this user's (a config folder of its
    own), and counted; `verify --force` proves it again, signing with this user's key, and then it applies."""
    db, row = _proved_true(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "other-user"))
    assert _run(tmp_path, db) == ({}, {"signed by another key": 1})
    opened = store.open_store(db)
    assert verify_rows(opened, pending(opened, force=True), load_specs(provenance.SPECS_DIR)).counts["proved"] == 1
    assert _run(tmp_path, db) == ({row["rule_id"]: {"name": row["name"], "count": 1}}, {})
    assert (tmp_path / "other-user" / "subst" / "trust.key").exists()


def test_verify_refuses_a_row_whose_id_is_not_its_contents(tmp_path: Path) -> None:
    """A proof binds its rule's id: verify reads each row's id from its content and refuses a store whose row
    says another, writing nothing."""
    db = store.create(tmp_path / "rules.db")
    store.add_rules(db, parse_rules(DISTRIBUTE))
    db["rules"].update(1, {"rule_id": "0" * 10})
    with pytest.raises(BadInput, match="store row 1: rule id 0000000000 is not its content's"):
        verify_rows(db, pending(db), load_specs(provenance.SPECS_DIR))
    assert [r["status"] for r in db["rules"].rows] == ["candidate"]


def test_a_pinned_stores_proofs_apply_without_a_key_and_only_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proofs pinned as the shipped ones (`provenance.pin`) apply under a user with no key (the control); a
    condition dropped from one of their records, its binding left as it was, leaves the pin matching but not the
    binding, and the rule is skipped (applied, it would merge a group-2 model's convs wrong)."""
    rule = replace(parse_rules(SIBLING_CONVS)[0], status="proved")
    db = prove_into(tmp_path / "rules.db", [rule])
    monkeypatch.setattr(provenance, "SHIPPED", tmp_path / "shipped_proofs.json")
    provenance.pin(store.open_store(db))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-key"))
    applied, _ = _run(tmp_path, db, _sibling_convs(tmp_path, 1))
    assert applied == {rule.id: {"name": rule.name, "count": 1}}
    row = next(store.open_store(db)["rules"].rows)
    detail = json.loads(row["detail"])
    assert detail["conditions"], "the merge holds for group 1 only"
    store.open_store(db)["rules"].update(row["id"], {"detail": json.dumps({**detail, "conditions": []})})
    assert provenance.is_shipped(list(store.load_rules(store.open_store(db), status="proved")))
    assert _run(tmp_path, db, _sibling_convs(tmp_path, 2)) == ({}, {"its proof record is not this rule's": 1})


def test_the_shipped_pin_is_current_and_every_shipped_proof_is_trusted_without_a_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The package pins the shipped store's proofs (`make rulecache`): else optimize trusts none of them."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-key"))
    rules = rulecache.proved_rules(store.open_store(store.DEFAULT_PATH))
    pinned = json.loads(provenance.SHIPPED.read_text())
    assert pinned["proofs"] == provenance.proofs_digest(rules), "stale: run `make rulecache`"
    kept, skipped = provenance.trusted(rules, for_folder(provenance.SPECS_DIR).digest_of)
    assert not skipped and len(kept) == len(rules) == pinned["rules"]


def test_the_verifier_digest_covers_every_module_it_names() -> None:
    """Each entry of `VERIFIER_CODE` names code that exists (a renamed module would drop out of the digest)."""
    root = Path(provenance.__file__).resolve().parent.parent
    assert all(list(root.glob(pattern)) for pattern in provenance.VERIFIER_CODE)
    assert len(provenance.verifier_digest()) == 32


def test_a_new_key_is_the_users_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made on first need, 0600 in a 0700 folder, and the same key read again; what it signs verifies under
    it alone, and a store's signature of any text is compared, not a crash."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert signing.user_key() is None
    key = signing.user_key(create=True)
    path = tmp_path / "subst" / "trust.key"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert signing.user_key() == key and key is not None and len(key) == signing.KEY_BYTES
    digest = "0" * 64
    assert signing.verifies(key, digest, signing.sign(key, digest))
    assert not any(signing.verifies(key, digest, s) for s in ("é" * 64, None, signing.sign(os.urandom(32), digest)))


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("file readable by others", "file is open to other users"),
        ("folder writable by others", "folder is open to other users"),
        ("file owned by another user", "owned by another user"),
    ],
)
def test_a_key_others_could_read_or_replace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, message: str
) -> None:
    """Whoever reads the key can sign false rules; whoever replaces it makes this user trust their signatures:
    such a key is refused in one line, for verify and optimize alike."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    signing.user_key(create=True)
    path = signing.key_path()
    if what == "file readable by others":
        path.chmod(0o644)
    elif what == "folder writable by others":
        path.parent.chmod(0o777)
    else:
        if os.getuid() == 0:  # root gives the key away; anyone else links it to root's file
            os.chown(path, 4321, -1)
        else:
            path.unlink()
            path.symlink_to("/etc/passwd")
    with pytest.raises(BadInput, match=message) as e:
        signing.user_key()
    assert "\n" not in str(e.value)


def test_a_rule_written_again_with_other_names_is_not_added_twice(tmp_path: Path) -> None:
    """Its id is the first's: a second row would make the store refuse to open, so it is not added; a rule that
    says something else (the control) is."""
    db = store.create(tmp_path / "rules.db")
    rule = parse_rules(DISTRIBUTE)[0]
    renamed = parse_rules(DISTRIBUTE.replace("%a", "%first").replace("%b", "%second"))[0]
    assert renamed.to_row()["src"] != rule.to_row()["src"] and renamed.id == rule.id
    assert store.add_rules(db, [rule, renamed]) == 1
    assert store.add_rules(db, [renamed, parse_rules(FALSE_DISTRIBUTE)[0]]) == 1
    assert [r.id for r in store.load_rules(store.open_store(tmp_path / "rules.db"))] == [
        rule.id,
        rule_id(parse_rules(FALSE_DISTRIBUTE)[0]),
    ]


def test_a_proof_record_of_another_shape_is_counted_not_a_crash() -> None:
    """A store's detail is anyone's text: a record that is no mapping is skipped and counted like a missing one."""
    rule = replace(parse_rules(DISTRIBUTE)[0], status="proved", detail={"proof": "forged", "axioms": []})
    kept, skipped = provenance.trusted([rule], for_folder(provenance.SPECS_DIR).digest_of)
    assert kept == [] and skipped == {"no proof record (not proved by `subst verify`)": 1}


def test_a_false_rule_whose_id_collides_with_a_true_ones_keeps_no_proof(tmp_path: Path) -> None:
    """An id is 40 bits, within a forger's search: a false rule given the true rule's id and its signed record
    (as a collision would give it) is still refused, as the record binds the rule's whole content digest."""
    db, row = _proved_true(tmp_path)
    (true,) = store.load_rules(store.open_store(db), status="proved")
    colliding = replace(parse_rules(FALSE_DISTRIBUTE)[0], status="proved", detail=true.detail, id=true.id)
    assert colliding.id == true.id and rule_digest(colliding) != rule_digest(true)
    basis = for_folder(provenance.SPECS_DIR)
    assert provenance.trusted([true], basis.digest_of)[0] == [true]  # the control
    assert provenance.trusted([colliding], basis.digest_of) == ([], Counter({"its proof record is not this rule's": 1}))
