"""The level-by-level driver: extend each class's representative, file the children into fingerprint classes,
then pair every class's members with its representative. The parallel work goes through an `Executor`."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from taso.generate.evaluate import _build, _Context
from taso.generate.executor import Executor, Inputs, LocalExecutor, chunks
from taso.generate.extend import _children, _cost, _fingerprints, _structure, _text_hash
from taso.generate.fingerprint import EVALUATIONS, combine
from taso.generate.forms import MAX_ARITY, ROW, NodeSpec, Settings
from taso.generate.pairs import judge, to_rule
from taso.rules import Rule
from taso.rules.fold import fold


@dataclass
class _Class:
    level: int
    members: list[tuple[tuple[NodeSpec, ...], tuple[int, ...] | None]]
    """(nodes, outputs) of each member, cheapest (the representative) first; outputs None means the sinks."""
    keys: set[int]


@dataclass
class Result:
    """What a run found, and what each pruning removed."""

    settings: Settings
    rules: list[tuple[str, Rule]]
    """(class fingerprint, rule) in a deterministic order."""
    graphs: list[int]
    """Graphs built per op count (0 ops: pool tensors as outputs)."""
    classes: int
    candidates: int
    pruned: Counter = field(default_factory=Counter)


def _work(ctx: _Context, frontier: list, job: tuple[int, int]) -> tuple[int, np.ndarray, np.ndarray, Counter]:
    """Extend the representatives ``frontier[start:stop]``, compactly: each child's first-evaluation fingerprint
    (uint64) and (parent, form, arguments) (int32; -1 for no argument)."""
    start, stop = job
    counts: Counter = Counter()
    states = [_build(ctx, nodes) for nodes in frontier[start:stop]]
    children = [(i, f, args, sc) for i, st in enumerate(states) for f, args, sc in _children(ctx, st, counts)]
    rows = [(start + i, f, *args, *(-1,) * (MAX_ARITY - len(args))) for i, f, args, _ in children]
    return len(states), _fingerprints(ctx, states, children), np.array(rows, dtype=np.int32).reshape(-1, ROW), counts


def _describe(ctx: _Context, graphs: list, job: tuple[int, int]) -> np.ndarray:
    """For each of ``graphs[start:stop]``: its structure hash (equal hashes, equal graphs, input names included)
    and how many of its ops read an activation (what ranks a class's members: weight-only ops are folded ahead
    of time)."""
    out = [(_text_hash(_structure(ctx, nodes, {})), _cost(ctx, nodes)) for nodes in graphs[slice(*job)]]
    return np.array(out, dtype=np.uint64).reshape(-1, 2)


def _extend_level(
    executor: Executor, settings: Settings, frontier: list, last: bool, classes: dict[int, _Class], tick: Callable
) -> tuple[int, np.ndarray, np.ndarray, list[tuple[NodeSpec, ...]]]:
    """Extend every representative in ``frontier``, in order. Returns how many graphs were built and, for those
    worth a look (at the last level only fingerprints seen twice or seen before; all of them otherwise), their
    (fingerprint, structure hash) as uint64 pairs, their costs and their nodes. The children's rows wait in a
    scratch file meanwhile, so memory holds 8 bytes per graph built."""
    jobs = chunks(len(frontier), executor.workers, 256)
    with tempfile.TemporaryFile() as fp_file, tempfile.TemporaryFile() as row_file:
        for n, fps, rows, counts in executor.map(_work, Inputs(settings, 1, frontier), jobs):
            fps.tofile(fp_file)
            rows.tofile(row_file)
            tick(n, len(fps), counts)
        fp_file.seek(0)
        row_file.seek(0)
        fps = np.fromfile(fp_file, dtype=np.uint64)
        picked = _colliding(fps, classes) if last else np.arange(len(fps))
        rows = (
            np.memmap(row_file, dtype=np.int32, mode="r").reshape(-1, ROW)[picked]
            if len(fps)
            else np.zeros((0, ROW), np.int32)
        )
    nodes = [(*frontier[p], (f, tuple(a for a in args if a >= 0))) for p, f, *args in rows.tolist()]
    jobs = chunks(len(nodes), executor.workers, 4096)
    described = [np.zeros((0, 2), np.uint64), *executor.map(_describe, Inputs(settings, 1, nodes), jobs)]
    described = np.concatenate(described)
    return len(fps), np.stack([fps[picked], described[:, 0]], axis=1), described[:, 1], nodes


Progress = Callable[[str, int, int, dict], None]
"""progress(stage, done, total, counts): called as representatives are extended (stage "N ops"; counts: graphs
built so far, classes, memory in bytes) and as pairs are judged (stage "pairs")."""


def generate(
    settings: Settings,
    workers: int | None = None,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> Result:
    """Enumerate, fingerprint, prune and pair: the candidate rules of ``settings``. The work runs on
    ``executor`` (started and stopped here), by default ``workers`` processes of this machine."""
    executor = executor or LocalExecutor(workers)
    executor.start()
    try:
        return _generate(settings, executor, _Meter(progress, executor))
    finally:
        executor.stop()


class _Meter:
    """Progress with the run's memory, sampled at most once a second (reading /proc for every worker costs)."""

    def __init__(self, progress: Progress | None, executor: Executor) -> None:
        self.progress, self.executor = progress, executor
        self.bytes, self.when = 0, -1.0

    def __call__(self, stage: str, done: int, total: int, counts: dict) -> None:
        if self.progress is None:
            return
        if time.monotonic() - self.when > 1 or done >= total:
            self.bytes, self.when = self.executor.memory(), time.monotonic()
        self.progress(stage, done, total, {**counts, "memory": self.bytes})


def _generate(settings: Settings, executor: Executor, progress: _Meter) -> Result:
    ctx = _Context(settings, 1)
    classes: dict[int, _Class] = {}
    pruned: Counter = Counter()
    graphs = [_seed_classes(ctx, classes)]
    frontier: list[tuple[NodeSpec, ...]] = [()]
    for level in range(1, settings.max_ops + 1):
        last = level == settings.max_ops
        seen = [0, 0]

        def tick(
            n: int, built: int, counts: Counter, seen: list = seen, total: int = len(frontier), level: int = level
        ) -> None:
            seen[0] += n
            seen[1] += built
            pruned.update(counts)
            progress(f"{level} ops", seen[0], total, {"graphs": sum(graphs) + seen[1], "classes": len(classes)})

        built, ids, costs, nodes = _extend_level(executor, settings, frontier, last, classes, tick)
        graphs.append(built)
        frontier = _merge(classes, level, ids, costs, nodes, last, settings.extend_all, pruned)
    del frontier
    rules, candidates = _pairs(settings, classes, pruned, executor, progress)
    if settings.prune_pairs:
        keep, pruned["derivable from smaller kept rules (one rewrite from each side)"] = fold([r for _, r in rules])
        rules = [fr for fr, k in zip(rules, keep) if k]
    return Result(settings, rules, graphs, len(classes), candidates, pruned)


def _pairs(
    settings: Settings, classes: dict[int, _Class], pruned: Counter, executor: Executor, progress: _Meter
) -> tuple[list[tuple[str, Rule]], int]:
    """Each non-representative member against its representative, pruned, as rules (member -> representative)."""
    pairs = [(fp, m, k.members[0]) for fp, k in classes.items() for m in k.members[1:]]
    jobs = chunks(len(pairs), executor.workers, 64, per_worker=8)
    verdicts: list[tuple[str, tuple | None, int]] = []
    inputs = Inputs(settings, EVALUATIONS, [(m, rep) for _, m, rep in pairs])
    for part in executor.map(judge, inputs, jobs):
        verdicts += part
        progress("pairs", len(verdicts), len(pairs), {"graphs": len(verdicts), "classes": len(classes)})
    rules: list[tuple[str, Rule]] = []
    seen: set[tuple] = set()
    full = _Context(settings)
    for (_, (nodes, outs), (rep_nodes, rep_outs)), (reason, key, fp) in zip(pairs, verdicts):
        if reason:
            pruned[reason] += 1
        elif key is not None and key in seen:
            pruned["same pair up to renaming inputs"] += 1
        else:
            seen.add(key)
            rule = to_rule(full, _build(full, nodes), outs, _build(full, rep_nodes), rep_outs)
            rules.append((f"{fp:016x}", rule))
    return rules, len(pairs)


def _merge(
    classes: dict[int, _Class],
    level: int,
    ids: np.ndarray,
    costs: np.ndarray,
    nodes: list[tuple[NodeSpec, ...]],
    last: bool,
    extend_all: bool,
    pruned: Counter,
) -> list[tuple[NodeSpec, ...]]:
    """File a level's graphs into fingerprint classes; the next frontier: each new class's representative (the
    cheapest member, then the smallest structure hash), or every new graph with ``extend_all``."""
    _, first = np.unique(ids, axis=0, return_index=True)
    pruned["same graph built twice"] += len(ids) - len(first)
    first.sort()
    new: dict[int, dict[int, tuple[int, tuple[NodeSpec, ...]]]] = {}
    everything: list[tuple[NodeSpec, ...]] = []
    for (fp, key), cost, g in zip(ids[first].tolist(), costs[first].tolist(), [nodes[i] for i in first]):
        old = classes.get(fp)
        if old is not None:
            if key in old.keys:
                pruned["same graph built twice"] += 1
                continue
            old.keys.add(key)
            old.members.append((g, None))
            everything.append(g)
            pruned["not extended (class has a cheaper representative)"] += not (last or extend_all)
            continue
        bucket = new.setdefault(fp, {})
        if key in bucket:
            pruned["same graph built twice"] += 1
        else:
            bucket[key] = (cost, g)
            everything.append(g)
    frontier = []
    for fp, bucket in new.items():
        ranked = sorted(bucket.items(), key=lambda kv: (kv[1][0], kv[0]))
        classes[fp] = _Class(level, [(g, None) for _, (_, g) in ranked], set(bucket))
        frontier.append(ranked[0][1][1])
        pruned["not extended (class has a cheaper representative)"] += (len(ranked) - 1) * (not (last or extend_all))
    return everything if extend_all else frontier


def _seed_classes(ctx: _Context, classes: dict[int, _Class]) -> int:
    """0-op graphs: one pool tensor, or two, as the outputs (targets of rules such as T(T(x)) = x)."""
    firsts = list(ctx.first)
    picks: list[tuple[int, ...]] = [(a,) for a in firsts]
    for c, first in enumerate(firsts):
        if ctx.settings.pool[c].count > 1:
            picks.append((first, first + 1))
        picks.extend((first, other) for other in firsts[c + 1 :])
    for outs in picks:
        fp = combine([ctx.inputs[a].digest for a in outs])
        classes.setdefault(fp, _Class(0, [((), outs)], {_text_hash("out:" + ",".join(ctx.names[a] for a in outs))}))
    return len(picks)


def _colliding(fps: np.ndarray, classes: dict[int, _Class]) -> np.ndarray:
    """Which of the last level's graphs are worth a look: fingerprint seen twice, or already a class. One sorted
    copy and a binary search: memory stays near two arrays of the level's size (tens of millions at 4 ops)."""
    s = np.sort(fps)
    hot = np.union1d(s[1:][s[1:] == s[:-1]], np.fromiter(classes, dtype=np.uint64, count=len(classes)))
    del s
    if not len(hot):
        return np.zeros(len(fps), dtype=bool)
    return hot[np.minimum(np.searchsorted(hot, fps), len(hot) - 1)] == fps
