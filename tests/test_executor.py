"""Where `subst generate` runs: the same rules in the same order on local processes and on Ray (a Ray started here,
a two-node cluster, a worker killed mid-run), and one clear line when Ray is missing, unreachable or fails.

The Ray tests need the ``ray`` extra (``pip install subst[ray]``; the dev setup installs it) and skip without it.
They start real Ray processes (some 20 s each on two busy cores), so they are marked slow; the generation they
run is two ops, small enough for CI.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, subst

from taso.errors import BadInput
from taso.generate import Inputs, LocalExecutor, Settings, generate
from taso.generate.executor import Task
from taso.rules import store

MAX_OPS = 2
SETTINGS = Settings(MAX_OPS, ("matmul", "transpose", "add", "relu", "concat1", "split1"))


def _rules(executor: Any = None, workers: int = 1) -> list[tuple[str, str]]:
    return [(fp, str(r)) for fp, r in generate(SETTINGS, workers=workers, executor=executor).rules]


@functools.cache
def reference() -> list[tuple[str, str]]:
    """The rules of `SETTINGS` in this process alone: what every executor must give, in this order."""
    rules = _rules()
    assert len(rules) > 20  # enough rules that a reordering or a lost job would show
    return rules


def test_local_executor_gives_the_same_rules_on_any_number_of_workers() -> None:
    assert _rules(LocalExecutor(2)) == _rules(LocalExecutor(3)) == reference()


def _fail_at(job: tuple[int, int], ctx: Any, data: Any, j: tuple[int, int]) -> Any:
    if j == job:
        raise RuntimeError(f"job {j}")


def test_a_failing_task_stops_the_local_map_and_its_workers() -> None:
    ex = LocalExecutor(2)
    jobs = [(i, i + 1) for i in range(8)]
    with pytest.raises(RuntimeError, match=r"job \(3, 4\)"):
        list(ex.map(functools.partial(_fail_at, (3, 4)), Inputs(SETTINGS, 1, None), jobs))
    assert not multiprocessing.active_children()


_KILL_A_WORKER = """
import multiprocessing, os, signal, time
from taso.generate import Inputs, LocalExecutor, Settings

def slow(ctx, data, job):
    time.sleep(0.2)
    return job

def kill_a_worker(ex):
    jobs = [(i, i + 1) for i in range(8)]
    results = ex.map(slow, Inputs(Settings(1, ("relu",)), 1, None), jobs)
    first = next(results)  # the pool is up, its workers mid-map
    os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)
    try:
        print([first, *results] == jobs, multiprocessing.active_children())
    except Exception as e:
        print(f"{type(e).__name__}: {e}", multiprocessing.active_children())

kill_a_worker(LocalExecutor(2))
kill_a_worker(LocalExecutor(2, retries=0))
"""


def test_a_local_worker_killed_mid_map_is_replaced_or_one_clear_error_past_the_retries() -> None:
    """A real worker process of a map killed mid-map, in a fresh interpreter that never loaded Ray (so the workers
    are forked, as `make store`'s are): its jobs run again on a fresh pool and change nothing, or past the
    retries the map fails in one line, within seconds and leaving no worker. `multiprocessing.Pool` waited for
    ever here, for the task the dead worker held or on the queue lock it held (`make store` hung so for 30 min)."""
    p = subprocess.run([sys.executable, "-c", _KILL_A_WORKER], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr[-2000:]
    retried, failed = p.stdout.strip().splitlines()
    assert retried == "True []"
    assert failed.startswith("BadInput: a local worker process died mid-map on 1 fresh pool(s) in a row"), failed
    assert failed.endswith("[]"), failed  # no worker left behind


def test_a_process_that_loaded_ray_spawns_its_local_workers_and_gets_the_same_rules() -> None:
    """A child forked while one of Ray's threads holds a lock waits for it for ever (a make test worker that had
    run Ray hung so at its next local generation): once Ray is loaded, the local workers are spawned instead,
    and give the same rules. In a fresh interpreter, so that this process's modules do not decide it."""
    pytest.importorskip("ray")
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from taso.generate import executor\n"
        "assert executor.can_fork()\n"
        "import ray\n"
        "assert not executor.can_fork()\n"
        "import test_executor as t\n"
        "print(t._rules(executor.LocalExecutor(2)) == t._rules())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr[-2000:]


def test_ray_missing_is_one_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    code = (
        "import sys; sys.modules['ray'] = None\n"  # as if the extra were not installed
        "from cli.main import main\n"
        f"sys.argv = ['subst', 'generate', '--max-ops', '1', '--ops', 'matmul', '--executor', 'ray', '--store', {str(db)!r}]\n"
        "main()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "install subst[ray]" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not db.exists()


def test_address_needs_the_ray_executor(tmp_path: Path) -> None:
    p = subst("generate", "--max-ops", "1", "--ops", "matmul", "--address", "auto", "--store", str(tmp_path / "g.db"))
    assert p.returncode == 2 and "--executor ray" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


# ---- on Ray ---------------------------------------------------------------------------------------------------

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'subst[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

from taso.generate.ray_executor import RayExecutor  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Two Ray nodes of one CPU each on this machine, as `ray start` on two machines would make."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def test_unreachable_address_is_one_line_and_exit_2_and_the_store_untouched(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    store.create(db).close()
    before = db.read_bytes()
    args = ["generate", "--max-ops", "1", "--ops", "matmul", "--executor", "ray", "--address", "127.0.0.1:1"]
    p = subprocess.run(  # a timeout: Ray itself would wait for an address that never answers for ever
        [sys.executable, "-m", "cli.main", *args, "--store", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "cannot reach a Ray cluster at 127.0.0.1:1" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert db.read_bytes() == before


@pytest.mark.slow
def test_a_ray_started_here_gives_the_same_rules_in_the_same_order(tmp_path: Path) -> None:
    assert _rules(RayExecutor(workers=2)) == reference()
    assert not ray.is_initialized()  # started for the run, shut down after it


@pytest.mark.slow
def test_a_two_node_cluster_from_ray_address_gives_the_same_rules(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    ex = RayExecutor()
    assert _rules(ex) == reference()
    assert ex.workers == 2  # the cluster's CPUs, not this machine's


def _die_once(marker: str, task: Task, ctx: Any, data: Any, job: Any) -> Any:
    """``task``, but the first worker to get here (no marker file yet) kills itself first: a worker lost mid-run."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return task(ctx, data, job)


class _KillsAWorker(RayExecutor):
    """A Ray executor one of whose workers dies at its first task."""

    def __init__(self, marker: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.marker = marker

    def map(self, task: Task, inputs: Inputs, jobs: Any) -> Iterator[Any]:
        return super().map(functools.partial(_die_once, str(self.marker), task), inputs, jobs)


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_retried_and_changes_nothing(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    assert _rules(_KillsAWorker(marker, address=cluster.address)) == reference()
    assert marker.exists()  # a worker did die


@pytest.mark.slow
def test_a_worker_lost_past_the_retries_is_one_clear_error(cluster: Cluster, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="the cluster failed mid-run"):
        generate(SETTINGS, executor=_KillsAWorker(tmp_path / "killed", address=cluster.address, retries=0))
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_cluster_that_goes_away_mid_run_is_one_line_and_exit_2_and_the_store_untouched(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    store.create(db).close()
    before = db.read_bytes()
    doomed = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    doomed.add_node(num_cpus=1)
    doomed.wait_for_nodes()
    args = ["generate", "--max-ops", "3", "--executor", "ray", "--address", doomed.address, "--store", str(db)]
    p = subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        for line in p.stderr:  # progress: a line as each level ends
            if " 1 ops |" in line:
                break
    finally:
        doomed.shutdown()  # the whole cluster, mid-run (3 ops take half a minute here)
    err = p.communicate(timeout=300)[1]
    assert p.returncode == 2, err
    # Ray either ends the driver's process or raises in it (a raylet that died): one message either way
    assert err.strip().splitlines()[-1].startswith("subst: error: --executor ray: the cluster failed mid-run (")
    assert db.read_bytes() == before


def test_generation_imports_where_z3_is_not_installed() -> None:
    """A Ray worker (or the GPU machine's bare image) may lack z3: only the verifier needs it."""
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'z3':\n"
        "            raise ImportError('z3 is not installed')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import taso.generate, taso.rules, taso.search\n"
    )
    r = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
