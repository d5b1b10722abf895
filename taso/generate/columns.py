"""Fingerprint classes as columns: one bucket of fingerprints at a time, filed by sorting, not by dicts of objects.

A level's graphs arrive as `GRAPH` records (fingerprint, row number in the level's enumeration order, spooled
row). A class is a `CLASS` record (fingerprint, the level it was founded at, the row where its fingerprint first
appeared there) and its graphs are `MEMBER` records (fingerprint, structure hash, level, position, row). The
order of everything downstream is the order of the object-based generator this replaces, so the rules and their
ids stay the same: classes by (level, first row); a class's members by (level, position), where a founding
member's position is its rank by (cost, structure hash) and a later joiner's is its row. The representative is
a class's first member. Level-0 members are the seed outputs: their row's first entry is the seed's index.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from taso.generate.forms import ROW

GRAPH = np.dtype([("fp", "<u8"), ("row", "<i8"), ("r", "<i4", (ROW,))])
"""A graph as a worker made it: fingerprint, row number in its level, (parent, form, arguments padded with -1)."""
MEMBER = np.dtype([("fp", "<u8"), ("key", "<u8"), ("level", "<i4"), ("pos", "<i8"), ("r", "<i4", (ROW,))])
CLASS = np.dtype([("fp", "<u8"), ("level", "<i4"), ("first", "<i8")])

DUPLICATE = "same graph built twice"
NOT_EXTENDED = "not extended (class has a cheaper representative)"


def _pairs(fp: np.ndarray, key: np.ndarray) -> np.ndarray:
    """(fingerprint, key) as one 16-byte value per graph, for exact set tests."""
    return np.ascontiguousarray(np.stack([fp, key], axis=1)).view("V16").ravel()


def colliding(graphs: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Which of the last level's graphs are worth a look: fingerprint seen twice in this bucket (every copy of a
    fingerprint is in one bucket), or that of a class of ``old`` (`CLASS`)."""
    fp = graphs["fp"]
    s = np.sort(fp)
    hot = np.union1d(s[1:][s[1:] == s[:-1]], old["fp"])
    return np.isin(fp, hot)


@dataclass
class Filed:
    """One bucket's share of a level, filed."""

    members: np.ndarray
    classes: np.ndarray
    frontier: np.ndarray
    """(sort position, row) of each graph to extend next: by first row of its class, or (``extend_all``) by row."""
    pruned: Counter


def file_level(
    graphs: np.ndarray,
    keys: np.ndarray,
    costs: np.ndarray,
    old_members: np.ndarray,
    old_classes: np.ndarray,
    level: int,
    extends: bool,
    extend_all: bool,
) -> Filed:
    """File one bucket's graphs of ``level`` (`GRAPH`, in row order), with their structure hashes and costs, into the
    classes of earlier levels (``old_*``) or into new ones. ``extends``: a larger level follows."""
    pruned: Counter = Counter()
    fp, row = graphs["fp"], graphs["row"]
    by_id = np.lexsort((row, keys, fp))  # equal (fingerprint, hash): the first built one first
    sf, sk = fp[by_id], keys[by_id]
    head = np.ones(len(by_id), dtype=bool)
    head[1:] = (sf[1:] != sf[:-1]) | (sk[1:] != sk[:-1])
    u = np.sort(by_id[head])  # each distinct graph once, at its first row
    pruned[DUPLICATE] += len(graphs) - len(u)
    ufp, ukey = fp[u], keys[u]
    joins = np.isin(ufp, old_classes["fp"])
    known = np.zeros(len(u), dtype=bool)
    known[joins] = np.isin(_pairs(ufp[joins], ukey[joins]), _pairs(old_members["fp"], old_members["key"]))
    pruned[DUPLICATE] += int(known.sum())
    joins &= ~known
    fresh = np.nonzero(~np.isin(ufp, old_classes["fp"]))[0]
    fresh = fresh[np.lexsort((ukey[fresh], costs[u][fresh], ufp[fresh]))]  # by class, then cheapest first
    starts = np.ones(len(fresh), dtype=bool)
    starts[1:] = ufp[fresh][1:] != ufp[fresh][:-1]
    where = np.nonzero(starts)[0]
    rank = np.arange(len(fresh)) - np.repeat(where, np.diff(np.append(where, len(fresh))))
    first = np.minimum.reduceat(row[u][fresh], where) if len(fresh) else np.zeros(0, np.int64)
    j = u[joins]
    members = np.empty(len(j) + len(fresh), dtype=MEMBER)
    for part, idx, pos in ((members[: len(j)], j, row[j]), (members[len(j) :], u[fresh], rank)):
        part["fp"], part["key"], part["level"], part["pos"], part["r"] = (
            fp[idx],
            keys[idx],
            level,
            pos,
            graphs["r"][idx],
        )
    classes = np.empty(len(where), dtype=CLASS)
    classes["fp"], classes["level"], classes["first"] = ufp[fresh][where], level, first
    pruned[NOT_EXTENDED] += (len(j) + len(fresh) - len(where)) * (extends and not extend_all)
    if extend_all:
        everything = np.sort(np.concatenate([j, u[fresh]]))
        frontier = _frontier(row[everything], graphs["r"][everything])
    else:
        frontier = _frontier(first, graphs["r"][u[fresh][where]])
    return Filed(members, classes, frontier, pruned)


FRONTIER = np.dtype([("at", "<i8"), ("r", "<i4", (ROW,))])


def _frontier(at: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.empty(len(at), dtype=FRONTIER)
    out["at"], out["r"] = at, rows
    return out


PAIR_ORDER = ("class_level", "class_first", "level", "pos")


def pairs(members: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One bucket's candidate pairs: each member that is not its class's representative, the representative, and
    the pair's place in the run's order (class level, class first row, member level, member position)."""
    m = members[np.lexsort((members["pos"], members["level"], members["fp"]))]
    rep = np.zeros(len(m), dtype=bool)
    rep[:1] = True
    rep[1:] = m["fp"][1:] != m["fp"][:-1]
    rep_of = np.maximum.accumulate(np.where(rep, np.arange(len(m)), 0))
    c = classes[np.argsort(classes["fp"])]
    k = np.searchsorted(c["fp"], m["fp"][~rep])
    order = np.stack([c["level"][k], c["first"][k], m["level"][~rep], m["pos"][~rep]], axis=1).astype(np.int64)
    return m[~rep], m[rep_of[~rep]], order
