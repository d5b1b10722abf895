"""Whether a model can run as a CUDA graph at the given dims, and what stands in the way where it cannot.

onnxruntime's CUDA provider captures a run as a CUDA graph (`enable_cuda_graph`) only where the nodes run on the
CUDA provider (small shape computations may stay on the CPU), no Memcpy node copies between host and device, and
shapes stay fixed from run to run. Both answers come from onnxruntime itself: whether it captures, by trying and
seeing it replay (it may turn capture off itself and run as without, saying so only in its log), and
where each node runs, from the profile of one run, which names each kernel's provider. A list of ops kept here
would drift from onnxruntime's own partitioning.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping

import numpy as np

from taso.cost.profiler import CPU, CUDA, Device, Mode, Session, bound_session, session_options
from taso.ir import Graph

CAPTURE = Mode(cuda_graph=True)
"""How a run is timed under CUDA graph capture (`taso.cost.profiler.Mode`)."""
_KERNEL = "_kernel_time"
"""How onnxruntime's profile names a node's kernel run (``<node>_kernel_time``)."""


def placement(model: bytes | str, feeds: Mapping[str, np.ndarray], device: Device) -> list[tuple[str, str, str]]:
    """(node name, op, provider) of each kernel one run of ``model`` on ``device`` ran, from onnxruntime's
    profile of that run: the nodes as onnxruntime placed them after its own rewrites, Memcpy nodes included."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = session_options()
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "placement")
        providers = [CUDA, CPU] if device.is_cuda else [CPU]
        sess = ort.InferenceSession(model, opts, providers=providers)
        sess.run(None, dict(feeds))
        with open(sess.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    seen: dict[str, tuple[str, str, str]] = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "Node" and "provider" in args and e.get("name", "").endswith(_KERNEL):
            name = e["name"].removesuffix(_KERNEL)
            seen.setdefault(name, (name, args.get("op_name", "?"), args["provider"]))
    return list(seen.values())


def blockers(
    model: bytes | str, graph: Graph, feeds: Mapping[str, np.ndarray], device: Device, dims: Mapping[str, int]
) -> list[str]:
    """What stands in the way of capturing ``model`` (``graph`` is its IR) as a CUDA graph at ``dims``, one
    phrase each; empty where onnxruntime captures a run of it and replays it (`probe`)."""
    return probe(model, graph, feeds, device, dims)[0]


def probe(
    model: bytes | str, graph: Graph, feeds: Mapping[str, np.ndarray], device: Device, dims: Mapping[str, int]
) -> tuple[list[str], tuple[Session, Session] | None]:
    """`blockers`, and where there are none, the session under capture that replayed, left open to be timed
    without capture and with it (`replaying`): a session of its own for each cost two more session starts
    (ghostnet_100's capture estimate on the H200, three sessions: 10.3 s). Whether it can is onnxruntime's
    answer (it lets small shape computations stay on the CPU); where it cannot, or off a GPU, what prevents it:
    each node it runs on another provider than CUDA's, each Memcpy node, each input or output whose shape the
    dims leave open (a captured graph replays one shape), else onnxruntime's own refusal."""
    if device.is_cuda:
        refusal, sessions = _refusal(model, feeds, device)
        if refusal is None:
            return [], sessions
    found = [
        f"{name} ({op}) on {provider}" if provider != CUDA else f"{name} ({op}) copies between host and device"
        for name, op, provider in placement(model, feeds, device)
        if provider != CUDA or op.startswith("Memcpy")
    ]
    for v in (*graph.inputs, *graph.outputs):
        t = graph.types.get(v)
        if t is None or not t.with_dims(dims).is_static:
            found.append(f"{v}: shape {t.with_dims(dims) if t else 'unknown'} not fixed by the dims")
    return found or ([f"onnxruntime refused capture: {refusal}"] if device.is_cuda else []), None


def _refusal(
    model: bytes | str, feeds: Mapping[str, np.ndarray], device: Device
) -> tuple[str | None, tuple[Session, Session] | None]:
    """onnxruntime's error where a session of ``model`` under capture cannot be opened, or its runs (a regular
    one, the capture, replays) fail; `NOT_REPLAYED` where it runs them all without replaying a captured graph;
    None, and the session that replayed (`replaying`), where it captures."""
    try:
        replayed, sessions = replaying(model, feeds, device)
    except Exception as e:  # onnxruntime raises its own exception types
        return (str(e).splitlines()[0][:200] if str(e) else type(e).__name__), None
    return (None, sessions) if replayed else (NOT_REPLAYED, None)


NOT_REPLAYED = "it ran every run itself, no captured graph replayed (capture turned off, as onnxruntime may do)"
"""What `blockers` says where onnxruntime opened a session under capture and ran it without: it may turn capture
off itself, with a line in its log (which subst keeps quiet), and a report must not claim capture then."""
REPLAYS = 8
"""Runs `replays` makes of a session under capture after opening it."""


def replays(model: bytes | str, feeds: Mapping[str, np.ndarray], device: Device) -> bool:
    """Whether onnxruntime replays a captured graph of ``model`` (`replaying`)."""
    return replaying(model, feeds, device)[0]


SKIP = "-1"
"""The ``gpu_graph_id`` a run of a session under capture neither captures nor replays with: each kernel launched,
as without capture (onnxruntime's kCudaGraphAnnotationSkip). Given, it also spares onnxruntime's Python the
look-up that raises inside where RunOptions lack one (`taso.cost.profiler.runner`)."""


def replaying(
    model: bytes | str, feeds: Mapping[str, np.ndarray], device: Device
) -> tuple[bool, tuple[Session, Session]]:
    """Whether onnxruntime replays a captured graph of ``model``, and its session, its profiling ended, set up to
    be timed as `taso.cost.profiler.time_sessions` times: a run without capture (`SKIP`), and a run replaying
    the graph. A run it replays launches the graph, no kernel of its own, so it adds no kernel to the session's
    profile; where every run adds each kernel (as on the CPU, or where capture is off whatever was asked),
    nothing was replayed. Both timed in one session, the time without is that of the outputs bound once, as a
    captured graph needs them, where a plain run allocates its own: the arena's microseconds."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = session_options(CAPTURE)
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "capture")
        if device.is_cuda:
            sess, binding = bound_session(model, feeds, CAPTURE, opts)
            skip = ort.RunOptions()
            skip.add_run_config_entry("gpu_graph_id", SKIP)
            replay: Session = (lambda: sess.run_with_iobinding(binding)), binding.synchronize_outputs
            launch: Session = (lambda: sess.run_with_iobinding(binding, skip)), binding.synchronize_outputs
            calls = REPLAYS + 1  # it ran once to bind its outputs
        else:
            sess, feed = ort.InferenceSession(model, opts, providers=[CPU]), dict(feeds)
            replay = launch = (lambda: sess.run(None, feed)), lambda: None
            calls = REPLAYS
        for _ in range(REPLAYS):
            replay[0]()
        with open(sess.end_profiling(), encoding="utf-8") as f:  # profiling stops: later runs are as timed
            kernels = [
                e["name"] for e in json.load(f) if e.get("cat") == "Node" and e.get("name", "").endswith(_KERNEL)
            ]
    return len(kernels) < len(set(kernels)) * calls, (launch, replay)
