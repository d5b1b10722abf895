"""A run's rules into a store, atomically, with the provenance that regenerates them. Every generation path
(exhaustive, a pool, a target) stores through `save_rules`, so this is where a candidate is tried at grown
sizes (`taso.generate.resize`) and dropped when it holds only at its example's."""

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
    """Add the result's rules to the store at ``path``."""
    return save_rules(result.rules, provenance(result.settings), path)


def save_rules(rules: list[tuple[str, Rule]], prov: dict, path: str | Path) -> Saved:
    """Add (fingerprint, rule) pairs that hold at grown sizes too to the store at ``path`` with provenance
    ``prov``. Written to a temporary copy renamed into place, so an interrupted run leaves the store as it was.
    Rules already in the store (same source and target text) keep their verdicts."""
    verdicts = [resize.check(rule) for _, rule in rules]
    rules = [r for r, v in zip(rules, verdicts) if v is not resize.Verdict.DIFFERS]
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
        return Saved(added, kept, verdicts.count(resize.Verdict.DIFFERS), verdicts.count(resize.Verdict.FIXED))
    finally:
        tmp.unlink(missing_ok=True)
