"""The cached form of a store's rules: read instead of parsed, never stale, kept out of the store's folder, and data
that can neither run code nor bring a rule the store and its proofs do not vouch for."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import sqlite_utils
from conftest import ROOT
from test_optimize import MATMUL_DISTRIBUTES, MERGE_MATMULS, RELU_OF_SPLIT

from taso.rules import RuleIndex, store
from taso.search import rulecache, ruleform
from taso.search.variants import both_directions

CHANGES = [
    {"status": "refuted"},
    {"detail": json.dumps({"planted": True})},
    {"conditions": json.dumps(["always"]), "rule_id": replace(MERGE_MATMULS, conditions=("always",), id="").id},
]
"""Raw SQL updates of a proved rule: a condition that changes what the rule says changes its id, which its row
must then name too (`taso.rules.store` refuses a row whose id is not its content's)."""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "subst"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "store" / "rules.db"
    path.parent.mkdir()
    store.add_rules(store.create(path), [MERGE_MATMULS, RELU_OF_SPLIT, MATMUL_DISTRIBUTES])
    return path


def _as_text(rules: list) -> list[tuple]:
    return [(str(r.src), str(r.dst), r.name, r.conditions, r.status, r.detail, r.id) for r in rules]


def test_the_second_read_comes_from_the_user_cache_and_equals_the_parse(cache: Path, db_path: Path) -> None:
    db = store.open_store(db_path)
    parsed = list(store.load_rules(db, status="proved"))
    first = rulecache.proved_rules(db)
    (written,) = cache.glob("rules-*.json")
    assert _as_text(first) == _as_text(parsed)
    assert os.listdir(db_path.parent) == ["rules.db"]  # nothing beside the store
    inode = written.stat().st_ino  # a form written again is a new file (written aside, then renamed)
    again = rulecache.proved_rules(db)
    assert _as_text(again) == _as_text(parsed) and written.stat().st_ino == inode  # read, not rewritten
    index = rulecache.search_index(again)
    assert [r.name for r in index.rules][:2] == ["merge-matmuls", "merge-matmuls~reverse"]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: next(iter(c)))
def test_a_raw_sql_update_of_a_rule_misses_the_cache(cache: Path, db_path: Path, change: dict[str, str]) -> None:
    """A verdict, its evidence or a condition changed behind the store's back is read as it now is."""
    db = store.open_store(db_path)
    assert len(rulecache.proved_rules(db)) == 3
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            f"UPDATE rules SET {', '.join(f'{c} = ?' for c in change)} WHERE name = 'merge-matmuls'", [*change.values()]
        )
    changed = store.open_store(db_path)
    assert _as_text(rulecache.proved_rules(changed)) == _as_text(list(store.load_rules(changed, status="proved")))


def test_an_index_of_some_rules_is_not_the_index_of_all(cache: Path, db_path: Path) -> None:
    db = store.open_store(db_path)
    rules = rulecache.proved_rules(db)
    every = rulecache.search_index(rules)
    some = rulecache.search_index(rules[1:])
    assert "merge-matmuls" in {r.name for r in every.rules}
    assert "merge-matmuls" not in {r.name for r in some.rules}
    assert {r.name for r in rulecache.search_index(rules[1:]).rules} == {r.name for r in some.rules}


def test_an_unwritable_cache_costs_the_parse_and_nothing_else(cache: Path, db_path: Path) -> None:
    cache.parent.mkdir()
    cache.write_text("a file where the folder should be")
    db = store.open_store(db_path)
    assert _as_text(rulecache.proved_rules(db)) == _as_text(list(store.load_rules(db, status="proved")))


def test_a_cache_file_cut_short_is_built_again(cache: Path, db_path: Path) -> None:
    db = store.open_store(db_path)
    rulecache.proved_rules(db)
    (written,) = cache.glob("rules-*.json")
    written.write_bytes(written.read_bytes()[:100])  # a disk that filled up, a copy that was cut
    assert _as_text(rulecache.proved_rules(db)) == _as_text(list(store.load_rules(db, status="proved")))
    assert written.stat().st_size > 100


def _small_store(folder: Path, name: str) -> sqlite_utils.Database:
    """A store of one rule named ``name``: rows of its own, so a cached form of its own."""
    path = folder / f"{name}.db"
    store.add_rules(store.create(path), [replace(MERGE_MATMULS, name=name)])
    return store.open_store(path)


def test_a_test_suite_of_small_stores_does_not_push_out_the_store_in_use(cache: Path, db_path: Path) -> None:
    rulecache.proved_rules(store.open_store(db_path))
    (in_use,) = cache.glob("rules-*.json")
    for i in range(40):
        rulecache.proved_rules(_small_store(db_path.parent, f"small{i}"))
    assert in_use.exists() and len(list(cache.glob("rules-*.json"))) == 41


def test_past_the_size_cap_the_form_used_least_recently_goes(
    cache: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = (_small_store(db_path.parent, name) for name in "abc")
    rulecache.proved_rules(a)
    (first,) = cache.glob("rules-*.json")
    monkeypatch.setattr(rulecache, "MAX_BYTES", int(2.5 * first.stat().st_size))
    rulecache.proved_rules(b)
    (second,) = set(cache.glob("rules-*.json")) - {first}
    for age, form in ((20, first), (10, second)):  # a minute's history, apart beyond the clock's granularity
        os.utime(form, (time.time() - age, time.time() - age))
    rulecache.proved_rules(a)  # read: now the most recently used
    rulecache.proved_rules(c)
    assert first.exists() and not second.exists()


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `rulecache.ship` writes and a run looks for the shipped form: a file of the test's own."""
    path = tmp_path / "package" / "rulecache.json"
    path.parent.mkdir()
    monkeypatch.setattr(rulecache, "SHIPPED", path)
    return path


def _built(rules: list) -> RuleIndex:
    """The search's index as `taso.search` makes it from parsed rules: what a read form must give."""
    index = RuleIndex(both_directions(r for r in rules if not r.always))
    index.shrinking  # noqa: B018
    return index


def _index_order(index: RuleIndex) -> list[tuple]:
    return [(r.id, str(r.src), str(r.dst)) for r in index.rules]


def test_the_shipped_form_is_read_as_built_and_nothing_is_written(cache: Path, shipped: Path, db_path: Path) -> None:
    """A cold run with a current shipped form gets the same rules and index, in the same order, as one that parses
    the store, and writes no form of its own."""
    db = store.open_store(db_path)
    rulecache.ship(db)
    assert shipped.stat().st_mode & 0o777 == 0o644  # package data: every user reads it
    rules = rulecache.proved_rules(db)
    index = rulecache.search_index(rules)
    assert not cache.exists() or not list(cache.glob("*.pickle"))
    parsed = list(store.load_rules(db, status="proved"))
    assert _as_text(rules) == _as_text(parsed)
    built = _built(parsed)
    assert _index_order(index) == _index_order(built)
    assert _index_order(index.shrinking) == _index_order(built.shrinking)


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: next(iter(c)))
def test_a_shipped_form_of_a_changed_store_is_passed_by(
    cache: Path, shipped: Path, db_path: Path, change: dict[str, str]
) -> None:
    """A store changed since the form was shipped (any column of a proved rule) is read as it now is."""
    rulecache.ship(store.open_store(db_path))
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            f"UPDATE rules SET {', '.join(f'{c} = ?' for c in change)} WHERE name = 'merge-matmuls'", [*change.values()]
        )
    changed = store.open_store(db_path)
    assert _as_text(rulecache.proved_rules(changed)) == _as_text(list(store.load_rules(changed, status="proved")))


def test_a_shipped_form_of_other_code_is_passed_by(
    cache: Path, shipped: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Code that shapes the form changed since it was shipped (here: one module less read into the key): the rules
    are built anew, and cached per user, as with no shipped form at all."""
    db = store.open_store(db_path)
    rulecache.ship(db)
    monkeypatch.setattr(rulecache, "CODE", rulecache.CODE[:-1])
    assert _as_text(rulecache.proved_rules(db)) == _as_text(list(store.load_rules(db, status="proved")))
    assert len(list(cache.glob("rules-*.json"))) == 1


def test_a_shipped_form_that_cannot_be_read_is_passed_by(cache: Path, shipped: Path, db_path: Path) -> None:
    db = store.open_store(db_path)
    rulecache.ship(db)
    shipped.write_bytes(shipped.read_bytes()[:100])  # a current key, then a pickle cut short
    assert _as_text(rulecache.proved_rules(db)) == _as_text(list(store.load_rules(db, status="proved")))


def test_the_shipped_form_is_current() -> None:
    """The package's form was made from the shipped store by this code: else every cold run builds its own."""
    with rulecache.SHIPPED.open("rb") as f:
        key = f.readline().decode().strip()
    assert key == rulecache.rows_digest(store.open_store(store.DEFAULT_PATH)), "stale: run `make rulecache`"


@pytest.mark.slow
def test_the_shipped_form_holds_what_the_shipped_store_parses_to(cache: Path) -> None:
    """The same rules, the same search index: every variant in the same order, indexed under the same keys."""
    db = store.open_store(store.DEFAULT_PATH)
    rules = rulecache.proved_rules(db)
    index = rulecache.search_index(rules)
    assert not cache.exists() or not list(cache.glob("*.pickle"))  # the shipped form was read
    parsed = list(store.load_rules(db, status="proved"))
    assert _as_text(rules) == _as_text(parsed)
    built = _built(parsed)
    for a, b in ((index, built), (index.shrinking, built.shrinking)):
        assert _index_order(a) == _index_order(b)
        assert list(a.groups.items()) == list(b.groups.items())
        assert [(k, [(r.id, p, plan) for r, p, plan in v]) for k, v in a.anchors.items()] == [
            (k, [(r.id, p, plan) for r, p, plan in v]) for k, v in b.anchors.items()
        ]
        assert a.free_sets == b.free_sets


def test_the_key_is_the_same_under_another_python_version(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The form is plain data, restored alike by 3.11 and 3.12: the shipped form serves both (the GPU machine's
    3.12 built its own at every cold start)."""
    db = store.open_store(db_path)
    key = rulecache.rows_digest(db)
    monkeypatch.setattr(sys, "version_info", (3, 12, 1, "final", 0))
    monkeypatch.setattr(sys, "version", "3.12.1 (main) [GCC 13.2.0]")
    assert rulecache.rows_digest(db) == key


def _pickle_calling(command: str) -> bytes:
    """A pickle that runs ``command`` when loaded, through a module an allow-list of taso's modules admits: the
    dotted name reaches `os.system` through this module's own import of os (protocol 4 and on resolve it)."""
    text = [b"\x80\x05", _short(b"taso.search.rulecache"), _short(b"os.system"), b"\x93", _short(command.encode())]
    return b"".join([*text, b"\x85R."])


def _short(s: bytes) -> bytes:
    return b"\x8c" + bytes([len(s)]) + s


def test_a_planted_pickle_in_the_cache_runs_nothing_and_the_rules_are_built_anew(
    cache: Path, db_path: Path, tmp_path: Path
) -> None:
    """A pickle planted where a form is read (under either name) is never loaded: the command it would run does
    not run, the rules are parsed, and the pickle is cleared away."""
    db = store.open_store(db_path)
    key = rulecache.rows_digest(db)
    ran = tmp_path / "ran"
    planted = _pickle_calling(f"touch {ran}")
    cache.mkdir(parents=True, mode=0o700)
    (cache / f"rules-{key[:32]}.pickle").write_bytes(planted)
    (cache / f"rules-{key[:32]}.json").write_bytes(f"{key}\n".encode() + planted)
    assert _as_text(rulecache.proved_rules(db)) == _as_text(list(store.load_rules(db, status="proved")))
    assert not ran.exists()
    assert sorted(p.name for p in cache.iterdir()) == [f"rules-{key[:32]}.json"]


def test_a_rule_planted_in_the_cache_is_not_read(cache: Path, db_path: Path) -> None:
    """A form in the user's cache with one rule more than the store, or one whose graphs are not what its row's id
    says, is not read: the store is parsed, and the form written again."""
    db = store.open_store(db_path)
    rules = rulecache.proved_rules(db)
    (form,) = cache.glob("rules-*.json")
    key, body = form.read_bytes().split(b"\n", 1)
    original = json.loads(body)
    first = original["rules"][0]
    swapped = [first[1], first[0], *first[2:]]  # the same row, id and proof; the sides exchanged
    for planted in (
        {**original, "rules": [*original["rules"], first]},
        {**original, "rules": [swapped, *original["rules"][1:]]},
    ):
        form.write_bytes(key + b"\n" + json.dumps(planted).encode())
        assert _as_text(rulecache.proved_rules(db)) == _as_text(rules)
        assert json.loads(form.read_bytes().split(b"\n", 1)[1]) == original


def _anchors(index: RuleIndex) -> dict:
    return {k: [(r.id, str(r.src), p, plan) for r, p, plan in v] for k, v in index.anchors.items()}


def _ship_with(shipped: Path, rules: list, index: Callable[[dict], dict] = lambda parts: parts) -> None:
    """Write ``rules`` as the shipped form, their lifts made and the index of them all, edited by ``index``."""
    lifts = {id(r): rulecache._lifts(r) for r in rules if not r.always}
    variants = rulecache._variants(rules, lifts)
    parts = index(ruleform.index_parts(variants, RuleIndex(variants)))
    key = shipped.read_bytes().split(b"\n", 1)[0]
    shipped.write_bytes(key + b"\n" + ruleform.encode(rules, lifts, parts).encode())


def test_the_index_holds_exactly_the_rules_given_and_their_lifts(cache: Path, shipped: Path, db_path: Path) -> None:
    """A form's rule that provenance did not pass, its lifts and its entries in the shipped index never reach the
    search's index: the shipped index is kept to the rules given, and is what indexing them would make."""
    db = store.open_store(db_path)
    rulecache.ship(db)
    parsed = list(store.load_rules(db, status="proved"))
    _ship_with(shipped, [*parsed, replace(RELU_OF_SPLIT, name="planted", status="proved")])
    rules = rulecache.proved_rules(db)
    assert [r.name for r in rules][-1] == "planted"  # read: the shipped form is trusted as the package is
    for some in (rules[:3], rules[1:3]):
        index, built = rulecache.search_index(some), _built(list(some))
        assert _index_order(index) == _index_order(built) and _anchors(index) == _anchors(built)
        assert _index_order(index.shrinking) == _index_order(built.shrinking)
        assert {k: [index.rules[i].id for i in v] for k, v in index.groups.items()} == {
            k: [built.rules[i].id for i in v] for k, v in built.groups.items()
        }


def test_the_shipped_index_is_used_where_it_checks_and_built_where_not(
    cache: Path, shipped: Path, db_path: Path
) -> None:
    """Where the shipped index is used, what it says is what the search gets (here anchors emptied on purpose);
    one whose matching order leaves out a node of its rule (a match of part of a rule) is not used at all."""
    db = store.open_store(db_path)
    rulecache.ship(db)
    parsed = list(store.load_rules(db, status="proved"))
    _ship_with(shipped, parsed, lambda parts: {**parts, "anchors": []})
    assert rulecache.search_index(rulecache.proved_rules(db)).anchors == {}

    def cut(parts: dict) -> dict:
        free, op, attrs, inputs, [[p, node, plan], *rest] = parts["anchors"][0]
        return {**parts, "anchors": [[free, op, attrs, inputs, [[p, node, plan[:1]], *rest]], *parts["anchors"][1:]]}

    _ship_with(shipped, parsed, cut)
    assert _anchors(rulecache.search_index(rulecache.proved_rules(db))) == _anchors(_built(parsed))


def test_a_lift_planted_in_the_users_cache_never_reaches_the_search(cache: Path, db_path: Path) -> None:
    """A user's cached form gives rules alone: a lift filed there under a rule of the store (here the rule read
    backwards, which its proof does not say) is not taken, and the rules' lifts are made anew."""
    db = store.open_store(db_path)
    rules = rulecache.proved_rules(db)
    (form,) = cache.glob("rules-*.json")
    key = form.read_bytes().split(b"\n", 1)[0]
    backwards = {id(rules[0]): [replace(rules[0], src=rules[0].dst, dst=rules[0].src)]}
    form.write_bytes(key + b"\n" + ruleform.encode(rules, backwards).encode())
    again = rulecache.proved_rules(db)
    assert _index_order(rulecache.search_index(again)) == _index_order(_built(again))


def test_a_shipped_form_leaves_out_a_variant_no_rewrite_can_build(cache: Path, shipped: Path, tmp_path: Path) -> None:
    """GELU spelled out, read backwards, needs constants of its own that no rewrite can make (`buildable`): the
    index read from a shipped form leaves it out, as a built one does (tests/rules/test_match.py)."""
    proved = store.load_rules(store.open_store(ROOT / "substitutions.db"), status="proved")
    gelu = next(r for r in proved if r.name == "gelu spelled out")
    path = tmp_path / "store" / "rules.db"
    path.parent.mkdir()
    store.add_rules(store.create(path), [gelu])
    db = store.open_store(path)
    rulecache.ship(db)
    index = rulecache.search_index(rulecache.proved_rules(db))
    assert index.rules and {r.id for r in index.rules} == {gelu.id}
