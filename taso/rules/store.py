"""The substitution store: one SQLite file (via sqlite-utils) holding rules and their verdicts.

The schema carries a version in ``meta``; opening a store of another version is refused with a clear message
rather than read wrongly, except a version-1 store: opened writable it is brought to version 2 in place (its
rules' ids added, `migrate`), opened read-only a copy in memory is, so an older subst's store still serves. The shipped store is opened read-only, whoever asks: nothing writes into the package,
not even by mistake. Measured costs are not kept in a store but in the user's cache (`taso.cachedir`).

A rule's id is a digest of what it says (`taso.rules.rule_id`), and what a report and a proof's binding name it
by (`taso.rules.provenance.bound`), so a store whose row names another id than its content's, or two rows one
id, is refused, not read: `open_store` refuses a shared id, `load_rules` and `find_rule` recompute each id they
read. An edited rule, or a false one written under a true one's id, is then never applied nor shown as that
rule.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import sqlite_utils

from taso.errors import BadInput
from taso.rules.rule import REVERSE, Rule, rule_id
from taso.shipped import shipped

SCHEMA_VERSION = 2
"""1: no rule ids; 2: ``rule_id``, the content-derived id (`taso.rules.rule_id`) of each rule."""
DEFAULT_PATH = shipped("substitutions.db")
"""The shipped store: what `subst optimize` and `subst rules list` read by default; read-only."""

RULE_COLUMNS = {
    "id": int,
    "rule_id": str,  # taso.rules.rule_id: what reports and `subst rules show` name the rule by
    "name": str,
    "src": str,  # source graph, text form (taso.ir.format_graph); outputs correspond to dst's by position
    "dst": str,  # target graph, text form
    "conditions": str,  # JSON: shape / attribute side conditions
    "fingerprint": str,
    "src_ops": int,
    "dst_ops": int,
    "ops": str,  # space-separated op names used on either side, for filtering
    "provenance": str,  # JSON: generator settings, seed, version
    "status": str,  # candidate | proved | refuted | unknown
    "detail": str,  # JSON: axioms used, counterexample or reason
}


def create(path: str | Path) -> sqlite_utils.Database:
    """A new empty store at ``path`` with the current schema."""
    db = sqlite_utils.Database(str(path))
    _ensure_schema(db)
    return db


def _ensure_schema(db: sqlite_utils.Database) -> None:
    db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db["rules"].create(RULE_COLUMNS, pk="id", if_not_exists=True, not_null={"src", "dst", "status"})
    db["rules"].create_index(["rule_id"], if_not_exists=True)
    db["rules"].create_index(["status"], if_not_exists=True)
    db["rules"].create_index(["fingerprint"], if_not_exists=True)
    db["rules"].create_index(["src_ops"], if_not_exists=True)
    db["meta"].upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")


def is_shipped(path: str | Path) -> bool:
    """Whether ``path`` is the shipped store (through any link or relative path)."""
    return Path(path).resolve() == DEFAULT_PATH.resolve()


def open_store(path: str | Path, create_missing: bool = False, read_only: bool = False) -> sqlite_utils.Database:
    """Open an existing store, checking that it is one and that its schema version is ours. ``read_only`` (and
    the shipped store, always) opens it with SQLite's ``mode=ro``: a write raises instead of changing it."""
    p = Path(path)
    if not p.exists():
        if create_missing:
            try:
                return create(p)
            except sqlite3.OperationalError as e:  # a missing or read-only folder
                raise BadInput(f"{p}: cannot make a store there ({e})") from None
        raise BadInput(f"{p}: no such store (run `subst generate` to make one)")
    try:
        if read_only or is_shipped(p):
            db = sqlite_utils.Database(sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True))
        else:
            db = sqlite_utils.Database(str(p))
        version = db["meta"].get("schema_version")["value"] if "meta" in db.table_names() else None
    except (sqlite3.DatabaseError, sqlite_utils.db.NotFoundError) as e:
        raise BadInput(f"{p}: not a subst store ({e})") from None
    if version is None:
        raise BadInput(f"{p}: not a subst store (no schema version)")
    if not str(version).isdigit():
        raise BadInput(f"{p}: not a subst store (schema version {version!r} is not a number)")
    if int(version) == 1:
        if read_only or is_shipped(p) or unwritable(p):  # ids added to a copy in memory: the file stays as it is
            memory = sqlite3.connect(":memory:")
            db.conn.backup(memory)
            db.close()
            db = sqlite_utils.Database(memory)
        migrate(db)
    elif int(version) != SCHEMA_VERSION:
        raise BadInput(f"{p}: store schema version {version}, this subst reads version {SCHEMA_VERSION}")
    shared = db.execute(
        "SELECT rule_id, min(id), max(id) FROM rules WHERE rule_id IS NOT NULL GROUP BY rule_id HAVING count(*) > 1"
    ).fetchone()
    if shared is not None:
        db.close()
        raise BadInput(f"{p}: rows {shared[1]} and {shared[2]} both claim rule id {shared[0]}; the store is refused")
    return db


def migrate(db: sqlite_utils.Database) -> None:
    """A version-1 store brought to version 2 in one transaction: each rule's id derived from its row (the
    only change; verdicts, names and row ids stay as they were)."""
    with db.conn:
        if "rule_id" not in db["rules"].columns_dict:  # an earlier migration may have stopped after adding it
            db["rules"].add_column("rule_id", str)
        rows = list(db["rules"].rows_where(select="id, src, dst, conditions"))
        db.conn.executemany("UPDATE rules SET rule_id = ? WHERE id = ?", [(parsed(r).id, r["id"]) for r in rows])
        _ensure_schema(db)


def rule_of(row: dict) -> Rule:
    """The rule a store row holds, whose id must be its content's (`taso.rules.rule_id`): a row whose id is not
    (edited, or written under another rule's id) is refused in one line naming it, as is one that does not
    parse (`parsed`)."""
    rule = parsed(row)
    content = rule_id(rule)
    if row.get("rule_id") != content:
        raise BadInput(
            f"store row {row['id']}: rule id {row.get('rule_id')} is not its content's ({content}); the store is refused"
        )
    return rule


def parsed(row: dict) -> Rule:
    """The rule of a store row, as written: a row that does not parse (edited by hand, written by another tool)
    is refused in one line naming it, not a traceback from the parser."""
    try:
        return Rule.from_row(row)
    except (ValueError, KeyError) as e:  # IRError is a ValueError; a JSON column that does not parse too
        why = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise BadInput(f"store rule {row.get('id')} does not parse ({why}); fix or delete that row") from None


def meta(db: sqlite_utils.Database, key: str) -> str | None:
    """A value from the store's ``meta`` table (None when unset)."""
    rows = list(db["meta"].rows_where("key = ?", [key]))
    return rows[0]["value"] if rows else None


def set_meta(db: sqlite_utils.Database, key: str, value: str) -> None:
    with db.conn:
        db["meta"].upsert({"key": key, "value": value}, pk="key")


def proved_rule_count(db: sqlite_utils.Database) -> int:
    return db["rules"].count_where("status = ?", ["proved"])


def known(db: sqlite_utils.Database) -> set[tuple[str, str]]:
    """(source, target) text of every rule in the store: a rule found or written again is not added twice."""
    return {(r["src"], r["dst"]) for r in db["rules"].rows_where(select="src, dst")}


def add_rules(
    db: sqlite_utils.Database, rules: Iterable[Rule], fingerprint: str = "", provenance: dict | None = None
) -> int:
    """Append rules in one transaction (a crash leaves the store as it was); returns how many. A rule whose id
    the store (or an earlier rule of ``rules``) has already is the same rule written with other names: it is
    not added, since two rows of one id refuse the store (`open_store`)."""
    prov = json.dumps(provenance or {}, sort_keys=True)
    have = {row["rule_id"] for row in db["rules"].rows_where(select="rule_id")}
    rows = []
    for r in rules:
        if r.id not in have:
            have.add(r.id)
            rows.append({**r.to_row(), "fingerprint": fingerprint, "provenance": prov})
    with db.conn:
        db["rules"].insert_all(rows)
    return len(rows)


def load_rules(
    db: sqlite_utils.Database, status: str | None = None, op: str | None = None, max_ops: int | None = None
) -> Iterator[Rule]:
    """Rules in id order, filtered by status, by an op on either side, and by source size."""
    where, args = [], []
    if status:
        where.append("status = ?")
        args.append(status)
    if op:
        where.append("(' ' || ops || ' ') LIKE ?")
        args.append(f"% {op} %")
    if max_ops is not None:
        where.append("src_ops <= ?")
        args.append(max_ops)
    for row in db["rules"].rows_where(" AND ".join(where) or None, args, order_by="id"):
        yield rule_of(row)


def find_rule(db: sqlite_utils.Database, key: str) -> dict | None:
    """The row of the rule ``key`` names: its id (`taso.rules.rule_id`; ``ID~reverse``, as a report names a rule
    read backwards, is that rule), else its row number; None if there is none."""
    rows = list(db["rules"].rows_where("rule_id = ?", [key.removesuffix(REVERSE)]))
    if not rows and key.isdigit() and int(key) < 2**63:  # SQLite's integers
        rows = list(db["rules"].rows_where("id = ?", [int(key)]))
    if rows:
        rule_of(rows[0])  # what is shown is what would be applied
    return rows[0] if rows else None


def set_verdict(db: sqlite_utils.Database, rule_id: int, status: str, detail: dict) -> None:
    db["rules"].update(rule_id, {"status": status, "detail": json.dumps(detail, sort_keys=True, default=str)})


def set_verdicts(db: sqlite_utils.Database, verdicts: Iterable[tuple[int, str, dict]]) -> None:
    """`set_verdict` for many rows (row id, status, detail) in one statement: writing the shipped store's 5,627
    verdicts by `set_verdict` (a lookup and a savepoint each in sqlite-utils) took 5.5 s of CPU and 65 s of wall
    on the shared 2-core machine, in one statement 0.1 s and 0.6 s."""
    rows = [(status, json.dumps(detail, sort_keys=True, default=str), rule_id) for rule_id, status, detail in verdicts]
    db.conn.executemany("UPDATE rules SET status = ?, detail = ? WHERE id = ?", rows)


def unwritable(path: str | Path) -> str | None:
    """Why the store at ``path`` cannot be written, or None: SQLite opens a file it may not write read-only and
    says so only at the first write, and writes a journal beside the file, so its folder must take files too.
    Asked of the OS (`os.access`: modes, ACLs, read-only mounts), so nothing is written, not even a journal."""
    p = Path(path)
    if not os.access(p, os.W_OK):
        return "the file is read-only"
    if not os.access(p.parent, os.W_OK | os.X_OK):
        return f"its folder {p.parent} is read-only"
    return None


def require_writable(path: Path) -> None:
    """Refuse a store that cannot be written before hours of work, not at the first write: a read-only file
    or folder (a shared store, a mounted image), or the shipped store, which would be writable in a checkout or a
    user's venv. A missing store is made, so its folder must take files."""
    if path.is_dir():
        raise BadInput(f"{path}: is a folder, not a store")
    if is_shipped(path):
        raise BadInput(f"{path}: is the shipped store, which subst never writes; choose another with --store")
    if path.exists():
        open_store(path).close()  # a store at all, of our schema
        why = unwritable(path)
        if why:
            raise BadInput(f"{path}: store is read-only ({why}); copy it somewhere writable or choose another store")
    elif not path.parent.is_dir():
        raise BadInput(f"{path}: folder {path.parent} does not exist")
    else:
        try:
            with tempfile.TemporaryFile(dir=path.parent):
                pass
        except OSError as e:
            raise BadInput(f"{path}: cannot make a store in {path.parent} ({e.strerror})") from None
