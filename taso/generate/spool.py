"""A generation's work folder: each level's graphs, classes and frontier on disk, so memory holds one bucket at a
time and an interrupted run resumes after its last completed level.

Layout: ``manifest.json`` (the settings and the last completed level with its counts, replaced atomically when a
level completes), ``lock`` (one run at a time), and per level ``L<n>/``: ``graphs-<b>.bin`` (the level's `GRAPH`
records hash-partitioned by fingerprint into `BUCKETS` files, deleted once filed), ``members.bin`` and
``classes.bin`` (`MEMBER` and `CLASS` records in bucket order, with ``*.idx.npy`` bucket offsets) and
``frontier.npy`` (the rows the next level extends). A level's files count only once the manifest names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from taso.cachedir import cache_dir, cache_folder
from taso.errors import BadInput
from taso.generate.columns import CLASS, GRAPH, MEMBER
from taso.generate.forms import ROW, Settings

BUCKETS = 256
"""Fingerprint buckets per level (by the top 8 bits): a 4-op level of 50 M graphs is 200 k graphs a bucket."""
FLUSH_BYTES = 32 << 20
"""Graphs buffered in memory before they are appended to their buckets' files."""


def bucket_of(fp: np.ndarray) -> np.ndarray:
    return (fp >> np.uint64(56)).astype(np.intp)


def default_folder(settings: Settings) -> Path:
    """The per-user work folder of these settings: a rerun with ``--resume`` finds it again. It is in the cache
    folder, made the user's alone (`cache_folder`: a resumed run reads back what it holds)."""
    text = json.dumps(settings.as_dict(), sort_keys=True)
    name = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    try:
        return cache_folder("generate") / name
    except OSError:
        return cache_dir() / "generate" / name  # it cannot be made: `Spool.open` says so, in one line


class Spool:
    """The work folder of one run (see the module's doc); `open` it."""

    def __init__(self, folder: Path, settings: Settings, state: dict) -> None:
        self.folder, self.settings, self.state = folder, settings, state

    @property
    def level(self) -> int:
        """The last completed level (-1: none)."""
        return self.state["level"]

    @classmethod
    @contextlib.contextmanager
    def open(cls, folder: Path | None, settings: Settings, resume: bool) -> Iterator[Spool]:
        """The spool in ``folder`` (None: a temporary one, removed after), locked for this run. With ``resume``,
        the levels a run of the same settings completed there count; otherwise the folder starts empty."""
        with contextlib.ExitStack() as stack:
            if folder is None:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="subst-generate-")))
            try:
                folder.mkdir(parents=True, exist_ok=True)
                lock = stack.enter_context(open(folder / "lock", "w"))
            except OSError as e:
                raise BadInput(f"{folder}: cannot make the work folder ({e.strerror})") from None
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise BadInput(f"{folder}: another subst generate is working in this folder") from None
            state = _read_manifest(folder, settings) if resume else None
            spool = cls(folder, settings, state or _fresh())
            spool._tidy()
            yield spool

    def _tidy(self) -> None:
        """Drop what the completed levels no longer need and every trace of a level that did not complete."""
        if self.level < 0:
            (self.folder / "manifest.json").unlink(missing_ok=True)
        for d in _level_dirs(self.folder):
            if int(d.name[1:]) > self.level:
                shutil.rmtree(d, ignore_errors=True)
            else:
                for f in d.glob("graphs-*.bin"):
                    f.unlink()

    def _dir(self, level: int) -> Path:
        d = self.folder / f"L{level}"
        d.mkdir(exist_ok=True)
        return d

    # ---- a level's graphs, by bucket ------------------------------------------------------------------------

    def graph_writer(self, level: int) -> _BucketWriter:
        return _BucketWriter(self._dir(level))

    def graph_counts(self, level: int) -> np.ndarray:
        """How many graphs each bucket of a level holds."""
        d = self._dir(level)
        sizes = [
            (d / f"graphs-{b}.bin").stat().st_size if (d / f"graphs-{b}.bin").exists() else 0 for b in range(BUCKETS)
        ]
        return np.array(sizes, dtype=np.int64) // GRAPH.itemsize

    def graphs(self, level: int, buckets: range) -> np.ndarray:
        """The graphs of a level's ``buckets``, in row order."""
        d = self._dir(level)
        parts = [np.fromfile(d / f"graphs-{b}.bin", dtype=GRAPH) for b in buckets if (d / f"graphs-{b}.bin").exists()]
        g = np.concatenate([np.zeros(0, GRAPH), *parts])
        return g[np.argsort(g["row"], kind="stable")]

    # ---- classes and members, by bucket ----------------------------------------------------------------------

    def table_writer(self, level: int) -> _TableWriter:
        return _TableWriter(self._dir(level))

    def member_counts(self, levels: range) -> np.ndarray:
        """How many members of ``levels`` each bucket holds."""
        return sum((np.diff(np.load(self._dir(lv) / "members.idx.npy")) for lv in levels), np.zeros(BUCKETS, np.int64))

    def members(self, buckets: range, levels: range) -> tuple[np.ndarray, np.ndarray]:
        """The members and classes of ``levels`` in ``buckets``."""
        return tuple(  # type: ignore[return-value]
            np.concatenate([np.zeros(0, dtype), *(_read_part(self._dir(lv), name, dtype, buckets) for lv in levels)])
            for name, dtype in (("members", MEMBER), ("classes", CLASS))
        )

    # ---- frontiers: the rows each level extends, and every graph's chain of parents ----------------------------

    def save_frontier(self, level: int, rows: np.ndarray) -> None:
        np.save(self._dir(level) / "frontier.npy", rows)

    def chain(self, upto: int) -> tuple[np.ndarray, ...]:
        """The frontiers of levels 0..``upto``: a level-``n`` row's parent is row ``parent`` of frontier n-1
        (level 0's one graph is the empty one)."""
        empty = np.full((1, ROW), -1, dtype=np.int32)
        return (empty, *(np.load(self._dir(lv) / "frontier.npy") for lv in range(1, upto + 1)))

    def commit(self, level: int, **counts: object) -> None:
        """Level ``level`` is complete: record it (atomically) and drop its bucketed graphs."""
        self.state.update(counts, level=level)
        tmp = self.folder / "manifest.json.tmp"
        tmp.write_text(json.dumps({"settings": _settings_json(self.settings), **self.state}))
        os.replace(tmp, self.folder / "manifest.json")
        for f in self._dir(level).glob("graphs-*.bin"):
            f.unlink()


def stopped_at(folder: Path, settings: Settings) -> int:
    """The last level a stopped run of ``settings`` completed in ``folder`` (-1: none to resume)."""
    try:
        return int(_read_manifest(folder, settings)["level"])  # type: ignore[index]
    except (BadInput, TypeError, KeyError, ValueError):
        return -1


def discard(folder: Path) -> None:
    """Delete a spool's files (the folder too, if nothing else is in it): its run's rules are saved."""
    for d in _level_dirs(folder):
        shutil.rmtree(d, ignore_errors=True)
    for name in ("manifest.json", "manifest.json.tmp", "lock"):
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


def _level_dirs(folder: Path) -> list[Path]:
    """A spool's level folders (``L0``, ``L1``, ...): nothing else of a folder the user named is touched."""
    return [d for d in folder.glob("L*") if d.name[1:].isdigit() and d.is_dir()]


def _fresh() -> dict:
    return {"level": -1}


def _settings_json(settings: Settings) -> dict:
    return json.loads(json.dumps(settings.as_dict()))


def _read_manifest(folder: Path, settings: Settings) -> dict | None:
    """What a stopped run of ``settings`` completed in ``folder`` (None: nothing to resume)."""
    path = folder / "manifest.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if data.pop("settings", None) != _settings_json(settings):
        raise BadInput(f"--resume: {folder} holds a run of other settings; give another --work folder")
    return data


class _BucketWriter:
    """Appends a level's graphs to their buckets' files, buffered."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.parts, self.bytes = folder, [], 0
        for f in folder.glob("graphs-*.bin"):
            f.unlink()

    def add(self, fps: np.ndarray, start: int, rows: np.ndarray) -> None:
        """Graphs ``start``, ``start + 1``, ... of the level."""
        g = np.empty(len(fps), dtype=GRAPH)
        g["fp"], g["row"], g["r"] = fps, np.arange(start, start + len(fps)), rows
        self.parts.append(g)
        self.bytes += g.nbytes
        if self.bytes > FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        g = np.concatenate(self.parts)
        g = g[np.argsort(bucket_of(g["fp"]), kind="stable")]  # stable: each bucket stays in row order
        cuts = np.searchsorted(bucket_of(g["fp"]), np.arange(BUCKETS + 1))
        for b in np.nonzero(np.diff(cuts))[0]:
            with open(self.folder / f"graphs-{b}.bin", "ab") as f:
                g[cuts[b] : cuts[b + 1]].tofile(f)
        self.parts, self.bytes = [], 0


class _TableWriter:
    """Writes a level's members and classes in bucket order, with each bucket's offset."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files = {name: open(folder / f"{name}.bin", "wb") for name in ("members", "classes")}
        self.offsets: dict[str, list[int]] = {name: [0] for name in self.files}

    def add(self, buckets: range, members: np.ndarray, classes: np.ndarray) -> None:
        """The members and classes of the next ``buckets``."""
        for name, rows in (("members", members), ("classes", classes)):
            b = bucket_of(rows["fp"])
            rows[np.argsort(b, kind="stable")].tofile(self.files[name])
            counts = np.bincount(b - buckets.start, minlength=len(buckets))
            self.offsets[name].extend((self.offsets[name][-1] + np.cumsum(counts)).tolist())

    def close(self) -> None:
        for name, f in self.files.items():
            f.close()
            np.save(self.folder / f"{name}.idx.npy", np.array(self.offsets[name], dtype=np.int64))


def _read_part(folder: Path, name: str, dtype: np.dtype, buckets: range) -> np.ndarray:
    idx = np.load(folder / f"{name}.idx.npy")
    start, stop = int(idx[buckets.start]), int(idx[buckets.stop])
    return np.fromfile(folder / f"{name}.bin", dtype=dtype, count=stop - start, offset=start * dtype.itemsize)
