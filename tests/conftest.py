"""Shared fixtures: real models on disk, and the `subst` command run as a user runs it."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import onnx
import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

import build as zoo  # noqa: E402, F401  (models/build.py: the zoo's builders, re-exported to tests)

T = TypeVar("T")

FULL = os.environ.get("SUBST_FULL") == "1"
"""`make test` (CI) runs the slow checks (`@pytest.mark.slow`) in a bounded form that keeps the suite within
its 12 minutes on 2 cores; SUBST_FULL=1 (`make test-full`) runs each of them whole."""


settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("full", print_blob=True)
settings.load_profile("full" if FULL else "ci")
"""`make test` draws the same property-test cases on every run, so a red CI is a change's fault, not a new
draw's; `make test-full` draws fresh ones each run to find new failures (each found one becomes an `@example`)."""


def bounded(cases: Sequence[T], ci: int) -> list[T]:
    """A slow check's cases: all of them with SUBST_FULL=1, else the first ``ci`` (put the telling ones first)."""
    return list(cases) if FULL else list(cases)[:ci]


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache folder of the session's own (XDG_CACHE_HOME, which the commands a test runs inherit): costs measured
    under a test suite's load must not become the user's cached costs, nor may a test see what an earlier run
    cached. Each session checks the specs once more (about 12 s, `specs_checked`), and parses the store's rules
    again where the shipped form is stale (about 16 s)."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("cache")
        mp.setenv("XDG_CACHE_HOME", str(path))
        yield path


@pytest.fixture(scope="session")
def specs_checked(user_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The shipped specs' passed check (`taso.verify.run.require_sound`, ~11 s of z3), made once for the whole
    session: the first worker to need it checks under a lock and leaves the record beside the workers' temp
    folders, the others read it; either way it is filed in the session's cache too. Returns the record's file
    name (in the cache's ``specs-checked``) and its text."""
    from taso.rules import SPECS_DIR
    from taso.verify import load_specs
    from taso.verify.run import _passed_marker, require_sound

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # pytest-N/, above popen-gw*/
    with pytest.MonkeyPatch.context() as mp, (shared / "specs-checked.lock").open("w") as lock:
        mp.setenv("XDG_CACHE_HOME", str(user_cache))
        fcntl.flock(lock, fcntl.LOCK_EX)
        specs = load_specs(SPECS_DIR)
        marker, record = _passed_marker(specs)
        done = shared / f"specs-checked-{marker.name}"
        if done.exists() and done.read_text() == record:
            marker.write_text(record)
        else:
            require_sound(specs)
            done.write_text(record)
    return marker.name, record


@pytest.fixture(scope="session", autouse=True)
def _workers_share_the_spec_check(request: pytest.FixtureRequest) -> None:
    """Under xdist (`make test`) every worker runs some verify, and each checked the shipped specs for itself:
    the session checks them once, before the first test (`specs_checked`); a run of one process checks them
    where a test first needs it. Specs that fail it fail the tests that verify, not every test."""
    from taso.errors import CheckFailed

    if os.environ.get("PYTEST_XDIST_WORKER"):
        with contextlib.suppress(CheckFailed):
            request.getfixturevalue("specs_checked")


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, specs_checked: tuple[str, str]) -> Path:
    """A cache folder of the test's own (``tmp_path/cache``, as XDG_CACHE_HOME): no cost, verdict or rule form
    another test cached is in it; only the shipped specs' passed check is (`specs_checked`), which a verify
    would otherwise make again. A test of the spec check's record sets a bare folder instead."""
    from taso.cachedir import cache_folder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name, record = specs_checked
    (cache_folder("specs-checked") / name).write_text(record)
    return tmp_path / "cache"


@pytest.fixture(scope="session", autouse=True)
def user_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A config folder of the session's own (XDG_CONFIG_HOME): the trust key the tests' proofs are signed with
    (`taso.rules.signing`) is made there, never in the user's, and a test never trusts the user's signatures."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("config")
        mp.setenv("XDG_CONFIG_HOME", str(path))
        yield path


@pytest.fixture(scope="session")
def bert_path() -> Path:
    return ROOT / "models" / "bert_tiny.onnx"


@pytest.fixture
def empty_store(tmp_path: Path) -> Path:
    """A store with no rules: for tests of import, export and the check, which need no search."""
    from taso.rules import store

    path = tmp_path / "empty.db"
    store.create(path)
    return path


@pytest.fixture
def save(tmp_path: Path):
    """Write a ModelProto to tmp_path/<name> and return the path."""

    def _save(model: onnx.ModelProto, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        onnx.save_model(model, str(path))
        return path

    return _save


def write_graph(graph: onnx.GraphProto, path: Path, opset: int = 17) -> Path:
    """``graph`` as an opset-``opset`` model (IR 8) at ``path``: the one way tests write the graphs they build."""
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


def subst_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process: for what only a process shows (its own start-up, signals, forked or Ray
    workers, onnxruntime's process-wide logger); `subst` runs the rest in this process."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args)], capture_output=True, text=True, cwd=cwd or ROOT
    )


def subst(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI's entry point (`cli.main.main`) in this process as a user's shell would: its exit code, and
    all it writes to file descriptors 1 and 2 (onnxruntime's C++ lines too), warnings shown as Python shows
    them by default. A fresh process per call cost about 0.6 s of CPU in imports alone, over 150 calls."""
    from cli.main import main

    argv = [str(a) for a in args]
    sigterm = signal.getsignal(signal.SIGTERM)  # main installs its own handler
    here = Path.cwd()
    with _fds_captured() as (out, err), warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)  # Python's default filters, which pytest's replace
        os.chdir(cwd or ROOT)
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            os.chdir(here)
            signal.signal(signal.SIGTERM, sigterm)
    return subprocess.CompletedProcess(["subst", *argv], code, out.getvalue(), err.getvalue())


@contextmanager
def _fds_captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """File descriptors 1 and 2, and sys.stdout and sys.stderr written through to them, sent to temp files for
    the block; their text is in the two StringIOs after it."""
    texts = io.StringIO(), io.StringIO()
    streams = sys.stdout, sys.stderr
    for s in streams:
        s.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    with tempfile.TemporaryFile() as f1, tempfile.TemporaryFile() as f2:
        try:
            for fd, f in ((1, f1), (2, f2)):
                os.dup2(f.fileno(), fd)
            sys.stdout, sys.stderr = (
                io.TextIOWrapper(open(fd, "wb", closefd=False), encoding="utf-8", write_through=True)  # noqa: SIM115
                for fd in (1, 2)
            )
            yield texts
        finally:
            for s in (sys.stdout, sys.stderr):
                s.flush()
            sys.stdout, sys.stderr = streams
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)
        for f, text in zip((f1, f2), texts):
            f.seek(0)
            text.write(io.TextIOWrapper(f, encoding="utf-8").read())  # newlines as subprocess's text=True reads


def prove_into(path: Path, rules) -> Path:  # noqa: ANN001 (iterable of taso.rules.Rule)
    """A new store at ``path`` holding ``rules``; those marked proved are proved for real by the verifier (a
    status alone is not trusted by optimize), and must be."""
    from dataclasses import replace

    from taso.rules import SPECS_DIR, store
    from taso.verify import load_specs, verify_rows

    db = store.create(path)
    rules = list(rules)
    store.add_rules(db, [replace(r, status="candidate") if r.status == "proved" else r for r in rules])
    rows = [row for row, r in zip(db["rules"].rows_where(order_by="id"), rules) if r.status == "proved"]
    summary = verify_rows(db, rows, load_specs(SPECS_DIR))
    assert summary.counts["proved"] == len(rows), summary.lines()
    return path


@pytest.fixture(scope="module")
def cpu():  # noqa: ANN201 (taso.cost.profiler.Device; taso is imported lazily here, as in prove_into)
    """The CPU device, as the cost model sees it."""
    from taso.cost import profiler

    return profiler.pick_device("cpu")


@pytest.fixture(scope="module")
def calibration(cpu):  # noqa: ANN001, ANN201 (taso.cost.profiler.Device -> taso.cost.calibration.Calibration)
    """The CPU measured once per test module: unit estimates at this machine's speeds."""
    from taso.cost.calibration import calibrate

    return calibrate(cpu)


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many models each unit measurement (`taso.cost.measure`) times side by side, one entry per call of
    `time_models`."""
    from taso.cost import measure

    counts: list[int] = []
    timing = measure.time_models

    def counting(models, *args, **kwargs):  # noqa: ANN001, ANN202 (time_models' own signature)
        counts.append(len(models))
        return timing(models, *args, **kwargs)

    monkeypatch.setattr(measure, "time_models", counting)
    return counts
