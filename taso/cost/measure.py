"""Measuring units in onnxruntime: a unit's marginal cost in a stream of kernels (one copy against `COPIES`
copies), many units side by side in one `time_models` call, and a unit onnxruntime fuses only when its outputs
are read on timed that way.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from taso import onnx as onnx_io
from taso.cost.profiler import DEFAULT_MODE, Device, Mode, Timing, optimized_ops, time_models
from taso.cost.unit import graph_digest
from taso.execute import check
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs


def shape_follows_values(ug: Graph) -> bool:
    """Whether the shapes a unit computes follow the values of an integer activation it reads (an Expand, Reshape
    or ConstantOfShape to a shape the model computes at run time), so that no drawn values time it at the model's
    shapes: onnxruntime refuses most draws and times the rest at other shapes (Swin-T TorchScript: 97 such
    units, each a failed session on every cold run, 4-5 s of its 35 s on the H100). Shape inference of the
    unit alone says so: a value it computes (an Expand's, inside an Expand+Reshape whose output is static)
    whose shape the model's inference, which saw the values, knew is unknown."""
    if not any(np.dtype(ug.types[v].dtype).kind in "iu" for v in ug.inputs):
        return False  # float activations steer no shape
    if any(n.domain not in ("", "ai.onnx") for n in ug.nodes):
        return False  # shape inference knows nothing of custom domains: measured as before
    try:
        alone = onnx_io.reinfer(ug, outputs=True)
    except Exception:  # a unit shape inference refuses is one onnxruntime may still run: measured as before
        return False
    computed = [o for n in ug.nodes for o in n.outputs if o]
    return any(not ((t := alone.types.get(v)) and t.is_static) for v in computed if ug.types[v].is_static)


def replicate(ug: Graph, copies: int) -> Graph | None:
    """``copies`` independent copies of a unit graph, each reading its own inputs (so onnxruntime's common
    subexpression elimination cannot merge them) and sharing weights. None when a node has subgraphs that
    name outer values, which renaming would break."""
    if any(n.implicit for n in ug.nodes):
        return None
    shared = set(ug.weights)
    nodes, inputs, outputs, types = [], [], [], {w: ug.types[w] for w in ug.weights if w in ug.types}
    for c in range(copies):
        rename = {v: v if v in shared else f"{v}#{c}" for v in ug.values()}
        nodes += [
            replace(
                n,
                inputs=tuple(rename.get(i, i) for i in n.inputs),
                outputs=tuple(rename[o] if o else o for o in n.outputs),
                name="",
            )
            for n in ug.nodes
        ]
        inputs += [rename[i] for i in ug.inputs]
        outputs += [rename[o] for o in ug.outputs]
        types.update({rename[v]: t for v, t in ug.types.items() if v in rename})
    return Graph(tuple(nodes), tuple(inputs), tuple(outputs), types, ug.weights, dict(ug.data), ug.meta)


COPIES = 5
"""Copies of a unit timed together: the marginal cost of one in a stream of kernels, as in a whole model,
where launches overlap with GPU work (timed alone, every small kernel would pay launch and sync in full)."""


MEASURE_BUDGET_S = 0.5
"""Seconds a measurement's warm-up, and its samples, may each take (`taso.profiler.time_models`'s budget): a
unit of milliseconds is timed in fewer runs. Its kernels take most of the time, so its median settles in a few."""
MEASURE_BATCH = 8
"""Units measured side by side in one measurement (`measure_marginals`), sharing its budget: one by one, every
unit spent the whole budget (ResNet-50 on the loaded 2-core CPU: 71 measurements in 35 s, two thirds of a cold
run; BERT-base's 41 units, each settled twice more, 40 s)."""
ALONE_ABOVE = 20.0
"""A unit estimated to take this many times a run's fixed overhead is timed as one copy, that overhead taken
off, not beside `COPIES` copies: its launch is a small part of it, and the copies cost five more runs of it
(ResNet-50 on the 2-core CPU: 6 units a minute)."""


def measure_marginal(
    ug: Graph, device: Device, run_ms: float, mode: Mode = DEFAULT_MODE, copies: int = COPIES
) -> tuple[float, Timing]:
    """What one more copy of the unit adds to a run: the median over paired samples (one copy, then ``copies``
    copies, timed side by side) of the difference per extra copy, as measured, with the timing whose reference
    run tells how quick the host was; with ``copies`` 1 (or a unit that cannot be replicated), one copy's
    latency less ``run_ms``. Where onnxruntime fuses the unit only when its outputs are read on
    (`fused_when_read`), the unit is timed `read_on` and the sinks' own cost, timed beside it, is taken off."""
    return measure_marginals([(ug, copies)], device, run_ms, mode)[0]


def measure_marginals(
    units: Sequence[tuple[Graph, int]], device: Device, run_ms: float, mode: Mode = DEFAULT_MODE
) -> list[tuple[float, Timing]]:
    """`measure_marginal` of each (unit graph, copies), all timed side by side in one `time_models` call: its
    warm-up of the host and its reference run are spent once for all of them, and its budget grows with the
    square root of their number, each unit taking fewer samples than alone (never under
    `taso.profiler.MIN_SAMPLES`), eight units of ResNet-50 about half as many: the median of a budget shared
    by eight, 7 samples, let the search find false gains that the end-to-end guard then spent 18-39 s refusing; sample k of every graph is taken within one
    sweep, so a unit's copies are still paired sample by sample, and primed (`taso.profiler.time_models`), so a
    unit costs the same whatever it was measured beside: a search compares units measured eight at a time with
    units of its candidates measured one or two at a time."""
    plans = [_timed_graphs(ug, copies) for ug, copies in units]
    runs = [
        (onnx_io.model_bytes(h), feeds)
        for (timed, many, _), (_, copies) in zip(plans, units)
        for h, feeds in zip(timed, _feeds(timed, many, copies))
    ]
    t = time_models(runs, device, mode=mode, budget_s=MEASURE_BUDGET_S * len(units) ** 0.5, primed=True)
    out, start = [], 0
    for (timed, many, read), (_, copies) in zip(plans, units):
        mine, start = t[start : start + len(timed)], start + len(timed)
        if not many:
            # the sinks' graph has a run's overhead of its own: their difference is the unit's alone
            ms = (
                statistics.median(a - c for a, c in zip(mine[0].values, mine[1].values))
                if read
                else mine[0].median_ms - run_ms
            )
            out.append((max(ms, 0.0), mine[0]))
            continue
        extra = [b - a for a, b in zip(mine[0].values, mine[1].values)]
        if len(mine) == 4:
            extra = [e - (d - c) for e, c, d in zip(extra, mine[2].values, mine[3].values)]
        out.append((max(statistics.median(extra) / (copies - 1), 0.0), mine[0]))
    return out


def _timed_graphs(ug: Graph, copies: int) -> tuple[list[Graph], bool, bool]:
    """What `measure_marginal` times for a unit: the graphs, whether copies of it are among them, and whether
    it is read on (`fused_when_read`)."""
    many = replicate(ug, copies) if copies > 1 else None
    read = fused_when_read(ug) if many is not None or copies == 1 else False
    timed = [ug] if many is None else [ug, many]
    if read:
        on, alone = read_on(ug), sinks(ug)
        timed = [on, alone] if many is None else [on, replicate(on, copies), alone, replicate(alone, copies)]
    return timed, many is not None, read  # type: ignore[return-value]


def _feeds(timed: Sequence[Graph], many: bool, copies: int) -> list[dict[str, np.ndarray]]:
    """The inputs each of ``timed`` (`_timed_graphs`) runs on: drawn for a single copy, and for its copies
    (each after its single copy, where ``many``) the same values, each copy's its own array, as each reads its
    own buffer in a model. Drawn once, not again for every copy: mobilenet_v2's units drew 1.2 s of its cold
    H200 run."""
    out: list[dict[str, np.ndarray]] = []
    for i, h in enumerate(timed):
        if many and i % 2:
            one, single = out[-1], timed[i - 1]
            out.append({f"{v}#{c}": one[v].copy() for c in range(copies) for v in single.inputs})
        else:
            out.append(check.random_inputs(h, seed=0))
    return out


def read_on(ug: Graph) -> Graph:
    """``ug`` with each output read by a flattening Reshape whose output the graph returns instead: the
    unit's last node then writes an intermediate value, as in the model. Some onnxruntime fusions refuse a
    pattern whose last node writes a graph output (FastGelu: GPT-2's GELU, timed alone, ran as 8 kernels on
    the CPU EP, one in the model)."""
    nodes, outputs, types, data = list(ug.nodes), [], dict(ug.types), dict(ug.data)
    data[_FLAT] = WeightData(np.array([-1], np.int64))
    types[_FLAT] = TensorType("int64", (1,))
    for o in ug.outputs:
        flat = f"{o}#flat"
        nodes.append(Node("Reshape", (o, _FLAT), (flat,), make_attrs({})))
        types[flat] = TensorType(ug.types[o].dtype, (int(np.prod(ug.types[o].shape)),))
        outputs.append(flat)
    return replace(ug, nodes=tuple(nodes), outputs=tuple(outputs), types=types, weights=(*ug.weights, _FLAT), data=data)


def sinks(ug: Graph) -> Graph:
    """The Reshapes `read_on` adds, alone, over inputs of the unit's output types: what they cost by themselves."""
    read = read_on(ug)
    nodes = read.nodes[len(ug.nodes) :]
    types = {v: read.types[v] for n in nodes for v in (*n.inputs, *n.outputs)}
    return Graph(nodes, ug.outputs, read.outputs, types, (_FLAT,), {_FLAT: read.data[_FLAT]}, ug.meta)


_FLAT = "#flat_shape"


_fused: dict[str, bool] = {}
"""`fused_when_read`'s answers by `graph_digest`, for this process: a unit settled is measured three times."""


def fused_when_read(ug: Graph) -> bool:
    """Whether onnxruntime runs fewer kernels for the unit when its outputs are read on (`read_on`); only
    units of several ops can fuse. Asked of the CPU provider, whatever the device: a CPU session opens in
    milliseconds, and the fusion found refusing a graph output, FastGelu's, is a graph rewrite both providers
    share (bench_fusions.py shows the same kernels on each); without its NCHWc layout, which the CUDA provider
    lacks and which puts reorder kernels at a unit's every edge. Asked once per unit (its ops, attributes, types
    and small constants, what a fusion's pattern reads): a session writing its optimized model, and a second,
    read on, only where the unit alone runs as more than one kernel (reading on cannot run fewer than one:
    16 of ResNet-50's 24 units of several ops, 23 of mobilenet_v2's 28; the same answers on six corpus models
    with and without the layout, with and without the second session)."""
    if len(ug.nodes) < 2:
        return False
    key = graph_digest(ug)
    if key not in _fused:
        alone = _kernels(optimized_ops(onnx_io.model_bytes(ug), cuda=False, layout=False))
        _fused[key] = (
            alone > 1 and _kernels(optimized_ops(onnx_io.model_bytes(read_on(ug)), cuda=False, layout=False)) < alone
        )
    return _fused[key]


def _kernels(census: dict[str, int]) -> int:
    """Kernels of an optimized unit's census (`optimized_ops`) but the Reshapes, which `read_on` adds as views."""
    return sum(k for op, k in census.items() if op != "Reshape")
