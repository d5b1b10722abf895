"""The user's cache folder: what subst may write without being asked (never the store, never the package)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import sqlite_utils

COSTS = "costs.db"
"""The cost cache's file in the cache folder."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/subst``, else ``~/.cache/subst``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "subst"


def cost_cache() -> tuple[sqlite_utils.Database, str | None]:
    """Where measured costs are kept (`taso.cost.CostModel`'s tables, filed by device identity and unit), and why
    they will not outlive the run (None: they will). One SQLite file per user, whatever the store: costs belong
    to this machine, and a store may be shipped, shared or read-only. Where the cache cannot be written, a copy
    in memory of what it holds, whose new costs are dropped at exit (the caller says so: a run that measures
    the same units every time should not be a surprise)."""
    path = cache_dir() / COSTS
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        return sqlite_utils.Database(memory=True), f"cannot make the cache folder {path.parent} ({e.strerror})"
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
