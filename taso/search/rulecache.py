"""The store's proved rules, and the search's index of them, in a form that costs nothing to read.

Parsing the ~4,200 proved rules from their text took 60 % of a small `optimize` run (1.7 s of 2.9 s for a
2-node model on the 2-core machine), and preparing them for the search (both directions, lifted, indexed) most
of the rest. Both are pickled, once, into the user's cache folder (``$XDG_CACHE_HOME/subst``, else
``~/.cache/subst``; never beside the store, which may be read-only or shared, nor in the package). A cached form
is keyed by a digest of the store's proved rule rows, every column (status, detail and conditions included:
a verdict changed by any means, a raw SQL update too, misses the cache), and of the code that reads and
prepares them. A cache that cannot be read or written is passed by: the rules are parsed as before.

A cold start still parsed and indexed them (15 s on the loaded 2-core machine, nearly all of a cold run's
start-up), so the shipped store's form ships too (`SHIPPED`, package data like the store): written by
`make rulecache` (and `make store`) alone, never at run time, it is read where its key is the one the user
cache would file it under, and is otherwise passed by as if absent (bench/bench_rulecache.py: 1.25 s against
14.85 s built). Parsing and indexing made cheap instead would have had to get ~12x faster, where parsing is a
third of the build and each other part (lifting, indexing, pickling) a sixth to a quarter; the shipped form
costs a developer command after a change to the store or to the code in `CODE`, and a test says when.

The form is plain data: the classes of the modules in `CODE` (whose code the key covers), numpy arrays and
Python's own containers; the unpickler admits no other class (`_Unpickler`), so nothing in it depends on the
Python that pickled it beyond the pickle protocol, and one shipped form serves 3.11 and 3.12 alike (the GPU
machine's 3.12 built its own in 7-11 s of every cold start while the key named the minor version).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import sqlite_utils

from taso.cachedir import cache_dir
from taso.ir import Graph, Node, TensorType
from taso.rules import Rule, RuleIndex, store
from taso.search.backtrack import both_directions

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
    "rules/rule.py",
    "rules/match.py",
    "search/backtrack.py",
    "rules/store.py",
    "search/rulecache.py",
)
"""The modules (under taso/) whose code shapes a cached form: a change to any of them misses the cache."""
MAX_BYTES = 256 * 2**20
"""The cache's size at most: past it, the forms used least recently are removed. One store's rules take ~9 MB,
a test's small store's a few KB, so a test suite's hundreds of stores never push out the store in use (a
count of files kept did)."""
MAX_AGE_S = 30 * 86400
"""Forms not used for this long are removed."""

PROTOCOL = 5
"""The pickle protocol forms are written in, named in their key: every Python from 3.8 reads it."""
_NUMPY = frozenset({("numpy", "dtype"), ("numpy._core.numeric", "_frombuffer")})
"""What numpy 2 pickles an array (a weight of a rule's graph) as."""

SHIPPED = Path(__file__).with_name("rulecache.pickle")
"""The shipped store's rules and index (`ship`): a line with its full key, then the pickle, which is read only
when the key is the store's (`rows_digest`); a stale or missing one is passed by."""

T = TypeVar("T")

_loaded: tuple[list[Rule], RuleIndex] | None = None
"""The rules `proved_rules` read last, and the index of them all that was cached with them."""


def proved_rules(db: sqlite_utils.Database) -> list[Rule]:
    """The store's proved rules in id order, with status and detail, as `store.load_rules` gives them. They
    are cached with the index of them all (`search_index`), in one file: the graphs they share are read once;
    the shipped form of them is read where it is the one the cache would hold."""
    global _loaded

    def build() -> tuple[list[Rule], RuleIndex]:
        rules = list(store.load_rules(db, status="proved"))
        return rules, _index(rules)

    key = rows_digest(db)
    _loaded = _from_shipped(key) or _cached("rules", key, build)
    return list(_loaded[0])


def search_index(db: sqlite_utils.Database, rules: Sequence[Rule]) -> RuleIndex:
    """The index the search matches with: ``rules`` (proved rules of ``db``) but the ``always`` ones, in both
    directions and lifted (`both_directions`), the shrinking ones indexed too. The one cached with the rules
    when ``rules`` are all that `proved_rules` gave, else one cached under the rules chosen."""
    if _loaded is not None and len(rules) == len(_loaded[0]) and all(a is b for a, b in zip(rules, _loaded[0])):
        return _loaded[1]
    chosen = ",".join(str(r.row) for r in rules)
    return _cached("index", hashlib.sha256(f"{rows_digest(db)}:{chosen}".encode()).hexdigest(), lambda: _index(rules))


def _index(rules: Sequence[Rule]) -> RuleIndex:
    index = RuleIndex(both_directions(r for r in rules if not r.always))
    index.shrinking  # noqa: B018 (made now, so that it is cached too)
    return index


def ship(db: sqlite_utils.Database) -> None:
    """Write ``db``'s proved rules and their index, parsed anew, as `SHIPPED` (through a temp file and a
    rename): for `make rulecache` only, since a run never writes into the package."""
    rules = list(store.load_rules(db, status="proved"))
    fd, tmp = tempfile.mkstemp(dir=SHIPPED.parent, prefix=".tmp-", suffix=".pickle")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(f"{rows_digest(db)}\n".encode())
            _Pickler(f, protocol=PROTOCOL).dump((rules, _index(rules)))
        os.chmod(tmp, 0o644)  # package data: read by every user (mkstemp makes it the writer's alone)
        os.replace(tmp, SHIPPED)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _from_shipped(key: str) -> tuple[list[Rule], RuleIndex] | None:
    """The shipped form (`SHIPPED`) when it was made for ``key``, else None: it is never unpickled otherwise."""
    try:
        with SHIPPED.open("rb") as f:
            return _load(f) if f.readline() == f"{key}\n".encode() else None
    except OSError:
        return None


def rows_digest(db: sqlite_utils.Database) -> str:
    """A digest of every column of the store's proved rule rows, of the code that reads them, and of how they are
    pickled: the Python implementation and the protocol, not its version (the form is plain data, which every
    version restores alike: `_Unpickler`)."""
    h = hashlib.sha256(f"{sys.implementation.name} pickle {PROTOCOL}".encode())
    here = Path(__file__).resolve().parent.parent
    for name in CODE:
        h.update((here / name).read_bytes())
    for row in db.conn.execute("SELECT * FROM rules WHERE status = 'proved' ORDER BY id"):
        h.update(repr(row).encode())
    return h.hexdigest()


def _cached(kind: str, key: str, build: Callable[[], T]) -> T:
    """``build()``'s value, read from the cache file for ``key`` when there is one, else built and written.
    The collector is off while reading, and what was read is then frozen out of its sight (`gc.freeze`): the
    ~300,000 objects set it off again and again while being read (a third of the time), and every full
    collection later in the run scanned them all (a 2-node model's start-up and check took twice as long on
    the loaded 2-core machine). Rules hold no reference cycles, so frozen ones are still freed when dropped."""
    path = cache_dir() / f"{kind}-{key[:32]}.pickle"
    try:
        with path.open("rb") as f:
            value = _load(f)
    except OSError:
        value = None  # none yet: built below
    if value is not None:
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to go
        return value
    value = build()
    try:
        _write(path, value)
    except OSError:
        pass  # an unwritable cache costs the parse, nothing else
    gc.freeze()
    return value


def _load(f: BinaryIO) -> Any:
    """What ``f`` holds from here on, unpickled with the collector off and then frozen (`_cached` says why);
    None where it cannot be read."""
    gc.disable()
    try:
        value = _Unpickler(f).load()
        gc.freeze()  # before the collector is on again: its first collection would scan all that was read
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        value = None  # unreadable: built again, with the collector on
    finally:
        gc.enable()
    return value


def _write(path: Path, value: object) -> None:
    """Write through a temp file and a rename, so a reader never sees half a file; then remove the forms used
    least recently past `MAX_BYTES`, and those unused for `MAX_AGE_S`."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # what is read back is unpickled: the user's alone
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pickle")
    try:
        with os.fdopen(fd, "wb") as f:
            _Pickler(f, protocol=PROTOCOL).dump(value)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    kept, now = 0, time.time()
    for name in sorted(os.listdir(path.parent), key=lambda n: -_used(path.parent / n)):
        if name.startswith(".") or not name.endswith(".pickle"):
            continue  # another process's file being written, or not ours
        old = path.parent / name
        with contextlib.suppress(OSError):
            kept += old.stat().st_size
            if kept > MAX_BYTES or now - _used(old) > MAX_AGE_S:
                old.unlink()


def _used(path: Path) -> float:
    """When a cached form was last written or read (0 if it is gone)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class _Pickler(pickle.Pickler):
    """Pickles a `Graph`, a `Node` and a `TensorType` as a call of their constructor: a graph's mappings are
    read-only views (which pickle refuses) and what it caches (digests, producers) is recomputed when asked;
    nodes and types restored field by field (dataclass ``__setstate__``) took two thirds of the load."""

    def reducer_override(self, obj: object) -> object:
        if type(obj) is Graph:
            g: Graph = obj  # type: ignore[assignment]
            return Graph, (g.nodes, g.inputs, g.outputs, dict(g.types), g.weights, dict(g.data), g.meta)
        if type(obj) is Node:
            n: Node = obj  # type: ignore[assignment]
            return Node, (n.op, n.inputs, n.outputs, n.attrs, n.name, n.domain, n.doc, n.opaque, n.implicit)
        if type(obj) is TensorType:
            t: TensorType = obj  # type: ignore[assignment]
            return TensorType, (t.dtype, t.shape)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    """Restores the classes of the modules whose code the key covers (`CODE`) and numpy's arrays, and refuses
    any other (`pickle.UnpicklingError`: the form is built again): what it restores is then the same under every
    Python that reads the protocol, and a form cannot name code outside what the key vouches for."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: ANN401 (a class of one of those modules)
        if module in _MODULES or (module, name) in _NUMPY:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not in a rule form")


_MODULES = frozenset("taso." + name.removesuffix(".py").replace("/", ".") for name in CODE)
