"""The store's proved rules and the search's index of them, in a form that costs little to read and runs nothing.

Parsing the ~4,200 proved rules from their text took 60 % of a small `optimize` run (1.7 s of 2.9 s for a
2-node model on the 2-core machine); lifting them (`taso.rules.lifted`) and indexing their ~14,500 variants
for the search took as long again. The rules are written, once, as JSON into the user's cache folder
(`taso.cachedir.cache_folder`: the user's alone; never beside the store, which may be read-only or shared,
nor in the package). A cached form is keyed by a digest of the store's proved rule rows, every column
(status, detail and conditions included: a verdict changed by any means, a raw SQL update too, misses the
cache), and of the code that reads and prepares them. A cache that cannot be read or written is passed by:
the rules are parsed as before. The shipped store's form ships too (`SHIPPED`, package data like the store),
with each rule's lifts and the index of them all: written by `make rulecache` (and `make store`) alone,
never at run time, it is read where its key is the one the user cache would file it under, and is otherwise
passed by as if absent; a test says when it is stale.

A form is data, never code: JSON read by `json`, weights by `numpy.frombuffer` (`ruleform`; an older subst
pickled it, and a planted pickle ran a command). Nor is what it holds taken as is. Its rules go through
provenance like parsed ones (`taso.optimize.rewrites.read_rules`), and the search's index holds exactly the
rules that passed (`search_index`): the shipped index is kept to their variants entry by entry, a lift is
used only with the rule it is filed under. A user's form, which anyone running as the user could have
written, must be the store's rules row for row (`_is_store`: each rule's id taken again from its graphs),
and gives the rules alone: their lifts and index are made anew, since only doing so would check them. The
package's form is trusted as its code is (whoever can write one can write the other).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import sqlite_utils

from taso import ops
from taso.cachedir import cache_folder
from taso.rules import Rule, RuleIndex, lifted, store
from taso.rules.rule import REVERSE, rule_id
from taso.search import ruleform
from taso.search.rewrite import buildable

CODE = (
    "ir/types.py",
    "ir/weights.py",
    "ir/graph.py",
    "ir/text.py",
    "ops/opdef.py",
    "ops/shapes.py",
    "ops/windows.py",
    "ops/elementwise.py",
    "ops/products.py",
    "ops/pooling.py",
    "ops/layout.py",
    "ops/normalisation.py",
    "ops/generators.py",
    "ops/reductions.py",
    "rules/rule.py",
    "rules/store.py",
    "search/rulecache.py",
    "search/ruleform.py",
)
"""The modules (under taso/) whose code shapes a cached form: a change to any of them misses the cache."""
FORMAT = "subst rule form 2 (json)"
"""Named in every key: a form of another layout is never read as this one."""
LIFT_EXTRA = (1, 2)
"""The leading dims a rule is lifted by: to ranks 3 and 4 of its 2-D activations (`both_directions`'s own)."""
MAX_BYTES = 256 * 2**20
"""The cache's size at most: past it, the forms used least recently are removed. One store's rules take ~2 MB,
a test's small store's a few KB, so a test suite's hundreds of stores never push out the store in use (a
count of files kept did)."""
MAX_AGE_S = 30 * 86400
"""Forms not used for this long are removed."""

SHIPPED = Path(__file__).with_name("rulecache.json")
"""The shipped store's form (`ship`): a line with its full key, then the JSON, which is read only when the key
is the store's (`rows_digest`); a stale or missing one is passed by."""


@dataclass(frozen=True)
class _Form:
    """What a form holds: the proved rules in id order, the lifts of each by the rule's ``id()``, and in the
    shipped form the index of all their variants (`ruleform.index_parts`), checked as it is used."""

    rules: list[Rule]
    lifts: ruleform.Lifts
    index: dict | None = None
    users: bool = False  # read from the user's cache, where `_is_store` ties each rule to its row by id alone


_loaded: _Form | None = None
"""The form `proved_rules` read or built last: its rules are kept alive, so their ``id()`` names them alone."""


def proved_rules(db: sqlite_utils.Database) -> list[Rule]:
    """The store's proved rules in id order, with status and detail, as `store.load_rules` gives them; with them,
    the lifts of each are kept for `search_index`. The shipped form is read where it is the one the cache would
    hold, then the user's cached form, else the store is parsed (and the form cached)."""
    global _loaded
    key = rows_digest(db)
    _loaded = _read(SHIPPED, key) or _cached(key, db)
    return list(_loaded.rules)


def as_stored() -> bool:
    """Whether the rules `proved_rules` gave last are the store's rows exactly: the package's form (its key is
    the rows' digest) or a parse, not a user's cached form, which `_is_store` matches to its rows by their 40-bit
    ids. Only then may provenance vouch for them by the rows' pin (`provenance.trusted`'s ``db``)."""
    return _loaded is not None and not _loaded.users


def search_index(rules: Sequence[Rule]) -> RuleIndex:
    """The index the search matches with, of exactly ``rules`` (those that passed provenance): but the
    ``always`` ones, each with its lifts and each read backwards where its proof covers that, as
    `taso.search.both_directions` makes them (but those it could never build), the shrinking ones indexed too.
    A rule `proved_rules` gave has its lifts from the form, any other is lifted here; the shipped form's index
    is kept to ``rules`` (`ruleform.restore`), else the index is built (~1 s of a cold start on the 2-core
    machine)."""
    if _loaded is not None and _loaded.index is not None:
        with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
            return _restored(_loaded, rules)
    index = RuleIndex([v for v in _variants(rules, _loaded.lifts if _loaded is not None else {}) if buildable(v)])
    index.shrinking  # noqa: B018 (made now, before the search's clock starts)
    return index


def usable_at(rules: Sequence[Rule], opset: int) -> list[Rule]:
    """``rules`` but those with an op ONNX lacks at ``opset`` (`OpDef.min_opset`: HardSwish 14, Gelu 20), in
    their order (`search_index` keeps the shipped index to them): read backwards such a rule would write that
    op into a model that cannot hold it, and forwards it cannot match there (import leaves the op opaque)."""
    return [r for r in rules if all(ops.get(op).min_opset <= opset for op in r.ops)]


def _restored(form: _Form, rules: Sequence[Rule]) -> RuleIndex:
    """``form``'s index kept to the variants of ``rules``, which must be some of its rules in its order
    (`KeyError`, `ValueError` else)."""
    at = {id(r): i for i, r in enumerate(form.rules)}
    chosen = [at[id(r)] for r in rules]
    if chosen != sorted(set(chosen)):
        raise ValueError("not the form's rules in its order")
    kept, variants, count = set(chosen), {}, 0
    for i, r in enumerate(form.rules):
        if r.always:
            continue
        lifts = form.lifts[id(r)]
        if i in kept:
            variants.update((i, v) for i, v in enumerate(_both_ways(r, lifts), start=count) if buildable(v))
        count += sum(1 + bool(v.dst.nodes and v.reversible) for v in (r, *lifts))
    return ruleform.restore(form.index, variants, count)


def _variants(rules: Iterable[Rule], lifts: ruleform.Lifts) -> list[Rule]:
    """``rules`` as `taso.search.both_directions` gives them, with the ``lifts`` given (made where not)."""
    return [v for r in rules if not r.always for v in _both_ways(r, lifts[id(r)] if id(r) in lifts else _lifts(r))]


def _both_ways(r: Rule, lifts: Sequence[Rule]) -> list[Rule]:
    """``r`` and its ``lifts``, each followed by itself read backwards where its proof covers that and the
    reverse has a source to match: `taso.search.both_directions`'s variants of one rule."""
    out = []
    for v in (r, *lifts):
        out.append(v)
        if v.dst.nodes and v.reversible:
            out.append(
                replace(v, src=v.dst, dst=v.src, name=f"{r.name}{REVERSE}" if r.name else "", id=f"{r.id}{REVERSE}")
            )
    return out


def _lifts(rule: Rule) -> list[Rule]:
    """``rule``'s lifts to more leading dims, where sound (`taso.rules.lifted`)."""
    return [v for k in LIFT_EXTRA if (v := lifted(rule, k)) is not None]


def _build(db: sqlite_utils.Database) -> _Form:
    """The store's proved rules parsed, and each one's lifts made."""
    rules = list(store.load_rules(db, status="proved"))
    return _Form(rules, {id(r): _lifts(r) for r in rules if not r.always})


def ship(db: sqlite_utils.Database) -> None:
    """Write ``db``'s proved rules, their lifts and the index of them all, made anew, as `SHIPPED` (through a temp file and a rename):
    for `make rulecache` only, since a run never writes into the package."""
    form = _build(db)
    variants = _variants(form.rules, form.lifts)
    index = ruleform.index_parts(variants, RuleIndex(variants))
    text = _encode(rows_digest(db), _Form(form.rules, form.lifts, index))
    fd, tmp = tempfile.mkstemp(dir=SHIPPED.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # package data: read by every user (mkstemp makes it the writer's alone)
        os.replace(tmp, SHIPPED)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def rows_digest(db: sqlite_utils.Database) -> str:
    """A digest of every column of the store's proved rule rows, of the code that reads them, and of the form's
    layout; not of the Python version (the form is JSON, which every version reads alike)."""
    h = hashlib.sha256(f"{sys.implementation.name} {FORMAT}".encode())
    here = Path(__file__).resolve().parent.parent
    for name in CODE:
        h.update((here / name).read_bytes())
    for row in db.conn.execute("SELECT * FROM rules WHERE status = 'proved' ORDER BY id"):
        h.update(repr(row).encode())
    return h.hexdigest()


def _cached(key: str, db: sqlite_utils.Database) -> _Form:
    """The form for ``key`` from the user's cache where it holds one that is the store's (`_is_store`), else
    built and written there. A user's form holds the rules alone: lifts, which only lifting them again could
    check, are made anew for the rules that pass provenance (`_variants`)."""
    try:
        path = cache_folder() / f"rules-{key[:32]}.json"
    except OSError:
        return _build(db)  # no cache folder: the parse, every time
    form = _read(path, key)
    if form is not None and _is_store(form.rules, db):
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to go
        return _Form(form.rules, {}, users=True)  # no lifts, no index: only lifting and indexing again checks them
    form = _build(db)
    with contextlib.suppress(OSError):  # an unwritable cache costs the parse, nothing else
        _write(path, _encode(key, _Form(form.rules, {})))
    return form


def _is_store(rules: Sequence[Rule], db: sqlite_utils.Database) -> bool:
    """Whether ``rules`` are the store's proved rules, row for row: each says what its row's id (`rule_id`, a
    digest of the rule's computation, taken again) says, with the row's name, conditions, status and detail. A
    user's cached form is read only so (a form in the package is trusted as its code is): it cannot bring a
    rule the store lacks, nor change what one of the store's says."""
    rows = db.conn.execute(
        "SELECT id, rule_id, name, conditions, status, detail FROM rules WHERE status = 'proved' ORDER BY id"
    ).fetchall()
    return len(rows) == len(rules) and all(
        (r.row, r.id, r.name, r.conditions, r.status, r.detail)
        == (row, rid, name or "", tuple(json.loads(conditions or "[]")), status, json.loads(detail or "{}"))
        and rule_id(r) == rid
        for r, (row, rid, name, conditions, status, detail) in zip(rules, rows)
    )


def _read(path: Path, key: str) -> _Form | None:
    """The form in ``path`` when it was made for ``key``, else None (missing, stale, cut short or malformed:
    built again). The collector is off while reading, and what was read is then frozen out of its sight
    (`gc.freeze`): the tens of thousands of objects set it off again and again while being read, and every
    full collection later in the run scanned them all. Rules hold no reference cycles, so frozen ones are
    still freed."""
    try:
        with path.open("rb") as f:
            if f.readline() != f"{key}\n".encode():
                return None
            text = f.read()
    except OSError:
        return None
    gc.disable()
    try:
        form = _Form(*ruleform.decode(text))
        gc.freeze()  # before the collector is on again: its first collection would scan all that was read
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        form = None  # malformed (json's and the constructors' own checks): built again
    finally:
        gc.enable()
    return form


def _encode(key: str, form: _Form) -> bytes:
    """The key's line, then the form (`ruleform.encode`)."""
    return f"{key}\n".encode() + ruleform.encode(form.rules, form.lifts, form.index).encode()


def _write(path: Path, text: bytes) -> None:
    """Write through a temp file and a rename, so a reader never sees half a file; then remove the forms used
    least recently past `MAX_BYTES`, and those unused for `MAX_AGE_S` (an older subst's pickles too: never read)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    kept, now = 0, time.time()
    for name in sorted(os.listdir(path.parent), key=lambda n: -_used(path.parent / n)):
        if not name.startswith(("rules-", "index-")) or not name.endswith((".json", ".pickle")):
            continue  # another process's file being written, or not ours
        old = path.parent / name
        with contextlib.suppress(OSError):
            kept += old.stat().st_size
            if kept > MAX_BYTES or now - _used(old) > MAX_AGE_S or name.endswith(".pickle"):
                old.unlink()


def _used(path: Path) -> float:
    """When a cached form was last written or read (0 if it is gone)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
