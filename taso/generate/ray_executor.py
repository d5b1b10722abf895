"""The generator's work as Ray Core tasks (``pip install subst[ray]``): on a cluster, or on a Ray of this machine.

Each map puts its `Inputs` into Ray's object store once; a worker process fetches them at its first task of that
map and keeps them for the rest, so a task carries only its job (a range). A task whose worker or node is lost
runs again (Ray's ``max_retries``): tasks are pure, so a retry gives the same result. Ray is imported only here,
and only when this executor starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from taso.errors import BadInput
from taso.generate.executor import RETRIES, Inputs, Task, run_task, tree_memory

_FETCHED: dict[str, Any] = {}
"""In a Ray worker: the inputs of the map it last worked for, by object id."""


def _remote_task(task: Task, box: list, job: Any) -> Any:
    """A task on a Ray worker. The inputs' reference comes boxed in a list, so Ray does not fetch them for every
    task: they are fetched here once per worker and map."""
    import ray

    (ref,) = box
    if _FETCHED.get("id") != ref.hex():
        _FETCHED.clear()
        _FETCHED["inputs"], _FETCHED["id"] = ray.get(ref), ref.hex()
    return run_task(task, _FETCHED["inputs"], job)


class RayExecutor:
    """Ray Core tasks on the cluster at ``address`` (else ``RAY_ADDRESS``), or on a Ray started here with
    ``workers`` CPUs (default: all cores) and shut down at `stop`."""

    def __init__(self, address: str | None = None, workers: int | None = None, retries: int = RETRIES) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.workers = workers or os.cpu_count() or 1
        self.retries = retries
        self._remote: Any = None

    def start(self) -> None:
        try:
            import ray
        except ImportError:
            raise BadInput(
                "--executor ray: Ray is not installed; install subst[ray] (pip install 'subst[ray]')"
            ) from None
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        try:
            if self.address:
                _probe(self.address)  # ray.init retries an address that does not answer for ever
                ray.init(address=self.address, **quiet)
            else:
                ray.init(address="local", num_cpus=self.workers, include_dashboard=False, **quiet)
        except (OSError, RuntimeError, ValueError, ray.exceptions.RayError) as e:
            ray.shutdown()
            where = f"at {self.address}" if self.address else "on this machine"
            raise BadInput(f"--executor ray: cannot reach a Ray cluster {where} ({_first_line(e)})") from None
        if self.address:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(_remote_task).options(max_retries=self.retries)

    def stop(self) -> None:
        import ray

        ray.shutdown()

    def map(self, task: Task, inputs: Inputs, jobs: Sequence[Any]) -> Iterator[Any]:
        """Jobs go out a few per worker ahead of the one awaited, so the object store holds few results."""
        import ray

        box = [ray.put(inputs)]
        todo, running = iter(jobs), deque()
        try:
            for job in todo:
                running.append(self._remote.remote(task, box, job))
                if len(running) >= 4 * self.workers:
                    yield ray.get(running.popleft())
            while running:
                yield ray.get(running.popleft())
        except ray.exceptions.RayTaskError as e:  # the task itself raised: a bug, shown as such
            raise e.as_instanceof_cause() from None
        except ray.exceptions.RayError as e:  # lost workers or nodes, past the retries
            raise BadInput(f"--executor ray: the cluster failed mid-run ({_first_line(e)})") from None
        finally:
            for ref in running:  # a failed or abandoned map leaves nothing running
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)

    def memory(self) -> int:
        """This machine's processes of the run: the driver, and with a Ray started here its workers too."""
        return tree_memory(os.getpid())


def _probe(address: str, timeout: float = 5.0) -> None:
    """Raise OSError unless the cluster's head answers at ``address`` (HOST:PORT, ray://HOST:PORT, or ``auto``:
    the cluster `ray start` made on this machine)."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    target = address.removeprefix("ray://")
    if target == "auto":
        target = canonicalize_bootstrap_address_or_die(target)
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not HOST:PORT: {address!r}")
    socket.create_connection((host, int(port)), timeout=timeout).close()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
