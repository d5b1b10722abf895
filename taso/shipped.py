"""Where the files subst ships with are: the operator specs (specs/) and the rule store (substitutions.db).

In a checkout they sit at the repository's root; a wheel carries them inside the package as ``taso/data/``
(pyproject.toml maps them there as package data), so one lookup serves both: the package's copy where it has
one, else the checkout's. Both are read-only to subst (`taso.store` opens the store with SQLite's ``mode=ro``):
what it writes goes to the user's cache folder (`taso.cachedir`) or where the user asks.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """``name`` (``specs`` or ``substitutions.db``) as installed with the package, else in the checkout."""
    installed = _PACKAGE / "data" / name
    return installed if installed.exists() else _PACKAGE.parent / name
