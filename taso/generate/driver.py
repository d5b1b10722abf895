"""The level-by-level driver: extend each class's representative, file the children into fingerprint classes
bucket by bucket (`taso.generate.columns`, on disk in a `Spool`), then judge every class's members against its
representative, bucket by bucket. The parallel work goes through an `Executor`; a graph travels as its row, and
a worker rebuilds its nodes from the chain of frontier rows it descends from."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from taso.generate import resize
from taso.generate.columns import CLASS, MEMBER, colliding, file_level, pairs
from taso.generate.evaluate import _build, _Context
from taso.generate.executor import Executor, Inputs, LocalExecutor, chunks
from taso.generate.extend import _children, _fingerprints, _Outline, _text_hash
from taso.generate.fingerprint import EVALUATIONS, combine
from taso.generate.forms import MAX_ARITY, ROW, NodeSpec, Settings
from taso.generate.pairs import judge, to_rule
from taso.generate.spool import BUCKETS, Spool
from taso.rules import Rule
from taso.rules.fold import Rewriter, size, terms

GROUP = 1 << 20
"""Graphs (or pairs) gathered from consecutive buckets into one parallel map: enough work per map to keep the
workers busy, few enough that memory holds them (about 100 bytes each)."""


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
    resumed_after: int = -1
    """The level a stopped run had completed, where this one took over (-1: it started afresh)."""
    size_dependent: int = 0
    """Pairs dropped before the fold: their sides differ at grown sizes (`taso.generate.resize`)."""
    not_resized: int = 0
    """Rules kept on the one check: their sizes cannot grow."""


Progress = Callable[[str, int, int, dict], None]
"""progress(stage, done, total, counts): called as representatives are extended (stage "N ops"; counts: graphs
built so far, classes, memory in bytes), as a level's buckets are filed into classes (stage "N ops, classes")
as pairs are judged (stage "pairs") and as rules are folded (stage "fold"; counts: rules kept so far)."""


def generate(
    settings: Settings,
    workers: int | None = None,
    progress: Progress | None = None,
    executor: Executor | None = None,
    work: Path | None = None,
    resume: bool = False,
) -> Result:
    """Enumerate, fingerprint, prune and pair: the candidate rules of ``settings``. The work runs on
    ``executor`` (started and stopped here), by default ``workers`` processes of this machine. Levels are
    spooled in the folder ``work`` (None: a temporary one); with ``resume``, the levels a stopped run of the
    same settings completed there are taken up again."""
    executor = executor or LocalExecutor(workers)
    executor.start()
    try:
        with Spool.open(work, settings, resume) as spool:
            return _generate(settings, executor, _Meter(progress, executor), spool)
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


def _generate(settings: Settings, executor: Executor, progress: _Meter, spool: Spool) -> Result:
    resumed = spool.level
    if spool.level < 0:
        _seed(_Context(settings, 1), spool)
    for level in range(spool.level + 1, settings.max_ops + 1):
        _enumerate(executor, settings, spool, level, progress)
        _file(executor, settings, spool, level, progress)
    state = spool.state
    pruned = Counter(state["pruned"])
    # before the fold, so that no true rule is folded away as derivable through a pair true only at its sizes
    rules, size_dependent, fixed = resize.screen(_pairs(settings, spool, pruned, executor, progress))
    if settings.prune_pairs:
        keep, pruned["derivable from smaller kept rules (one rewrite from each side)"] = _fold(
            executor, settings, [r for _, r in rules], progress
        )
        rules, fixed = [fr for fr, k in zip(rules, keep) if k], [f for f, k in zip(fixed, keep) if k]
    candidates = state["members"] - state["classes"]
    return Result(
        settings, rules, state["graphs"], state["classes"], candidates, pruned, resumed, size_dependent, sum(fixed)
    )


# ---- level 0 ------------------------------------------------------------------------------------------------


def _seed_picks(ctx: _Context) -> list[tuple[int, ...]]:
    """0-op graphs: one pool tensor, or two, as the outputs (targets of rules such as T(T(x)) = x)."""
    firsts = list(ctx.first)
    picks: list[tuple[int, ...]] = [(a,) for a in firsts]
    for c, first in enumerate(firsts):
        if ctx.settings.pool[c].count > 1:
            picks.append((first, first + 1))
        picks.extend((first, other) for other in firsts[c + 1 :])
    return picks


def _seed(ctx: _Context, spool: Spool) -> None:
    """Level 0's classes, a member each (a seed's row names it by its index), the first of equal ones kept."""
    picks = _seed_picks(ctx)
    fps = np.array([combine([ctx.inputs[a].digest for a in outs]) for outs in picks], dtype=np.uint64)
    _, first = np.unique(fps, return_index=True)
    first.sort()
    members = np.zeros(len(first), dtype=MEMBER)
    members["fp"], members["pos"], members["r"] = fps[first], first, -1
    members["r"][:, 0] = first
    members["key"] = [_text_hash("out:" + ",".join(ctx.names[a] for a in picks[i])) for i in first]
    classes = np.zeros(len(first), dtype=CLASS)
    classes["fp"], classes["first"] = fps[first], first
    writer = spool.table_writer(0)
    writer.add(range(BUCKETS), members, classes)
    writer.close()
    spool.commit(0, graphs=[len(picks)], classes=len(first), members=len(first), pruned={})


# ---- a graph from its row -----------------------------------------------------------------------------------


def _nodes(chain: tuple[np.ndarray, ...], level: int, row: np.ndarray) -> tuple[NodeSpec, ...]:
    """The nodes of the level-``level`` graph spooled as ``row``: its parent's (row ``row[0]`` of the frontier
    of ``level - 1``, and so on down to level 0's empty graph), then its own new node."""
    out = []
    while level > 0:
        p, f, *args = row.tolist()
        out.append((f, tuple(a for a in args if a >= 0)))
        level -= 1
        row = chain[level][p]
    return tuple(reversed(out))


def _member(ctx: _Context, chain: tuple[np.ndarray, ...], level: int, row: np.ndarray) -> tuple:
    """(nodes, outputs) of a class member: a seed's pool tensors as outputs, else its graph's sinks (None)."""
    if level == 0:
        return (), _seed_picks(ctx)[int(row[0])]
    return _nodes(chain, level, row), None


# ---- tasks: what the workers run ----------------------------------------------------------------------------


_PAD = [(-1,) * (MAX_ARITY - n) for n in range(MAX_ARITY + 1)]


def _work(ctx: _Context, chain: tuple[np.ndarray, ...], job: tuple[int, int]) -> tuple:
    """Extend the graphs ``chain[-1][start:stop]`` (the last level's frontier), compactly: each child's
    first-evaluation fingerprint (uint64) and (parent, form, arguments) (int32; -1 for no argument)."""
    start, stop = job
    counts: Counter = Counter()
    level = len(chain) - 1
    states = [_build(ctx, _nodes(chain, level, chain[-1][i])) for i in range(start, stop)]
    flat: list[int] = []  # one flat list of ints: numpy reads it far faster than a list of rows
    for i, st in enumerate(states):
        for f, args, _ in _children(ctx, st, counts):
            flat += (i, f, *args, *_PAD[len(args)])
    children = np.array(flat, dtype=np.int64).reshape(-1, ROW)
    fps = _fingerprints(ctx, states, children)
    children[:, 0] += start
    return len(states), fps, children.astype(np.int32), counts


def _describe(ctx: _Context, data: tuple, job: tuple[int, int]) -> np.ndarray:
    """For each of the level's graphs ``rows[start:stop]``: its structure hash (equal hashes, equal graphs,
    input names included) and how many of its ops read an activation (what ranks a class's members: weight-only
    ops are folded ahead of time). A parent's children are consecutive rows: its outline is made once."""
    chain, rows = data
    level = len(chain)
    out = np.empty((job[1] - job[0], 2), dtype=np.uint64)
    parent, outline = -1, None
    for i, (p, f, *args) in enumerate(rows[slice(*job)].tolist()):
        if p != parent:
            parent, outline = p, _Outline(ctx, _nodes(chain, level - 1, chain[-1][p]), {})
        text, cost = outline.grown(f, [a for a in args if a >= 0])  # type: ignore[union-attr]
        out[i] = _text_hash(text), cost
    return out


def _judge(ctx: _Context, data: tuple, job: tuple[int, int]) -> list[tuple[str, tuple | None, int]]:
    """`judge` over the pairs ``job`` names, each rebuilt from its member's and representative's rows."""
    chain, members, reps = data
    built = [
        (_member(ctx, chain, int(m["level"]), m["r"]), _member(ctx, chain, int(r["level"]), r["r"]))
        for m, r in zip(members[slice(*job)], reps[slice(*job)])
    ]
    return judge(ctx, built, (0, len(built)))


# ---- a level: enumerate, then file ----------------------------------------------------------------------------


def _enumerate(executor: Executor, settings: Settings, spool: Spool, level: int, progress: _Meter) -> None:
    """Extend every graph of the last frontier, in order; the children go to their buckets' files."""
    chain = spool.chain(level - 1)
    state, pruned = spool.state, Counter(spool.state["pruned"])
    done = built = 0
    writer = spool.graph_writer(level)
    jobs = chunks(len(chain[-1]), executor.workers, 256)
    for n, fps, rows, counts in executor.map(_work, Inputs(settings, 1, chain), jobs):
        writer.add(fps, built, rows)
        done, built = done + n, built + len(fps)
        pruned.update(counts)
        counts = {"graphs": sum(state["graphs"]) + built, "classes": state["classes"]}
        progress(f"{level} ops", done, len(chain[-1]), counts)
    writer.flush()
    state["graphs"] = [*state["graphs"][:level], built]
    state["pruned"] = dict(pruned)


def _file(executor: Executor, settings: Settings, spool: Spool, level: int, progress: _Meter) -> None:
    """File the level's graphs into classes, bucket by bucket; its frontier: the new classes' representatives
    in order of their fingerprints' first rows (every new graph, in row order, with ``extend_all``)."""
    last = level == settings.max_ops
    chain = spool.chain(level - 1)
    state, pruned = spool.state, Counter(spool.state["pruned"])
    writer = spool.table_writer(level)
    frontier: list[np.ndarray] = []
    progress(f"{level} ops, classes", 0, BUCKETS, {"graphs": sum(state["graphs"]), "classes": state["classes"]})
    for buckets, graphs, (old_members, old_classes) in _groups(spool, level, last):
        jobs = chunks(len(graphs), executor.workers, 4096)
        described = executor.map(_describe, Inputs(settings, 1, (chain, graphs["r"])), jobs)
        d = np.concatenate([np.zeros((0, 2), np.uint64), *described])
        filed = file_level(graphs, d[:, 0], d[:, 1], old_members, old_classes, level, not last, settings.extend_all)
        writer.add(buckets, filed.members, filed.classes)
        frontier.append(filed.frontier)
        pruned.update(filed.pruned)
        state["classes"] += len(filed.classes)
        state["members"] += len(filed.members)
        counts = {"graphs": sum(state["graphs"]), "classes": state["classes"]}
        progress(f"{level} ops, classes", buckets.stop, BUCKETS, counts)
    writer.close()
    if not last:
        f = np.concatenate(frontier)
        spool.save_frontier(level, f["r"][np.argsort(f["at"], kind="stable")])
    spool.commit(level, pruned=dict(pruned))


def _groups(spool: Spool, level: int, last: bool) -> Iterator[tuple[range, np.ndarray, tuple]]:
    """Runs of consecutive buckets of about `GROUP` graphs worth a look, in row order, with their classes of
    earlier levels. At the last level only fingerprints seen twice or seen before are worth a look, a fraction of
    the graphs: runs are read as usual and gathered until they hold `GROUP` of those, so that a parent's children,
    spread over every bucket, meet in few runs (`_describe` outlines a parent once per run)."""
    held: list[tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]] = []
    start = 0
    for buckets in _runs(spool.graph_counts(level)):
        graphs, old = spool.graphs(level, buckets), spool.members(buckets, range(level))
        held.append((graphs[colliding(graphs, old[1])] if last else graphs, old))
        if sum(len(g) for g, _ in held) >= GROUP or not last or buckets.stop == BUCKETS:
            if len(held) == 1:
                ((graphs, old),) = held
            else:
                graphs = np.concatenate([g for g, _ in held])
                graphs = graphs[np.argsort(graphs["row"], kind="stable")]
                old = tuple(np.concatenate(part) for part in zip(*(o for _, o in held)))  # type: ignore[assignment]
            yield range(start, buckets.stop), graphs, old
            held, start = [], buckets.stop


def _runs(counts: np.ndarray) -> Iterator[range]:
    """Consecutive buckets, ``counts`` of them adding up to `GROUP` or more (the last run: whatever is left)."""
    start, size = 0, 0
    for b, n in enumerate(counts.tolist()):
        size += n
        if size >= GROUP or b == len(counts) - 1:
            yield range(start, b + 1)
            start, size = b + 1, 0


# ---- pairs --------------------------------------------------------------------------------------------------


def _pairs(
    settings: Settings, spool: Spool, pruned: Counter, executor: Executor, progress: _Meter
) -> list[tuple[str, Rule]]:
    """Each non-representative member against its representative, pruned, as rules (member -> representative),
    in the order of classes and members. Pairs are judged bucket by bucket; only the kept ones are held."""
    chain = spool.chain(settings.max_ops - 1)
    total = spool.state["members"] - spool.state["classes"]
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    keys: list[tuple | None] = []
    fps: list[int] = []
    done = 0
    for members, reps, order in _pair_groups(spool, settings.max_ops):
        jobs = chunks(len(members), executor.workers, 64, per_worker=8)
        verdicts = executor.map(_judge, Inputs(settings, EVALUATIONS, (chain, members, reps)), jobs)
        picked: list[int] = []
        for part, (start, stop) in zip(verdicts, jobs):
            for i, (reason, key, fp) in zip(range(start, stop), part):
                if reason:
                    pruned[reason] += 1
                else:
                    picked.append(i)
                    keys.append(key)
                    fps.append(fp)
            done += stop - start
            progress("pairs", done, total, {"graphs": done, "classes": spool.state["classes"]})
        kept.append((members[picked], reps[picked], order[picked]))
    members, reps, order = (
        (np.concatenate(c) for c in zip(*kept)) if kept else (np.zeros(0, MEMBER),) * 2 + (np.zeros((0, 4), np.int64),)
    )
    rules: list[tuple[str, Rule]] = []
    seen: set[tuple] = set()
    full = _Context(settings)
    for i in np.lexsort(order.T[::-1]).tolist():
        if keys[i] is not None and keys[i] in seen:
            pruned["same pair up to renaming inputs"] += 1
            continue
        seen.add(keys[i])  # type: ignore[arg-type]
        (nodes, outs), (rep_nodes, rep_outs) = (
            _member(full, chain, int(x["level"]), x["r"]) for x in (members[i], reps[i])
        )
        rules.append((f"{fps[i]:016x}", to_rule(full, _build(full, nodes), outs, _build(full, rep_nodes), rep_outs)))
    return rules


def _pair_groups(spool: Spool, max_ops: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Runs of consecutive buckets' pairs (member, representative, place in the run's order), about `GROUP` at a
    time, sorted by that place so that a class's pairs come together."""
    levels = range(max_ops + 1)
    for buckets in _runs(spool.member_counts(levels)):
        members, reps, order = pairs(*spool.members(buckets, levels))
        o = np.lexsort(order.T[::-1])
        yield members[o], reps[o], order[o]


# ---- fold ---------------------------------------------------------------------------------------------------


def _fold(executor: Executor, settings: Settings, rules: list[Rule], progress: _Meter) -> tuple[list[bool], int]:
    """`taso.rules.fold.fold` with each size's rules judged in parallel: a rule is judged only against the kept
    rules of smaller sizes, so the rules of one size are independent of each other. The rules travel as terms."""
    keep = [True] * len(rules)
    kept = Rewriter()
    by_size: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rules):
        by_size[size(r)].append(i)
    done = dropped = 0
    for n in sorted(by_size):
        idx = by_size[n]
        sides = [(terms(rules[i].src), terms(rules[i].dst)) for i in idx]
        jobs = chunks(len(idx), executor.workers, 256)
        for (start, stop), part in zip(jobs, executor.map(_derivable, Inputs(settings, 1, (kept, sides)), jobs)):
            for i, k in zip(idx[start:stop], part):
                keep[i] = k
            done, dropped = done + stop - start, dropped + part.count(False)
            progress("fold", done, len(rules), {"kept": done - dropped})
        for i in idx:
            if keep[i]:
                kept.add(rules[i])
    return keep, keep.count(False)


def _derivable(ctx: _Context, data: tuple, job: tuple[int, int]) -> list[bool]:
    """For the rules ``sides[start:stop]`` (their two sides as terms): whether each is kept, as in
    `taso.rules.fold.fold`: no one rewrite of each side by the ``kept`` rules makes the two meet."""
    kept, sides = data
    return [{a, *kept.step(a)}.isdisjoint({b, *kept.step(b)}) for a, b in sides[slice(*job)]]
