"""The user's cache folder is the user's alone, and each record in it is read only where it holds what it vouches
for: a folder others may write is refused, and an empty or planted spec-check record or proof basis switches no
check off."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import subst
from test_optimize import MERGE_MATMULS

from taso.cachedir import cache_folder, cost_cache
from taso.errors import BadInput, CheckFailed
from taso.generate import Settings
from taso.generate.spool import default_folder
from taso.rules import SPECS_DIR, parse_rules, store
from taso.search import rulecache
from taso.verify import basis, load_specs, run
from taso.verify.spec import Specs

NOBODY = 65534
CAT_COMMUTES = '        Axiom("cat-commutes", f.cat(x, y, axis=a), f.cat(y, x, axis=a), same, domains={"a": (0, 1)}),\n'
"""A false axiom: two tensors concatenated either way round are not equal."""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "subst"


def _specs(folder: Path, false: bool = False) -> Specs:
    """The concat spec alone (its check takes a fraction of a second), with a false axiom planted if ``false``."""
    folder.mkdir()
    text = (SPECS_DIR / "concat.py").read_text()
    (folder / "concat.py").write_text(
        text.replace("    return [\n", "    return [\n" + CAT_COMMUTES, 1) if false else text
    )
    return load_specs(folder)


def _store(path: Path) -> store.sqlite_utils.Database:
    store.add_rules(store.create(path), [MERGE_MATMULS])
    return store.open_store(path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_cache_folder_is_made_the_users_alone(cache: Path, tmp_path: Path) -> None:
    """The folder and each subfolder, whichever path makes it first: the spec check's record, the proof basis,
    the rule forms, the costs and generate's work folders."""
    specs = _specs(tmp_path / "specs")
    run.require_sound(specs)
    assert _mode(cache) == 0o700 and _mode(cache / "specs-checked") == 0o700
    basis.for_folder(specs.root)
    assert _mode(cache / "specs-basis") == 0o700
    cost_cache()
    rulecache.proved_rules(_store(tmp_path / "rules.db"))
    assert list(cache.glob("rules-*.json")) and (cache / "costs.db").exists() and _mode(cache) == 0o700
    assert default_folder(Settings()).parent == cache / "generate" and _mode(cache / "generate") == 0o700


@pytest.mark.parametrize(
    ("where", "how"),
    [("", "mode 777"), ("", "mode 770"), ("", "owned by nobody"), ("specs-checked", "mode 777")],
)
def test_a_cache_folder_not_the_users_alone_is_refused_in_one_line(
    cache: Path, tmp_path: Path, where: str, how: str
) -> None:
    """Another user could plant what a run reads back from it: every way in refuses it (`BadInput`), naming it."""
    folder = cache / where
    folder.mkdir(parents=True, mode=0o700)
    if how == "owned by nobody":
        if os.geteuid() != 0:
            pytest.skip("only root can give a folder to another user")
        os.chown(folder, NOBODY, NOBODY)
    else:
        folder.chmod(int(how.split()[1], 8))
    specs = _specs(tmp_path / "specs")
    refused = [lambda: run.require_sound(specs)]
    if not where:
        refused += [
            lambda: basis.for_folder(specs.root),
            cost_cache,
            lambda: rulecache.proved_rules(_store(tmp_path / "rules.db")),
        ]
    for call in refused:
        with pytest.raises(BadInput, match=f"the cache folder {folder}") as e:
            call()
        assert "\n" not in str(e.value)
    written = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))
    assert written == ([where] if where else [])  # nothing


def test_verify_with_a_cache_folder_others_may_write_exits_2_in_one_line(cache: Path, tmp_path: Path) -> None:
    """Refused before any verdict is written, in one line (and no progress shown before it)."""
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    _specs(tmp_path / "specs")
    db = tmp_path / "rules.db"
    store.add_rules(store.create(db), parse_rules((SPECS_DIR / "rules" / "batchnorm.rules").read_text())[:1])
    before = db.read_bytes()
    r = subst("verify", "--store", db, "--specs", tmp_path / "specs", "--workers", "1")
    (line,) = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert line.startswith("subst: error: the cache folder") and "may be written by others (mode 777)" in line
    assert db.read_bytes() == before


@pytest.mark.parametrize("planted", ["empty", "a word", "the record of other specs"])
def test_a_planted_spec_check_record_does_not_switch_the_check_off(cache: Path, tmp_path: Path, planted: str) -> None:
    """The record of a passed check is filed under what was checked and must say so: a file planted there in its
    place leaves the check on, and a false axiom is still caught."""
    false = _specs(tmp_path / "false", false=True)
    marker, _ = run._passed_marker(false)
    other = _specs(tmp_path / "true")
    run.require_sound(other)  # the control: true specs pass, and their record is written
    text = {"empty": "", "a word": "passed", "the record of other specs": run._passed_marker(other)[1]}[planted]
    marker.write_text(text)
    with pytest.raises(CheckFailed, match="cat-commutes"):
        run.require_sound(false)


def test_a_passed_check_is_remembered_by_what_it_checked(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record a pass writes is read back as one: the second check of the same specs is not run."""
    checked: list[int] = []
    real = run.check_specs
    monkeypatch.setattr(run, "check_specs", lambda s: checked.append(1) or real(s))
    specs = _specs(tmp_path / "specs")
    run.require_sound(specs)
    run.require_sound(specs)
    marker, record = run._passed_marker(specs)
    assert checked == [1] and json.loads(marker.read_text())["axioms"] == [a.name for a in specs.axioms]
    assert marker.read_text() == record


@pytest.mark.parametrize("planted", ["empty", "parts alone", "parts changed", "filed under another key"])
def test_a_planted_proof_basis_is_passed_by(cache: Path, tmp_path: Path, planted: str) -> None:
    """A cached basis decides which proofs are trusted: one that does not hold the key it is filed under, and the
    parts its digest covers, is passed by and the specs loaded again."""
    specs = _specs(tmp_path / "specs")
    true = basis.Basis.of(specs).parts
    key = basis.files_key(specs.root)
    path = cache_folder("specs-basis") / f"{key}.json"
    forged = {k: "0" * 16 for k in true}
    record = basis._record(key, true)
    text = {
        "empty": "",
        "parts alone": json.dumps(forged),
        "parts changed": json.dumps({**record, "parts": forged}),
        "filed under another key": json.dumps(basis._record("0" * 32, forged)),
    }[planted]
    path.write_text(text)
    assert basis.for_folder(specs.root).parts == true
    assert json.loads(path.read_text()) == record  # written again, as it should be
