"""A run's rules into a store, atomically, with the provenance that regenerates them. Every candidate stored is
tried at grown sizes (`taso.generate.resize`) and dropped when it holds only at its example's: an exhaustive or
pool run's by the run itself, before its fold (`Result.size_dependent`), a target run's here (`save_rules`)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from pathlib import Path
from typing import NamedTuple

from taso.generate import resize
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


class Saved(NamedTuple):
    """What storing a run's rules did with them."""

    added: int
    already: int
    """Already in the store (same source and target text): left with their verdicts."""
    size_dependent: int
    """Dropped: the sides differ at grown sizes (`resize.Verdict.DIFFERS`), so no proof can hold."""
    not_resized: int
    """Stored on the one check: their sizes cannot grow (`resize.Verdict.FIXED`)."""


def save(result: Result, path: str | Path) -> Saved:
    """Add the result's rules (screened at grown sizes by the run) to the store at ``path``."""
    added, already = _write(result.rules, provenance(result.settings), path)
    return Saved(added, already, result.size_dependent, result.not_resized)


def save_rules(rules: list[tuple[str, Rule]], prov: dict, path: str | Path) -> Saved:
    """Add (fingerprint, rule) pairs that hold at grown sizes too to the store at ``path`` with provenance
    ``prov``."""
    screened = resize.screen(rules)
    return Saved(*_write(screened.rules, prov, path), screened.size_dependent, sum(screened.fixed))


def _write(rules: list[tuple[str, Rule]], prov: dict, path: str | Path) -> tuple[int, int]:
    """Add ``rules`` to the store at ``path``: (added, already there). Written to a temporary copy renamed into
    place, so an interrupted run leaves the store as it was. Rules already in the store (same source and target
    text) keep their verdicts."""
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
