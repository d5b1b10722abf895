"""Timing ONNX models in onnxruntime on the target device, and naming that device.

Latency is measured end to end around `run` (CUDA: inputs and outputs bound on the GPU with io_binding, so
host copies stay out; ORT synchronises its stream at the end of each run), after warm-up runs that take
cuDNN's algorithm search out of the numbers; the median of many samples is kept. Models compared with each
other are timed side by side, sample by sample, beside a tiny reference run that tells when the host was slow
(`time_models`).
"""

from __future__ import annotations

import itertools
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

import numpy as np

from taso import onnx as onnx_io
from taso.errors import BadInput
from taso.execute import ortlog
from taso.ir import Graph, Node, TensorType

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class Device:
    """What a measurement is valid for: costs are cached under `key`."""

    provider: str
    name: str
    driver: str
    ort_version: str

    @property
    def key(self) -> str:
        return f"{self.provider}|{self.name}|{self.driver}|ort-{self.ort_version}"

    @property
    def identity(self) -> str:
        """The hardware behind the provider, which a shipped cost table is matched by (`taso.cost.prior_for`):
        a driver or onnxruntime upgrade moves costs little next to measuring them again."""
        return f"{self.provider}|{self.name}"

    @property
    def is_cuda(self) -> bool:
        return self.provider == CUDA


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} x{os.cpu_count()}"


def gpu_query(fields: str) -> list[str] | None:
    """nvidia-smi's values of ``fields`` (its comma-separated query names) for GPU 0; None where it cannot say."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        return [part.strip() for part in out.splitlines()[0].split(",")]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def _gpu_name() -> tuple[str, str]:
    values = gpu_query("name,driver_version")
    if values is None or len(values) != 2:
        return "unknown GPU", "unknown driver"
    return values[0], values[1]


@cache
def _reference() -> tuple[bytes, dict[str, np.ndarray]]:
    """One Relu over four floats: running it costs the host's overhead of a run and nothing else."""
    t = TensorType("float32", (4,))
    g = Graph((Node("Relu", ("x",), ("y",)),), ("x",), ("y",), {"x": t, "y": t})
    return onnx_io.model_bytes(g), {"x": np.ones(4, np.float32)}


@cache
def cuda_works() -> bool:
    """True when onnxruntime's CUDA provider is installed and actually loads (a session runs on it)."""
    import onnxruntime as ort

    if CUDA not in ort.get_available_providers():
        return False
    try:
        sess = ort.InferenceSession(_reference()[0], session_options(), providers=[CUDA])
        return CUDA in sess.get_providers()
    except Exception:  # a missing CUDA/cuDNN library shows up here
        return False


def pick_device(choice: str = "auto") -> Device:
    """``auto``: CUDA when its provider loads, else CPU; ``cuda`` refuses if it does not load."""
    import onnxruntime as ort

    if choice not in ("auto", "cuda", "cpu"):
        raise BadInput(f"unknown device {choice!r}; use auto, cuda or cpu")
    use_cuda = choice == "cuda" or (choice == "auto" and cuda_works())
    if choice == "cuda" and not cuda_works():
        raise BadInput("--device cuda: onnxruntime's CUDA provider is not available here (install onnxruntime-gpu)")
    if use_cuda:
        name, driver = _gpu_name()
        return Device(CUDA, name, driver, ort.__version__)
    return Device(CPU, _cpu_name(), platform.system(), ort.__version__)


@dataclass(frozen=True)
class Mode:
    """How a session is set up and what its timing sees. The default times a run as a user's `run` with
    io_binding sees it; the others take it apart, to find where time and noise come from (bench_noise.py)."""

    conv_algo_search: str = "EXHAUSTIVE"
    """cuDNN's algorithm choice (onnxruntime's default EXHAUSTIVE times candidates when the session starts)."""
    threads: int = 0
    """Intra-op threads; 0: onnxruntime's default, one per core."""
    preallocate: bool = False
    """Bind outputs to device buffers allocated once, instead of allocating them in every run."""
    cuda_graph: bool = False
    """Capture the run as a CUDA graph and replay it: device time without host launches (CUDA only)."""
    host_only: bool = False
    """Return from each run without waiting for the device: the host's share (CUDA only)."""
    warmup_s: float = 0.0
    """Keep warming up at least this long, so the GPU's clocks have ramped up before the first sample."""

    @property
    def tag(self) -> str:
        """The fields that differ from the default, e.g. ``host_only=True`` ("" for the default)."""
        return ",".join(
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(DEFAULT_MODE, f.name)
        )


DEFAULT_MODE = Mode()


def session_options(mode: Mode = DEFAULT_MODE):  # noqa: ANN202 (onnxruntime type)
    """Session options for ``mode``: onnxruntime's defaults at ENABLE_ALL, as users run a model, except that
    idle intra-op threads sleep (see `time_models`)."""
    import onnxruntime as ort

    opts = ortlog.session_options()
    opts.intra_op_num_threads = mode.threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # see `time_models`
    return opts


def optimized_ops(model: bytes | str, cuda: bool, layout: bool = True) -> dict[str, int]:
    """The op census of ``model`` as onnxruntime optimizes it (ENABLE_ALL) for the CUDA or the CPU provider:
    which kernels (and views) a run of it launches. ``layout`` False stops at ENABLE_EXTENDED, its fusions
    without the layout transforms: the CPU provider's NCHWc puts a reorder at each edge of a graph, which
    a unit cut from a model would show at every cut, the model only at its own. Its graph alone: the weights
    are neither prepacked for kernels (after the graph is optimized) nor read back, only written beside it
    (`taso.cost.measure.fused_when_read` of the units BERT-base's cold run asks of, replayed: 0.88 s, then 0.57 s;
    mobilenet_v2's, whose search units carry up to 33 MB of weights: 2.9 s, then 2.6 s; the same census of five
    corpus models at either level)."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = session_options()
        if not layout:
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.add_session_config_entry("session.disable_prepacking", "1")
        opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
        opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model, opts, providers=[CUDA, CPU] if cuda else [CPU])
        return onnx_io.op_census(opts.optimized_model_filepath)


@dataclass(frozen=True)
class Timing:
    median_ms: float
    samples: int
    spread_ms: float
    """Interquartile range of the samples: a difference below it is noise."""
    values: tuple[float, ...] = ()
    """Each sample (ms per run), in the order taken; sample k of models timed together is a pair."""
    reference_ms: float | None = None
    """The reference run's median latency (`_reference`) in the same measurement: how quick the host was."""
    attempts: int = 1
    """Measurements taken: more than one when the first landed in a slow spell of the host."""


def time_model(
    model: bytes | str,
    feeds: Mapping[str, np.ndarray],
    device: Device,
    warmup: int = 10,
    samples: int = 30,
    min_sample_s: float = 0.002,
    mode: Mode = DEFAULT_MODE,
    budget_s: float | None = None,
) -> Timing:
    """Median latency of one run of ``model`` on ``device``; each sample averages enough runs to last
    ``min_sample_s``, so timer resolution does not matter for microsecond kernels."""
    return time_models(
        [(model, feeds)], device, mode, warmup=warmup, samples=samples, min_sample_s=min_sample_s, budget_s=budget_s
    )[0]


MIN_SAMPLES = 7
"""Samples a time budget (`time_models`'s ``budget_s``) leaves at least: a median of fewer moves with one outlier."""
MIN_WARMUP = 2
"""Warm-up runs a time budget leaves at least: the first run of a session allocates (and on CUDA, searches cuDNN's
algorithms), the second shows the steady state."""

SLOW_SPELL = 1.3
"""A measurement whose reference run was this much slower than the quickest seen was taken in a slow spell."""


def in_quick_mode(timings: Sequence[Timing], quick_reference_ms: float) -> list[float]:
    """The medians of the ``timings`` taken while the host ran in its quick mode (reference within
    `SLOW_SPELL` of ``quick_reference_ms``): what a prediction at the quick host is compared with."""
    return [t.median_ms for t in timings if (t.reference_ms or 0.0) <= SLOW_SPELL * quick_reference_ms]


ATTEMPTS = 3
"""Measurements taken at most, when each lands in a slow spell (the one with the quickest reference is kept)."""
_quickest: dict[str, float] = {}
"""Per device: the quickest reference run this process has measured."""


Session = tuple[Callable[[], None], Callable[[], None]]
"""A model's session set up to run (`runner`): one run, and what waits for the device to finish it."""


def open_sessions(
    models: Sequence[tuple[bytes | str, Mapping[str, np.ndarray]]],
    device: Device,
    mode: Mode = DEFAULT_MODE,
    modes: Sequence[Mode] | None = None,
) -> list[Session]:
    """A session of each model (its file or bytes, and the feeds it runs on), in order, set up as ``mode`` says
    or, with ``modes``, each as its own says (a model CUDA graphs cannot capture timed beside one they can): what
    `time_sessions` times, as often as it is asked to."""
    return [runner(model, feeds, device, m) for (model, feeds), m in zip(models, modes or [mode] * len(models))]


def time_models(
    models: Sequence[tuple[bytes | str, Mapping[str, np.ndarray]]],
    device: Device,
    mode: Mode = DEFAULT_MODE,
    **timing: Any,
) -> list[Timing]:
    """Several models timed side by side in fresh sessions: `time_sessions` of `open_sessions`, ``timing`` its
    keywords (``warmup``, ``samples``, ``min_sample_s``, ``budget_s``, ``primed``)."""
    return time_sessions(open_sessions(models, device, mode), device, mode=mode, **timing)


def time_sessions(
    sessions: Sequence[Session],
    device: Device,
    warmup: int = 10,
    samples: int = 30,
    min_sample_s: float = 0.002,
    mode: Mode = DEFAULT_MODE,
    budget_s: float | None = None,
    primed: bool = False,
) -> list[Timing]:
    """Several models timed side by side: every session is warmed up first, then sample k of every
    model is taken in turn (`visiting_order`), milliseconds apart, so drift hits each alike. With ``budget_s``
    the warm-up and the samples each take about that many seconds at most (the sample count read from the
    warm-up's last run, never under `MIN_SAMPLES`; no attempt starts that would overrun it): models whose runs take ms are
    timed in fewer runs (ResNet-50 on the 2-core CPU, 126 ms a run: 60 runs of it and of its rewrite in each
    of the end-to-end guard's 5 rounds took over a minute).

    At batch 1 a GPU run is bound by the host thread that launches its kernels, and the host's speed is not
    steady on a shared machine: on the GPU host of bench_noise.py (bench/results/2026-11-22/noise-h100-modes.json) the cores ran one loop up to 1.8x apart,
    switching between quick and slow within seconds, and whole measurements landed in slow spells. So a tiny
    reference model (`_reference`) is timed in turn with the others; when it ran more than `SLOW_SPELL` times slower
    than the quickest reference this process has seen, the samples are taken again (up to `ATTEMPTS` times,
    after a pause) and the attempt with the quickest reference is kept. The sessions' idle threads sleep
    instead of spinning (`session_options`): spinning, one session's threads took the cores from the next (on 2 cores
    a model timed at half its latency beside itself), and a model must time the same alone as beside others. For the same reason, with ``primed`` each sample of a
    model follows an untimed run of it: it finds the caches as its own run left them, whatever ran between its
    samples (units of ResNet-50, each with megabytes of weights of its own, timed eight side by side)."""
    runners = [*sessions, _reference_runner(device, mode)]
    share = budget_s / len(runners) if budget_s is not None else float("inf")
    warmed = [
        _warm_up(once, finish, warmup, min_sample_s / (4 if i == len(sessions) else 1), mode.warmup_s, share)
        for i, (once, finish) in enumerate(runners)
    ]  # the reference's samples are short: they only tell how quick the host was
    per_sample = [runs for runs, _ in warmed]
    if budget_s is not None:
        sample_s = sum((runs + primed) * single for runs, single in warmed)
        samples = max(min(samples, MIN_SAMPLES), min(samples, int(budget_s / sample_s)))
    best: list[list[float]] | None = None
    start = time.perf_counter()
    for attempts in range(1, ATTEMPTS + 1):
        if attempts > 1:
            time.sleep(0.05 * attempts)
        values = _side_by_side(runners, per_sample, samples, primed)
        if best is None or statistics.median(values[-1]) < statistics.median(best[-1]):
            best = values
        reference = statistics.median(best[-1])
        quickest = _quickest[device.key] = min(_quickest.get(device.key, reference), reference)
        spent = time.perf_counter() - start
        if reference <= SLOW_SPELL * quickest or spent * (attempts + 1) / attempts > (
            budget_s if budget_s is not None else float("inf")
        ):
            break  # within a budget no attempt starts that would overrun it: on a loaded host every one is slow
    assert best is not None
    return [
        replace(_timing(v, samples * n), reference_ms=reference, attempts=attempts)
        for v, n in zip(best[:-1], per_sample)
    ]


@cache
def _reference_runner(device: Device, mode: Mode) -> Session:
    """One session of `_reference` per device and mode, kept: it is timed beside every measurement."""
    return runner(*_reference(), device, mode)


def _side_by_side(
    runners: Sequence[Session],
    per_sample: Sequence[int],
    samples: int,
    primed: bool = False,
) -> list[list[float]]:
    values: list[list[float]] = [[] for _ in runners]
    for k in range(samples):
        for i in visiting_order(len(runners), k):
            once, finish = runners[i]
            if primed:
                once()
                finish()
            t0 = time.perf_counter()
            for _ in range(per_sample[i]):
                once()
            values[i].append((time.perf_counter() - t0) * 1000 / per_sample[i])
            finish()  # outside the timed span: a host-only sample leaves the device's queue drained
    return values


def _warm_up(
    once: Callable[[], None],
    finish: Callable[[], None],
    warmup: int,
    min_sample_s: float,
    warmup_s: float,
    budget_s: float = float("inf"),
) -> tuple[int, float]:
    """Run ``warmup`` times, or `MIN_WARMUP` times once ``budget_s`` has passed (and at least ``warmup_s``);
    return how many runs make one sample last ``min_sample_s``, and the seconds of one run."""
    t0 = time.perf_counter()
    for i in itertools.count():
        once()
        elapsed = time.perf_counter() - t0
        if (i + 1 >= warmup or (i + 1 >= MIN_WARMUP and elapsed >= budget_s)) and elapsed >= warmup_s:
            break
    finish()
    t0 = time.perf_counter()
    once()
    finish()
    single = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(1000, int(min_sample_s / single))), single


def _timing(values: list[float], runs: int) -> Timing:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return Timing(statistics.median(values), runs, q[2] - q[0], tuple(values))


def visiting_order(variants: int, round_: int) -> list[int]:
    """Round ``round_``'s order: forward and backward in turn, so that over each pair of rounds a drift hits
    every variant alike (the ABBA design), and rotated every pair, so that no variant always goes first. With
    one fixed order, unchanged models measured up to 5 % (GPT-2: 20 %) off their originals on the H200."""
    order = [(i + round_ // 2) % variants for i in range(variants)]
    return order[::-1] if round_ % 2 else order


def runner(model: bytes | str, feeds: Mapping[str, np.ndarray], device: Device, mode: Mode) -> Session:
    """One run of ``model`` set up as ``mode`` says, and what waits for the device to finish."""
    import onnxruntime as ort

    if not device.is_cuda:
        sess = ort.InferenceSession(model, session_options(mode), providers=[CPU])
        names, feed = [o.name for o in sess.get_outputs()], dict(feeds)
        return lambda: sess.run(names, feed), lambda: None
    sess, binding = bound_session(model, feeds, mode, session_options(mode))
    options = None  # as a user runs it: with RunOptions, onnxruntime 1.31's Python asks them for a gpu_graph_id
    if mode.host_only:  # every run, and one it lacks raises inside (73,726 runs of mobilenet_v2's cold H200 run: 4.4 s)
        options = ort.RunOptions()
        options.add_run_config_entry("disable_synchronize_execution_providers", "1")
    return lambda: sess.run_with_iobinding(binding, options), binding.synchronize_outputs


def bound_session(model: bytes | str, feeds: Mapping[str, np.ndarray], mode: Mode, opts: Any) -> tuple[Any, Any]:
    """A CUDA session of ``model`` with ``opts`` (its session options) set up as ``mode`` says, and its io_binding:
    inputs on the GPU, outputs bound there (to the buffers of a first run, where ``mode`` keeps them)."""
    import onnxruntime as ort

    cuda = {"device_id": 0, "cudnn_conv_algo_search": mode.conv_algo_search}
    if mode.cuda_graph:
        cuda["enable_cuda_graph"] = "1"
    sess = ort.InferenceSession(model, opts, providers=[(CUDA, cuda), CPU])
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cuda")
    if mode.preallocate or mode.cuda_graph:  # a captured graph writes to the addresses it was captured with
        sess.run_with_iobinding(binding)
        for out, value in zip(sess.get_outputs(), binding.get_outputs()):
            binding.bind_ortvalue_output(out.name, value)
    return sess, binding
