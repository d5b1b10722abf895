"""The pinned path of `provenance.trusted`: a store whose proved rows are those `provenance.pin` pinned, under
the catalogue entries it pinned, is trusted without taking each binding again; every way of making it another
store, or its proofs stale, leaves that path and is caught as before. Each attack runs on a store pinned for
real (a user with no key, so only the pin vouches), with the pinned store itself as the control."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import prove_into
from test_provenance import DISTRIBUTE, SPEC_EDITS, _edited_specs
from test_trust import FALSE_DISTRIBUTE, _add_proved

from taso import ops
from taso.cachedir import cache_folder
from taso.errors import BadInput
from taso.rules import Rule, parse_rules, provenance, signing, store
from taso.search import rulecache
from taso.verify.basis import for_folder

NOT_THIS_RULES = "its proof record is not this rule's"


@pytest.fixture(scope="module")
def proved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with DISTRIBUTE proved for real (once: each test changes a copy)."""
    return prove_into(
        tmp_path_factory.mktemp("proved") / "rules.db", [replace(parse_rules(DISTRIBUTE)[0], status="proved")]
    )


@pytest.fixture
def pinned(proved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the `proved` store pinned as the shipped one, read by a user with no key."""
    db = Path(shutil.copyfile(proved, tmp_path / "rules.db"))
    monkeypatch.setattr(provenance, "SHIPPED", tmp_path / "shipped_proofs.json")
    provenance.pin(store.open_store(db))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-key"))
    return db


def _trusted(db: Path, digest_of: Callable[[Rule], str | None] | None = None) -> tuple[list[Rule], Counter[str]]:
    """`provenance.trusted` as `subst optimize` calls it on the store at ``db``, under the shipped specs."""
    opened = store.open_store(db)
    digest_of = digest_of or for_folder(provenance.SPECS_DIR).digest_of
    return provenance.trusted(list(store.load_rules(opened, status="proved")), digest_of, opened)


def _bindings_taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The rules whose binding `provenance.bound` takes from now on, by id."""
    taken: list[str] = []
    real = provenance.bound
    monkeypatch.setattr(provenance, "bound", lambda rule, *a: taken.append(rule.id) or real(rule, *a))
    return taken


def test_a_pinned_store_is_trusted_without_taking_a_binding_again(
    pinned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pinned store's proof is trusted with no key and no binding taken; read without its store (so not
    known to be the pinned rows) the binding is taken, and the same rules are trusted."""
    taken = _bindings_taken(monkeypatch)
    kept, skipped = _trusted(pinned)
    assert len(kept) == 1 and not skipped and taken == []
    rules = list(store.load_rules(store.open_store(pinned), status="proved"))
    assert provenance.trusted(rules, for_folder(provenance.SPECS_DIR).digest_of) == (kept, skipped)
    assert taken == [rules[0].id]


@pytest.mark.parametrize("column", ["conditions", "detail"])
def test_a_row_changed_under_its_id_and_binding_leaves_the_pinned_path(pinned: Path, column: str) -> None:
    """A condition added to the row, or a fact of its record changed (whether it reads backwards), its id and
    binding kept: the ids and bindings still match the pin, the rows do not, and the binding taken again does
    not match the record."""
    db = store.open_store(pinned)
    row = next(db["rules"].rows)
    if column == "conditions":
        db["rules"].update(row["id"], {"conditions": json.dumps([*json.loads(row["conditions"]), "note"])})
    else:
        detail = json.loads(row["detail"])
        db["rules"].update(row["id"], {"detail": json.dumps({**detail, "reversible": not detail["reversible"]})})
    assert provenance.is_shipped(list(store.load_rules(store.open_store(pinned), status="proved")))
    assert _trusted(pinned) == ([], Counter({NOT_THIS_RULES: 1}))


def test_a_forged_row_appended_to_a_pinned_store_is_not_vouched_for(pinned: Path) -> None:
    """A false rule appended with a record bound to it exactly by the public code, unsigned: the store's proofs
        are no longer the pinned ones, so nothing vouches for any of them without the user's key (the true rule's
    record is signed with the key of the session that proved it)."""
    true = next(store.open_store(pinned)["rules"].rows)
    false = parse_rules(FALSE_DISTRIBUTE)[0]
    facts = {k: v for k, v in json.loads(true["detail"]).items() if k != "proof"}
    specs = for_folder(provenance.SPECS_DIR).digest(false.ops, facts["symbols"], facts["axioms"])
    assert specs is not None
    forged = provenance.seal(false, facts, specs, os.urandom(signing.KEY_BYTES))
    _add_proved(pinned, false, {**facts, "proof": {**forged, "signature": None}})
    assert _trusted(pinned) == ([], Counter({"not signed by `subst verify`": 1, "signed by another key": 1}))


@pytest.mark.parametrize("pin", ["", "[]", '{"proofs": 1}'])
def test_a_pin_that_is_not_this_stores_vouches_for_nothing(pinned: Path, pin: str) -> None:
    """A pin file cut short, of another shape, or pinning other proofs: no crash, and the proofs are the user's
    key's to vouch for (this user has none: none is trusted)."""
    provenance.SHIPPED.write_text(pin)
    assert _trusted(pinned) == ([], Counter({"signed by another key": 1}))


@pytest.mark.parametrize("pin", ["of other rows", "of older form, proofs alone"])
def test_a_pin_of_these_proofs_but_not_these_rows_vouches_as_before(pinned: Path, pin: str) -> None:
    """A pin whose proofs digest is this store's but whose rows are another's, or that names no rows nor
    entries (as `pin` wrote before): no crash, and the binding taken again vouches for the rule."""
    pinned_now = json.loads(provenance.SHIPPED.read_text())
    if pin == "of other rows":
        provenance.SHIPPED.write_text(json.dumps({**pinned_now, "rows": "0" * 64}))
    else:
        provenance.SHIPPED.write_text(json.dumps({"proofs": pinned_now["proofs"], "rules": 1}))
    assert len(_trusted(pinned)[0]) == 1


def test_a_changed_verifier_leaves_the_pinned_proofs_stale(pinned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier's code digest is another (its code changed): each record names the old one."""
    monkeypatch.setattr(provenance, "verifier_digest", lambda: "0" * 32)
    assert _trusted(pinned) == ([], Counter({"proved by another verifier's code": 1}))


def test_a_changed_catalogue_entry_leaves_the_pinned_path(pinned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MatMul's entry changed (a fact of it the binding covers): the pinned entries no longer match, and the
    binding taken again, over the new entry, is not the record's."""
    provenance._entry_digest.cache_clear()
    try:
        monkeypatch.setitem(ops.OPS, "MatMul", replace(ops.OPS["MatMul"], min_opset=ops.OPS["MatMul"].min_opset + 1))
        assert _trusted(pinned) == ([], Counter({NOT_THIS_RULES: 1}))
    finally:
        monkeypatch.undo()
        provenance._entry_digest.cache_clear()


def test_changed_specs_leave_the_pinned_proofs_stale(pinned: Path, tmp_path: Path) -> None:
    """The axiom the proof used, changed in a copy of the specs: checked per rule on the pinned path too."""
    specs = _edited_specs(tmp_path, SPEC_EDITS["the axiom it used"])
    assert _trusted(pinned, for_folder(specs).digest_of) == ([], Counter({"proved under other specs": 1}))


@pytest.mark.parametrize("field", ["bound", "verifier"])
def test_pin_refuses_a_store_whose_record_is_not_this_verifiers_binding(
    pinned: Path, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    """`pin` takes each binding, since a run on the pinned rows will not: a record whose binding is not its
    rule's (a fact changed under it), or that names another verifier, refuses the store, the pin as it was."""
    db = store.open_store(pinned)
    row = next(db["rules"].rows)
    detail = json.loads(row["detail"])
    if field == "bound":
        detail = {**detail, "reversible": not detail["reversible"]}
    else:
        detail = {**detail, "proof": {**detail["proof"], "verifier": "0" * 32}}
    db["rules"].update(row["id"], {"detail": json.dumps(detail)})
    before = provenance.SHIPPED.read_text()
    with pytest.raises(BadInput, match=f"rule {row['rule_id']}: its proof record is not this verifier's binding"):
        provenance.pin(store.open_store(pinned))
    assert provenance.SHIPPED.read_text() == before


def test_the_shipped_store_is_read_on_the_pinned_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The shipped pin names the shipped store's rows as stored (else `make rulecache` is due), and reading its
    rules as `subst optimize` does takes no binding again."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-key"))
    db = store.open_store(store.DEFAULT_PATH)
    assert json.loads(provenance.SHIPPED.read_text())["rows"] == provenance.rows_digest(db), "run `make rulecache`"
    taken = _bindings_taken(monkeypatch)
    kept, skipped = provenance.trusted(rulecache.proved_rules(db), for_folder(provenance.SPECS_DIR).digest_of, db)
    assert not skipped and len(kept) > 1000 and taken == []


def test_rules_from_the_users_cached_form_take_the_full_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user's cached form is matched to the store's rows by 40-bit ids (`rulecache._is_store`), which a forger
    who can write that cache could collide: rules read from it are vouched for by their bindings, never by the
    rows' pin, whatever `subst optimize` is given."""
    from conftest import ROOT

    from taso.optimize import Settings, optimize

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-key"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = store.open_store(store.DEFAULT_PATH)
    rules = rulecache.proved_rules(db)  # the rows as stored: the shipped form where current, else a parse
    assert rulecache.as_stored()
    # the user's form of them, as a parse caches it in a dev checkout (parsing again cost 16 s of CPU)
    key = rulecache.rows_digest(db)
    form = rulecache._encode(key, rulecache._Form(rules, {}))
    rulecache._write(cache_folder() / f"rules-{key[:32]}.json", form)
    monkeypatch.setattr(rulecache, "SHIPPED", tmp_path / "no-shipped-form.json")  # as in a dev checkout
    taken = _bindings_taken(monkeypatch)
    costs = str(ROOT / "taso" / "cost" / "reference_costs.json")
    settings = Settings(costs=costs, budget=1)  # the rules are read, and vouched for, before the search starts
    report = optimize(ROOT / "models" / "bert_tiny.onnx", tmp_path / "o.onnx", run_check=False, settings=settings)
    assert not rulecache.as_stored() and report.search["untrusted_rules"] == {} and len(taken) > 1000
