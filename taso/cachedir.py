"""The user's cache folder: what subst may write without being asked (never the store, never the package).

What is read back from it decides which rules the search tries, which proofs are trusted and whether the spec
check runs, so it must be the user's alone: every folder of it is made 0700 (`cache_folder`), and one that
exists is refused (`BadInput`, one line) where another user owns it or others may write it. Nothing in it is
code: every form is read by a parser that cannot run any (json, sqlite), and checked against what it vouches for.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path

import sqlite_utils

from taso.errors import BadInput

COSTS = "costs.db"
"""The cost cache's file in the cache folder."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/subst``, else ``~/.cache/subst``: the path alone (`cache_folder` makes and checks it)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "subst"


def cache_folder(*names: str) -> Path:
    """The cache folder, or its subfolder ``names``, each level made 0700 where it is missing and checked where
    it is not (`_check`). `OSError` where one cannot be made (a file in its place, a read-only disk): the
    caller passes the cache by; `BadInput` where one is not the user's alone."""
    folder = cache_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)  # $XDG_CACHE_HOME or ~/.cache: the user's, not ours to mode
    for name in ("", *names):
        folder = folder / name if name else folder
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        _check(folder)
    return folder


def _check(folder: Path) -> None:
    """Refuse ``folder`` unless it is a folder that this user owns and only its owner may write: another user
    could otherwise plant the rules, proof digests or spec-check record that a run reads back."""
    st = folder.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(20, "not a folder", str(folder))
    if st.st_uid != os.geteuid():
        raise BadInput(
            f"the cache folder {folder} belongs to another user (uid {st.st_uid}); remove it or set XDG_CACHE_HOME"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise BadInput(
            f"the cache folder {folder} may be written by others (mode {st.st_mode & 0o777:o}); "
            f"run `chmod go-w {folder}` or set XDG_CACHE_HOME"
        )


def cost_cache() -> tuple[sqlite_utils.Database, str | None]:
    """Where measured costs are kept (`taso.cost.CostModel`'s tables, filed by device identity and unit), and why
    they will not outlive the run (None: they will). One SQLite file per user, whatever the store: costs belong
    to this machine, and a store may be shipped, shared or read-only. Where the cache cannot be written, a copy
    in memory of what it holds, whose new costs are dropped at exit (the caller says so: a run that measures
    the same units every time should not be a surprise). A folder that is not the user's alone is refused
    (`cache_folder`), as for every other cache: planted costs would steer which rewrites the search keeps."""
    try:
        path = cache_folder() / COSTS
    except OSError as e:
        return sqlite_utils.Database(memory=True), f"cannot make the cache folder {cache_dir()} ({e.strerror})"
    writable = os.access(path.parent, os.W_OK | os.X_OK) and (not path.exists() or os.access(path, os.W_OK))
    try:
        db = sqlite_utils.Database(path) if writable else _in_memory(path)
        db.execute("SELECT count(*) FROM sqlite_master")  # a file that is no database fails here, not mid-run
    except sqlite3.DatabaseError as e:
        return sqlite_utils.Database(memory=True), f"the cost cache {path} cannot be read ({e}); delete it"
    return db, None if writable else f"the cost cache {path} is read-only"


def _in_memory(path: Path) -> sqlite_utils.Database:
    """A copy in memory of the cache at ``path`` (empty where there is none)."""
    memory = sqlite3.connect(":memory:")
    if path.exists():
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as cached:
            cached.backup(memory)
    return sqlite_utils.Database(memory)
