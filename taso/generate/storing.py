"""A run's rules into a store, atomically, with the provenance that regenerates them."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from pathlib import Path

from taso.generate.driver import Result
from taso.generate.forms import Settings
from taso.ir import format_graph
from taso.ops import P
from taso.rules import Rule, store


def version() -> str:
    """This subst's version, as a stored rule's provenance records it."""
    try:
        return importlib.metadata.version("subst")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def provenance(settings: Settings) -> dict:
    """What a stored rule came from: enough to generate it again."""
    return {"tool": "subst generate", "version": version(), "settings": settings.as_dict(), "field_prime": P}


def save(result: Result, path: str | Path) -> tuple[int, int]:
    """Add the result's rules to the store at ``path``: (added, already there)."""
    return save_rules(result.rules, provenance(result.settings), path)


def save_rules(rules: list[tuple[str, Rule]], prov: dict, path: str | Path) -> tuple[int, int]:
    """Add (fingerprint, rule) pairs to the store at ``path`` with provenance ``prov``: (added, already there).
    Written to a temporary copy renamed into place, so an interrupted run leaves the store as it was. Rules
    already in the store (same source and target text) keep their verdicts."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.exists():
            store.open_store(path).close()
            shutil.copyfile(path, tmp)
            db = store.open_store(tmp)
        else:
            db = store.create(tmp)
        db.execute("PRAGMA synchronous = OFF")  # a scratch copy: durability comes from the rename,
        db.execute("PRAGMA journal_mode = MEMORY")  # and a journal file per fingerprint's transaction is wasted
        have = store.known(db)
        groups: dict[str, list[Rule]] = {}
        kept = 0
        for fp, rule in rules:
            if have and (format_graph(rule.src), format_graph(rule.dst)) in have:
                kept += 1
                continue
            groups.setdefault(fp, []).append(rule)
        added = sum(store.add_rules(db, rules, fp, prov) for fp, rules in groups.items())
        db.close()
        os.replace(tmp, path)
        return added, kept
    finally:
        tmp.unlink(missing_ok=True)
