"""subst as installed from a wheel: its specs and shipped store found as package data, the shipped store
read-only, and nothing ever written into the package (costs go to the user's cache, new stores to the working
folder)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import onnx
import pytest
from conftest import ROOT, subst

from taso.errors import BadInput
from taso.rules import store

RULES = ROOT / "specs" / "rules" / "relu-concat.rules"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path, with a digest of its bytes."""
    return {str(p.relative_to(root)): _digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("shipped", [True, False], ids=["shipped", "read_only"])
def test_a_store_opened_read_only_cannot_be_written(tmp_path: Path, shipped: bool) -> None:
    """The shipped store is opened with SQLite's mode=ro whoever asks (in a checkout its file is writable), and
    so is any store opened ``read_only``, as optimize does: a write fails instead of changing the file."""
    if shipped:
        path, db = store.DEFAULT_PATH, store.open_store(store.DEFAULT_PATH)
    else:
        path = tmp_path / "s.db"
        store.create(path).close()
        db = store.open_store(path, read_only=True)
    before = _digest(path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.conn.execute("INSERT INTO meta (key, value) VALUES ('written', 'yes')")
    finally:
        db.conn.rollback()  # where the guard is gone, the row is never committed
        db.close()
    assert _digest(path) == before


def test_the_shipped_store_is_refused_as_a_target_in_one_line() -> None:
    """In a checkout ./substitutions.db is the shipped store: `subst rules add` run there without --store is
    refused up front, not half-way with a traceback from SQLite."""
    before = _digest(store.DEFAULT_PATH)
    with pytest.raises(BadInput, match="shipped store"):
        store.require_writable(Path(os.path.relpath(store.DEFAULT_PATH)))
    r = subst("rules", "add", RULES, cwd=store.DEFAULT_PATH.parent)
    assert r.returncode == 2 and r.stderr.startswith("subst: error:") and "shipped store" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and _digest(store.DEFAULT_PATH) == before


def test_generate_and_rules_add_write_the_working_folder_by_default(tmp_path: Path) -> None:
    before = _digest(store.DEFAULT_PATH)
    r = subst("rules", "add", RULES, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    added = json.loads(r.stdout)["added"]
    r = subst("generate", "--ops", "relu,transpose", "--max-ops", "2", "--workers", "1", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["store"] == "substitutions.db"
    db = store.open_store(tmp_path / "substitutions.db")
    assert db["rules"].count == added + json.loads(r.stdout)["added"] > added
    assert _digest(store.DEFAULT_PATH) == before


def _site_packages(venv: Path) -> Path:
    (path,) = venv.glob("lib/python*/site-packages")
    return path


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_optimizes_from_anywhere_and_writes_nothing_into_itself(
    tmp_path: Path,
) -> None:
    """`pip install .` as a user runs it: the wheel built from a copy of the sources (so the build writes
    nothing into the checkout), installed into a new venv whose dependencies are the project venv's (a .pth,
    so nothing is downloaded but the build's setuptools), then run from an empty folder with its own cache."""
    src, dist, venv, work, cache = (tmp_path / n for n in ("src", "dist", "venv", "work", "cache"))
    ignore = shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "tests", "bench", "corpus")
    shutil.copytree(ROOT, src, ignore=ignore)
    pip = [sys.executable, "-m", "pip"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "-q", "-w", dist, src], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("subst-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = _site_packages(venv).resolve()  # as taso resolves its own path
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "project-deps.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    installed = subprocess.run(
        [*pip, "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q", wheel],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(cache)

    def run(*args: object) -> subprocess.CompletedProcess:
        return subprocess.run([*map(str, args)], capture_output=True, text=True, cwd=work, env=env)

    where = run(  # one process for the package data's paths: each costs a second of imports
        venv / "bin" / "python",
        "-c",
        "import taso.rules.provenance as p, taso.rules.store as s, taso.cost.tables as t\n"
        "print(p.SPECS_DIR, s.DEFAULT_PATH, t.PRIORS[0])",
    )
    assert where.returncode == 0, where.stderr
    specs, shipped, prior = where.stdout.split()
    assert [specs, shipped] == [str(site / "taso" / "data" / "specs"), str(site / "taso" / "data" / "substitutions.db")]
    before = _tree(site)
    model = ROOT / "models" / "bert_tiny.onnx"
    r = run(
        venv / "bin" / "subst",
        "optimize",
        model,
        "-o",
        "bert.opt.onnx",
        "--device",
        "cpu",
        "--dim",
        "batch=1",
        "--dim",
        "seq=32",
        "--measure-limit",
        "20",  # 5 s went to calibration alone under a load of 12, leaving no unit measured to cache
        "--budget",
        "1",  # what is read and written is the point, not how far the search goes
        "--json",
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["check"]["ok"] and report["proved_rules"] > 4000
    assert report["search"]["untrusted_rules"] == {}  # the shipped proofs, pinned, trusted with no user's key
    assert (site / "taso" / "rules" / "shipped_proofs.json").is_file()
    onnx.checker.check_model(str(work / "bert.opt.onnx"), full_check=True)
    with sqlite3.connect(cache / "subst" / "costs.db") as costs:
        assert costs.execute("SELECT count(*) FROM costs").fetchone()[0] > 0  # measured, and cached per user
    assert (site / "taso" / "search" / "rulecache.json").is_file()
    assert Path(prior).is_relative_to(site.resolve()) and Path(prior).is_file(), prior  # the H100 prior ships
    assert not list((cache / "subst").glob("rules-*"))  # the shipped rules read, not parsed and cached anew
    assert (site / "taso" / "verify" / "basis.json").is_file()
    assert not (cache / "subst" / "specs-basis").exists()  # the shipped specs' digests read, not the specs loaded
    r = run(venv / "bin" / "subst", "rules", "add", RULES)
    assert r.returncode == 0 and (work / "substitutions.db").is_file(), r.stderr
    assert _tree(site) == before
