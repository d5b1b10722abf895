"""Rules decided in fixed shards by worker processes, one killed when a rule outlives its limit.

z3 bounds a check by its resource count and a wall-clock timeout, but not what follows one: tearing down a
solver whose check ran away in E-matching (z3's pop did the same) took as long again as the check, past any
timeout (issue 47). So a worker reports each rule as it starts it; one still on a rule ``limit`` seconds later
is killed, that rule gets the verdict ``killed`` makes (unknown), and a fresh process takes the rest of the
shard. What a rule costs is then bounded whatever z3 does, and a process that dies on a rule (z3 crashing)
costs that rule alone. A worker that finishes a shard is given the next one: each rule is decided in a z3
context of its own (`taso.verify.run.Prover`), so a process's history changes no verdict, and starting one (the
imports and the specs, 1.5 s) is paid once per worker, not once per shard.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

SHARDS = 32
"""Rules are proved in this many fixed shards (rows ``k``, ``k + SHARDS``, ...), each in id order. Fixed shards
keep what a killed worker costs (the rest of its shard, retried) the same whatever the number of workers, the
machine or its load; many of them, handed to the workers as they come free, keep the last worker from running
on long after the others (a shard is about 1.5 % of the shipped store)."""
SMALL = 64
"""Fewer rules than this are proved in this process, in id order (tests and small stores)."""

Step = Callable[[dict], tuple[int, object]]
"""Decides one row in a worker: (row id, verdict)."""


@dataclass
class _Worker:
    """A process deciding the rows it is sent, shard by shard: ``rows`` are those of its shard still undecided,
    ``since`` is when it reported starting ``rows[0]`` (None: not yet)."""

    process: BaseProcess
    conn: Connection
    rows: list[dict] = field(default_factory=list)
    since: float | None = None


class Shards:
    """At most ``workers`` processes deciding rows over `SHARDS` fixed shards (`decide`): each runs
    ``init(*init_args)`` once, then ``step`` on the rows of each shard it is sent, in order. They start on
    entering, so their imports and specs load while the caller reads its rows (parsing the shipped store's takes
    2.4 s), and are stopped on leaving, whatever happened (Ctrl-C, rows refused, a consumer that stops early)."""

    def __init__(
        self,
        init: Callable[..., None],
        init_args: tuple,
        step: Step,
        killed: Callable[[dict, str], tuple[int, object]],
        workers: int,
        limit: float,
    ) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._start = (init, init_args, step)
        self._killed, self._workers, self._limit = killed, workers, limit
        self._live: dict[Connection, _Worker] = {}

    def __enter__(self) -> Shards:
        while len(self._live) < self._workers:
            self._spawn()
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self._live.values():
            _stop(w)
        self._live.clear()

    def _spawn(self) -> None:
        w = _start(self._ctx, *self._start)
        self._live[w.conn] = w

    def decide(self, rows: list[dict]) -> Iterator[tuple[int, object]]:
        """Every row's (id, verdict), the shards heaviest first, each to the next worker free. A rule still
        undecided ``limit`` seconds after it started, or whose process died, gets ``killed(row, why)`` instead,
        and the rest of its shard goes to a fresh process."""
        todo = deque(shard for shard in heaviest_first([rows[k::SHARDS] for k in range(SHARDS)]) if shard)
        live, limit = self._live, self._limit
        while todo or any(w.rows for w in live.values()):
            while todo and len(live) < self._workers:
                self._spawn()
            for w in [w for w in live.values() if not w.rows]:
                if todo:
                    w.rows = todo.popleft()
                    w.conn.send(w.rows)
                else:
                    _stop(live.pop(w.conn))
            for conn in wait(list(live), timeout=_wait(live.values(), limit)):
                w = live[conn]  # type: ignore[index]
                try:
                    kind, value = conn.recv()  # type: ignore[union-attr]
                except EOFError:  # the process died on the first row left
                    _stop(live.pop(w.conn))
                    if w.rows:
                        yield self._killed(w.rows[0], "its worker process died")
                        _retry(todo, w.rows[1:])
                    continue
                if kind == "start":
                    w.since = time.monotonic()
                else:
                    yield value
                    w.rows.pop(0)
                    w.since = None
            now = time.monotonic()
            for w in [w for w in live.values() if w.since is not None and now - w.since > limit]:
                _stop(live.pop(w.conn))
                yield self._killed(w.rows[0], f"its worker process was killed after {limit:g} s")
                _retry(todo, w.rows[1:])


def _retry(todo: deque[list[dict]], rest: list[dict]) -> None:
    """The rest of a shard whose worker was lost, next for a fresh process."""
    if rest:
        todo.appendleft(rest)


def _start(
    ctx: multiprocessing.context.SpawnContext, init: Callable[..., None], init_args: tuple, step: Step
) -> _Worker:
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_serve, args=(child, init, init_args, step), daemon=True)
    p.start()
    child.close()
    return _Worker(p, parent)


def _serve(conn: Connection, init: Callable[..., None], init_args: tuple, step: Step) -> None:
    """A worker: for each shard it is sent, announce each row before deciding it, so the parent knows how long
    it has been on it; ends when the parent closes its end."""
    init(*init_args)
    while True:
        try:
            rows = conn.recv()
        except EOFError:
            return
        for row in rows:
            conn.send(("start", row["id"]))
            conn.send(("done", step(row)))


def _wait(workers: Iterable[_Worker], limit: float) -> float:
    """How long the parent may block: until the earliest rule in progress reaches ``limit`` (at most 1 s)."""
    now = time.monotonic()
    ends = [w.since + limit - now for w in workers if w.since is not None]
    return max(0.0, min([1.0, *ends]))


def _stop(w: _Worker) -> None:
    w.conn.close()
    if w.process.is_alive():
        w.process.kill()
    w.process.join()


def heaviest_first(shards: list[list[dict]]) -> list[list[dict]]:
    """The shards in the order the pool starts them: the one whose rules took longest when last decided (their
    stored verdicts' seconds; a candidate has none) first, so that a slow shard does not start last and keep
    one worker busy long after the others are done; ties keep id order. Each rule is decided in a z3 context
    of its own, so the order changes no verdict."""
    return sorted(shards, key=lambda shard: -sum(map(_last_seconds, shard)))


def _last_seconds(row: dict) -> float:
    """What deciding the row's rule took when its stored verdict was reached (0 where it has none)."""
    try:
        detail = json.loads(row.get("detail") or "{}")
    except ValueError:
        return 0.0
    seconds = detail.get("seconds") if isinstance(detail, dict) else None
    return float(seconds) if isinstance(seconds, int | float) and 0 < seconds < float("inf") else 0.0
