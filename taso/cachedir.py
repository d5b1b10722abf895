"""The user's cache folder: what subst may write without being asked (never the store, never the package)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/subst``, else ``~/.cache/subst``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "subst"
