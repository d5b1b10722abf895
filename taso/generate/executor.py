"""Where the generator's parallel work runs: an `Executor` maps a task over jobs, in order.

Every map has read-only `Inputs` (the settings, how many evaluations a worker's `_Context` holds, and one large
block of data, such as a level's frontier) that reach each worker once, and small jobs that name ranges of that
data. `LocalExecutor` (the default) forks processes of this machine after the inputs are in place, so they share
them page for page (in a process that has loaded Ray it spawns them, handing each the inputs);
`taso.generate.ray_executor.RayExecutor` puts them into Ray's object store once. The shape is the one a columnar
generator needs: map over parent ranges, and later, shuffle blocks by fingerprint bucket and reduce per bucket as
further maps.

A local worker that dies (killed, or out of memory) must not stall the run: `multiprocessing.Pool` loses the
task it held, or waits for ever on the queue lock it held, so the pool is concurrent.futures', which reports a
dead worker as a broken pool; the jobs not yet returned then run again on a fresh pool, as Ray retries a lost
task (tasks are pure, so the rules do not change), `RETRIES` times before the run fails with one line.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from taso.errors import BadInput
from taso.generate.evaluate import _Context
from taso.generate.forms import Settings

J = TypeVar("J")
R = TypeVar("R")

RETRIES = 4
"""How often the jobs of a map whose worker (a local process, a Ray worker or node) died run again before the
run fails."""


@dataclass(frozen=True)
class Inputs:
    """What every task of one map reads and none changes."""

    settings: Settings
    runs: int
    """Evaluations the worker's `_Context` holds: 1 to enumerate, `taso.fingerprint.EVALUATIONS` to judge pairs."""
    data: Any = None


Task = Callable[[_Context, Any, Any], Any]
"""task(context, inputs.data, job) -> result: a module-level function, so workers find it by name."""


class Executor(Protocol):
    """Runs a generation's tasks; `start` before the first map, `stop` after the last (also on failure)."""

    workers: int
    """How many tasks run at once: jobs are cut so that each worker gets several."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def map(self, task: Task, inputs: Inputs, jobs: Sequence[Any]) -> Iterator[Any]:
        """``task`` over ``jobs``, results in the jobs' order as they come."""
        ...

    def memory(self) -> int:
        """Bytes the run holds now: this process and its workers (PSS: pages they share count once)."""
        ...


_INPUTS: dict[str, Any] = {}
"""This worker process's inputs and context (a forked worker inherits the parent's)."""


def run_task(task: Task, inputs: Inputs, job: Any) -> Any:
    """``task`` on ``job`` with this process's context for ``inputs``, made at the first job that needs it."""
    key = (inputs.settings, inputs.runs)
    if _INPUTS.get("key") != key:
        _INPUTS["ctx"], _INPUTS["key"] = _Context(inputs.settings, inputs.runs), key
    return task(_INPUTS["ctx"], inputs.data, job)


def _run_forked(call: tuple[Task, Any]) -> Any:
    task, job = call
    return run_task(task, _INPUTS["inputs"], job)


class LocalExecutor:
    """Processes of this machine, forked for each map once its inputs are in place (no copy is sent), or this
    process alone for one worker or one job. A map whose worker dies runs its unreturned jobs again on a fresh
    pool, up to ``retries`` times."""

    def __init__(self, workers: int | None = None, retries: int = RETRIES) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.retries = retries

    def start(self) -> None:
        pass

    def stop(self) -> None:
        _INPUTS.clear()

    def map(self, task: Task, inputs: Inputs, jobs: Sequence[Any]) -> Iterator[Any]:
        _INPUTS.clear()  # a fresh context per map, as a fresh worker would have
        if self.workers <= 1 or len(jobs) <= 1:
            yield from (run_task(task, inputs, job) for job in jobs)
            return
        _INPUTS["inputs"] = inputs
        done = 0
        try:
            for _ in range(self.retries + 1):
                try:
                    with contextlib.closing(_pooled(self.workers, task, jobs[done:])) as results:
                        for result in results:
                            yield result
                            done += 1
                    return
                except BrokenProcessPool:
                    continue
        finally:
            _INPUTS.clear()
        raise BadInput(
            f"a local worker process died mid-map on {self.retries + 1} fresh pool(s) in a row (killed, or out of "
            "memory?): the run stopped; the store is unchanged"
        )

    def memory(self) -> int:
        return tree_memory(os.getpid())


def _pooled(workers: int, task: Task, jobs: Sequence[Any]) -> Iterator[Any]:
    """``task`` over ``jobs`` on a fresh pool of ``workers`` processes, results in order; BrokenProcessPool if
    one of them dies. Running jobs finish before the pool is gone (a map that stops early waits for at most a
    job per worker)."""
    pool = _fork_pool(workers)
    try:
        yield from pool.map(_run_forked, [(task, job) for job in jobs])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        gc.unfreeze()


def _fork_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes, forked where that is safe (cheap start, inputs shared), else spawned. The parent's
    objects are frozen out of the garbage collector first (`_pooled` unfreezes them after): a collection in a
    child would otherwise touch, and so copy, every page. Forked workers start together at the first job,
    before the pool's own thread does."""
    gc.freeze()
    if can_fork():
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    # spawned workers inherit nothing: hand them the inputs
    return ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_adopt, initargs=(_INPUTS["inputs"],)
    )


def can_fork() -> bool:
    """Whether a child may be forked from this process: the platform has fork, and this process never loaded
    Ray. Ray's threads live on after ``ray.shutdown``, and a child forked while one holds a lock waits for it for
    ever (a test worker that had run Ray in process hung so, forking its next generation's pool)."""
    return "fork" in multiprocessing.get_all_start_methods() and "ray" not in sys.modules


def _adopt(inputs: Inputs) -> None:
    _INPUTS["inputs"] = inputs


def tree_memory(pid: int) -> int:
    """Memory (bytes) of ``pid`` and all its descendants: summed PSS, so pages forked workers share count once
    (0 where /proc cannot tell)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return total


def chunks(n: int, workers: int, most: int, per_worker: int = 16) -> list[tuple[int, int]]:
    """``range(n)`` as (start, stop) jobs: about ``per_worker`` per worker, at most ``most`` items each."""
    size = max(1, min(most, n // (workers * per_worker) or 1))
    return [(i, min(n, i + size)) for i in range(0, n, size)]
