"""Whether a model can run as a CUDA graph at the given dims, and what stands in the way where it cannot.

onnxruntime's CUDA provider captures a run as a CUDA graph (`enable_cuda_graph`) only where every node runs on
the CUDA provider, no Memcpy node copies between host and device, and shapes stay fixed from run to run. Where a
node runs is onnxruntime's decision, made when a session partitions the graph, so it is read from onnxruntime
itself: the profile of one run names each kernel's provider. A list of ops kept here would drift from it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping

import numpy as np

from taso.cost.profiler import CPU, CUDA, Device, Mode, _options, _runner
from taso.ir import Graph

CAPTURE = Mode(cuda_graph=True)
"""How a run is timed under CUDA graph capture (`taso.cost.profiler.Mode`)."""


def placement(model: bytes | str, feeds: Mapping[str, np.ndarray], device: Device) -> list[tuple[str, str, str]]:
    """(node name, op, provider) of each kernel one run of ``model`` on ``device`` ran, from onnxruntime's
    profile of that run: the nodes as onnxruntime placed them after its own rewrites, Memcpy nodes included."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = _options()
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
        if e.get("cat") == "Node" and "provider" in args and e.get("name", "").endswith("_kernel_time"):
            name = e["name"].removesuffix("_kernel_time")
            seen.setdefault(name, (name, args.get("op_name", "?"), args["provider"]))
    return list(seen.values())


def blockers(
    model: bytes | str, graph: Graph, feeds: Mapping[str, np.ndarray], device: Device, dims: Mapping[str, int]
) -> list[str]:
    """What stands in the way of capturing ``model`` (``graph`` is its IR) as a CUDA graph at ``dims``, one
    phrase each: a node onnxruntime runs on another provider than CUDA's, a Memcpy node, an input or output
    whose shape the dims leave open (a captured graph replays one shape); and where none of these is found on
    a GPU, onnxruntime's own refusal to capture, if it refuses. Empty: capturable."""
    found = [
        f"{name} ({op}) on {provider}" if provider != CUDA else f"{name} ({op}) copies between host and device"
        for name, op, provider in placement(model, feeds, device)
        if provider != CUDA or op.startswith("Memcpy")
    ]
    for v in (*graph.inputs, *graph.outputs):
        t = graph.types.get(v)
        if t is None or not t.with_dims(dims).is_static:
            found.append(f"{v}: shape {t.with_dims(dims) if t else 'unknown'} not fixed by the dims")
    if found or not device.is_cuda:
        return found
    try:
        once, finish = _runner(model, feeds, device, CAPTURE)  # the first run captures, the next replays
        once()
        finish()
    except Exception as e:  # onnxruntime raises its own exception types
        return [f"onnxruntime refused capture: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"]
    return []
