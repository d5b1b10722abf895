"""Graph cost from operator latencies measured on the target device, cached in the store.

A graph is cut into *units*: one op, plus the ops onnxruntime fuses into it anyway (Conv with a following
BatchNormalization, bias Add and Relu; MatMul with a bias Add; Gemm with Relu), so the model never credits a
rewrite with a fusion ORT would have made itself. Each distinct unit (ops, attributes, concrete shapes,
dtypes) is timed once as a small ONNX model and its latency stored under the device's key; a graph's cost is
the sum of its units plus one run overhead. Units computed from weights alone cost nothing: they are
precomputed once. A unit that cannot be timed gets an analytic estimate (FLOPs and bytes against the device's
measured peak rate and bandwidth, plus a kernel launch), marked as estimated in reports. A batch-1 run is
bound by the host, whose speed drifts, so every measurement is scaled to the host speed seen at calibration
(`to_calibrated_host`, by the host's slowdown to the power `HOST_ELASTICITY`): units measured minutes apart
are then comparable. Each measurement also logs how quick the host was, and reports give latencies at the
host's quick speed (`CostModel.at_quick_host`), not at the one moment of calibration.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import sqlite_utils

from taso import onnx as onnx_io
from taso import ops
from taso.cost.profiler import DEFAULT_MODE, Device, Mode, Timing, optimized_ops, time_model, time_models
from taso.execute import check, fold_static_shapes
from taso.ir import Graph, Kind, Node, TensorType, WeightData, extract, make_attrs

if TYPE_CHECKING:
    from taso.cost.tables import Prior

ELEMENTWISE = ops.having(ops.EPILOGUE)
EPILOGUES: dict[str, frozenset[str]] = {
    name: frozenset().union(*map(ops.having, op.fuses)) for name, op in ops.OPS.items() if op.fuses
}
"""Head op -> ops that join its unit when they consume it (onnxruntime folds BatchNorm/Mul/Add into Conv
weights, fuses bias, activations, GELU chains and Add+LayerNormalization; on the CUDA EP it runs attention
scores MatMul+Mul+Add+Softmax as FusedMatMul + BiasSoftmax and a projection with its residual and LayerNorm
as Gemm + SkipLayerNormalization). A unit is timed as one model, so joining ops ORT happens not to fuse costs
no accuracy, while splitting ops it does fuse would charge kernels that never run: ORT 1.31's CUDA provider
runs a Conv's Relu as a kernel of its own (it fuses Conv and Relu on the CPU only), and the Conv+Relu unit's
time includes it."""


@dataclass(frozen=True)
class Unit:
    nodes: tuple[Node, ...]

    @property
    def label(self) -> str:
        return "+".join(n.op for n in self.nodes)


VIEWS = ops.having(ops.VIEW)
"""Ops that onnxruntime runs as a view of their input (no copy, no kernel) when the input is an intermediate
value: they join the unit that produced it. Timed alone their output is a graph output and must be copied, a
kernel the model never runs (BERT: 8 Reshapes of 6.5 us each, 8 % of its prediction on the H100)."""
REGION_CONTEXT = ELEMENTWISE | VIEWS
"""Consumers a searched region takes in (`taso.regions.with_context`): ops that join the units of its nodes."""


def units(g: Graph) -> list[Unit]:
    """Partition ``g``'s non-constant nodes into units: each head op with the epilogue ops that consume it.
    Pass a graph through `fold_static_shapes` first: shape arithmetic onnxruntime folds at load costs nothing."""
    kinds = g.kinds
    unit_of: dict[str, int] = {}  # value -> index of the unit that produced it
    groups: list[list[Node]] = []
    for n in g.nodes:
        if n.outputs and all(kinds.get(o) is Kind.CONSTANT for o in n.outputs if o):
            continue
        target = _epilogue_of(g, n, unit_of, groups)
        if target is None:
            groups.append([n])
            target = len(groups) - 1
        else:
            groups[target].append(n)
        for o in n.outputs:
            unit_of[o] = target
    return [Unit(tuple(nodes)) for nodes in groups]


def _epilogue_of(g: Graph, n: Node, unit_of: dict[str, int], groups: list[list[Node]]) -> int | None:
    """The unit ``n`` joins: its data input's unit for a view op, else as an epilogue the latest unit feeding
    it whose head accepts ``n``'s op."""
    if n.implicit or n.domain:
        return None
    if n.op in VIEWS and n.inputs and n.inputs[0] in unit_of:
        return unit_of[n.inputs[0]]
    feeding = sorted({unit_of[v] for v in n.reads if v in unit_of}, reverse=True)
    for k in feeding:
        head = groups[k][0]
        if not head.is_opaque and n.op in EPILOGUES.get(head.op, ()):
            return k
    return None


def unit_graph(g: Graph, unit: Unit) -> Graph:
    """The unit as a graph of its own (`taso.ir.extract`): the weight-only nodes feeding it come along, since
    onnxruntime folds them at load, so they cost nothing but give inputs like Dropout's ratio their real value.
    Views the unit ends with are left out: as outputs of the timed graph they would be copied, a kernel the
    model never runs (GPT-2 on the H100: Split+Reshape+Reshape+Reshape timed 28.3 us, the Split alone 6.9 us)."""
    return extract(g, timed_nodes(unit))


def timed_nodes(unit: Unit) -> tuple[Node, ...]:
    """The unit's nodes without its trailing views (views nothing else in the unit reads); a unit that is
    only views keeps them."""
    nodes = list(unit.nodes)
    while True:
        read = {v for n in nodes for v in n.reads}
        trailing = [n for n in nodes if n.op in VIEWS and not read.intersection(n.outputs)]
        if not trailing or len(trailing) == len(nodes):
            return tuple(nodes)
        dropped = {id(n) for n in trailing}
        nodes = [n for n in nodes if id(n) not in dropped]


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


def _footprint(g: Graph, unit: Unit, position: Mapping[int, int]) -> tuple:
    """Everything the `unit_key` of the unit's graph depends on, read from ``g`` in a few lookups (extracting
    the unit scans all of ``g``): the unit's `timed_nodes` and the weight-only nodes feeding them, in graph order; the
    type of every value they read or write; which values read from outside are weights, and the values of
    those the key spells out. Equal footprints give equal keys."""
    kinds, producers = g.kinds, g.producers
    timed = timed_nodes(unit)
    part = {id(n): n for n in timed}
    pending = [v for n in timed for v in n.reads]
    while pending:  # the feeders `taso.ir.extract` adds
        p = producers.get(pending.pop())
        if p is not None and id(p) not in part and kinds.get(p.outputs[0]) is Kind.CONSTANT:
            part[id(p)] = p
            pending.extend(p.reads)
    nodes = sorted(part.values(), key=lambda n: position[id(n)])
    produced = {o for n in nodes for o in n.outputs}
    outside = tuple(
        (v, kinds.get(v) is Kind.WEIGHT, g.data[v].spelled if v in g.data else None)
        for n in nodes
        for v in n.reads
        if v not in produced
    )
    return tuple(nodes), tuple(g.types.get(v) for n in nodes for v in (*n.reads, *n.outputs)), outside


def unit_key(ug: Graph) -> str:
    """Identity of a unit for the cache: ops, attributes, concrete types and small constant inputs, with
    value names canonicalised so equal units in different places (or graphs) share one measurement. The unit
    is keyed as onnxruntime runs it (`as_run`), so a rewrite onnxruntime makes itself leaves the key alone."""
    return graph_digest(as_run(ug))


def as_run(ug: Graph) -> Graph:
    """``ug`` with each BatchNormalization whose parameters are weights folded into the Conv before it (when
    nothing else reads the Conv's output), as onnxruntime folds it at load: the Conv with a bias runs, the
    BatchNorm never does. A Conv+BatchNorm unit and the biased Conv that subst's fold leaves then share one
    key, one measurement and one cost, so the search sees the fold as the free rewrite it is on onnxruntime."""
    norms = [n for n in ug.nodes if n.op == "BatchNormalization"]
    if not norms:
        return ug
    producers, consumers = ug.producers, ug.consumers
    folded: dict[int, Node] = {}  # id of a Conv -> the Conv with its BatchNorm folded in
    dropped: set[int] = set()
    for n in norms:
        conv = producers.get(n.inputs[0])
        if (
            conv is None
            or conv.op != "Conv"
            or not all(v in ug.weights for v in n.inputs[1:])
            or len(consumers.get(n.inputs[0], ())) != 1
            or n.inputs[0] in ug.outputs
            or ug.types[n.inputs[2]].dtype != ug.types[n.inputs[0]].dtype
        ):
            continue
        bias = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else n.inputs[2]
        folded[id(conv)] = replace(conv, inputs=(*conv.inputs[:2], bias), outputs=n.outputs)
        dropped.add(id(n))
    if not folded:
        return ug
    nodes = tuple(folded.get(id(n), n) for n in ug.nodes if id(n) not in dropped)
    produced = {o for n in nodes for o in n.outputs}
    reads = dict.fromkeys(v for n in nodes for v in n.reads if v not in produced)
    weights = tuple(v for v in reads if v in ug.weights)  # in order of first read, as `extract` lists them
    data = {w: ug.data[w] for w in weights if w in ug.data}
    return replace(ug, nodes=nodes, weights=weights, data=data)


def graph_digest(ug: Graph) -> str:
    """`unit_key` of a unit graph taken as it is."""
    names: dict[str, str] = {}
    for i, v in enumerate((*ug.inputs, *ug.weights)):
        names[v] = f"i{i}"
    parts = [",".join(f"{names[v]}:{ug.types.get(v)}" for v in (*ug.inputs, *ug.weights))]
    for w in ug.weights:
        if (values := ug.data[w].spelled) is not None:
            parts.append(f"{names[w]}={values}")
    for k, n in enumerate(ug.nodes):
        for j, o in enumerate(n.outputs):
            names[o] = f"n{k}.{j}"
        opaque = hashlib.sha1(n.opaque).hexdigest()[:16] if n.opaque else ""
        ins = ",".join(names.get(v, "?") for v in n.inputs)
        types = ",".join(str(ug.types.get(o)) for o in n.outputs)
        parts.append(f"{n.domain}::{n.op}({ins}){n.attrs}{opaque}->{types}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# ---- analytic fallback --------------------------------------------------------------------------------------


def _numel(t: TensorType | None) -> int:
    if t is None or not t.is_static:
        return 0
    return int(np.prod(t.shape, dtype=np.int64))  # type: ignore[arg-type]


def flops(ug: Graph) -> float:
    """Arithmetic of a unit: exact for the matrix ops, one op per output element otherwise."""
    total = 0.0
    for n in ug.nodes:
        out = _numel(ug.types.get(n.outputs[0])) if n.outputs else 0
        if n.op in ("MatMul", "Gemm") and not n.is_opaque:
            a = ug.types[n.inputs[0]]
            k = a.shape[-2] if n.op == "Gemm" and n.attr.get("transA") else a.shape[-1]  # type: ignore[index]
            total += 2.0 * out * (k if isinstance(k, int) else 1)
        elif n.op == "Conv" and not n.is_opaque:
            w = ug.types[n.inputs[1]].shape
            total += 2.0 * out * int(np.prod(w[1:]))  # type: ignore[index,arg-type]
        elif n.op in ("AveragePool", "MaxPool") and not n.is_opaque:
            total += out * int(np.prod(n.attr["kernel_shape"]))  # type: ignore[arg-type]
        else:
            total += out
    return total


def traffic(ug: Graph) -> float:
    """Bytes a unit must move at least: every input read once, every output written once."""
    values = (*ug.inputs, *ug.weights, *ug.outputs)
    return float(sum(_numel(ug.types.get(v)) * np.dtype(ug.types[v].dtype).itemsize for v in values if v in ug.types))


# ---- the model ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """Per-device constants measured once: a run's fixed overhead, a kernel's, the two ceilings, and how quick
    the host was then (`reference_ms`, the yardstick every unit measurement is scaled to)."""

    run_ms: float
    kernel_ms: float
    gflops: float
    gbps: float
    reference_ms: float = 0.0
    """The quickest run of `taso.profiler`'s tiny reference model during calibration; 0: unknown (a store
    calibrated before it was kept), and unit measurements are then not scaled."""

    def estimate(self, ug: Graph) -> float:
        return max(flops(ug) / (self.gflops * 1e6), traffic(ug) / (self.gbps * 1e6)) + self.kernel_ms * len(ug.nodes)

    def at_host(self, scale: float) -> Calibration:
        """The host-bound constants (run and kernel overhead, the yardstick) on a host ``scale`` times slower."""
        return replace(
            self, run_ms=self.run_ms * scale, kernel_ms=self.kernel_ms * scale, reference_ms=self.reference_ms * scale
        )


DEFAULT_CALIBRATION = Calibration(run_ms=0.01, kernel_ms=0.005, gflops=100.0, gbps=20.0)
"""A 2-core CPU's orders of magnitude: used when nothing may be measured and no calibration is cached."""


@dataclass
class UnitCost:
    label: str
    key: str
    ms: float
    estimated: bool
    count: int = 1


@dataclass
class GraphCost:
    total_ms: float
    run_ms: float
    units: list[UnitCost] = field(default_factory=list)

    @property
    def estimated(self) -> int:
        return sum(u.count for u in self.units if u.estimated)

    def scaled(self, k: float) -> GraphCost:
        """Every latency times ``k``."""
        return GraphCost(self.total_ms * k, self.run_ms * k, [replace(u, ms=u.ms * k) for u in self.units])


def _create_tables(db: sqlite_utils.Database) -> None:
    db["devices"].create(
        {
            "device": str,
            "run_ms": float,
            "kernel_ms": float,
            "gflops": float,
            "gbps": float,
            "reference_ms": float,
            "measured_at": str,
        },
        pk="device",
        if_not_exists=True,
    )
    if "reference_ms" not in db["devices"].columns_dict:  # stores made before the yardstick was kept
        db["devices"].add_column("reference_ms", float)
    db["costs"].create(
        {"device": str, "unit": str, "label": str, "ms": float, "estimated": int, "note": str, "measured_at": str},
        pk=("device", "unit"),
        if_not_exists=True,
    )
    db["host_speed"].create({"device": str, "reference_ms": float, "measured_at": str}, if_not_exists=True)
    db["host_speed"].create_index(["device"], if_not_exists=True)
    db["verdicts"].create(
        {"device": str, "pair": str, "before_ms": float, "after_ms": float, "kept_original": int, "measured_at": str},
        pk=("device", "pair"),
        if_not_exists=True,
    )


HOST_LOG = 500
"""How many of a device's latest reference runs its quick speed is read from: enough to span the minutes-long
slow spells of a shared host (a unit measurement logs one, every 50-400 ms), few enough to follow a store moved
to another host."""
QUICK_QUANTILE = 0.1
"""Which quantile of the logged reference runs is the host's quick speed. The H100 host is bimodal: the
reference ran 0.062-0.066 ms or 0.089-0.110 ms, switching within seconds, whatever was timed beside it
(bench_yardstick.py), and the share of slow runs moved from minutes to minutes (a median of one run's log
read 0.059, another's 0.087). The quick mode is what the host can do, the same in every run."""


class CostModel:
    """Unit latencies for one device: from memory, then the store, then a measurement (or an estimate)."""

    def __init__(
        self,
        device: Device,
        db: sqlite_utils.Database | None = None,
        measure: bool = True,
        refresh: bool = False,
        calibration: Calibration | None = None,
        dims: Mapping[str, int] | None = None,
        table: Mapping[str, float] | None = None,
        mode: Mode = DEFAULT_MODE,
        prior: Prior | None = None,
        measure_limit: float | None = None,
    ) -> None:
        self.device, self.db, self.measure, self.refresh, self.mode = device, db, measure, refresh, mode
        self.prior = prior
        """Costs measured on a device of this one's identity (`prior_for`), taken for units the store lacks."""
        self.from_prior = 0
        """Units costed from the prior."""
        self.key = f"{device.key}|{mode.tag}" if mode.tag else device.key
        """What the store files this model's measurements under: the device, and how it was timed."""
        self.dims = dict(dims or {})
        """Sizes for symbolic dims: a dynamic model is costed at one concrete size."""
        self.memo: dict[str, tuple[float, bool]] = {key: (ms, False) for key, ms in (table or {}).items()}
        """Unit costs known so far (seeded from a reference table, see `reference_model`)."""
        self.keys: dict[tuple, str] = {}
        """`_footprint` -> `unit_key`: a search costs thousands of graphs that share most of their units."""
        self.samples: dict[str, tuple[Graph, list[float]]] = {}
        """Units this model measured: the timed graph and every measurement taken of it."""
        self.measured = self.cached = 0
        self.measuring_s = 0.0
        """Seconds spent measuring so far: a search's clock leaves them out (see `taso.optimize`)."""
        self.measure_until: float | None = measure_limit
        """`measuring_s` past which units not yet known are estimated instead of measured (None: no limit); the
        device's calibration counts, as the first measurement a fresh store makes."""
        self.references: list[float] = []
        """Reference runs timed beside this model's measurements, where there is no store to log them in."""
        self.calibration_estimated = False
        """Whether `calibration` is `DEFAULT_CALIBRATION`, for want of a measurement (none allowed, or no time)."""
        if db is not None:
            _create_tables(db)
        self.calibration = calibration or self._calibration()

    def _calibration(self) -> Calibration:
        row = None
        if self.db is not None and not self.refresh:
            row = next(self.db["devices"].rows_where("device = ?", [self.key]), None)
        if row is not None:
            return Calibration(row["run_ms"], row["kernel_ms"], row["gflops"], row["gbps"], row["reference_ms"] or 0.0)
        if self.prior is not None and not self.refresh:  # its costs were measured at its calibration's speeds
            return self.prior.calibration
        if not self.measure or self._out_of_time():  # not stored: a run with time to measure calibrates
            self.calibration_estimated = True
            return DEFAULT_CALIBRATION
        t0 = time.perf_counter()
        cal = calibrate(self.device)
        self.measuring_s += time.perf_counter() - t0
        if self.db is not None:
            self.db["devices"].upsert({"device": self.key, **cal.__dict__, "measured_at": _now()}, pk="device")
        self._log_host(cal.reference_ms)
        return cal

    def _log_host(self, reference_ms: float | None) -> None:
        if not reference_ms:
            return
        if self.db is None:
            self.references.append(reference_ms)
        else:
            self.db["host_speed"].insert({"device": self.key, "reference_ms": reference_ms, "measured_at": _now()})

    def quick_reference_ms(self) -> float:
        """The `QUICK_QUANTILE` of the device's latest `HOST_LOG` reference runs (the calibration's alone when
        none is logged): how quick its host is when nothing slows it."""
        if self.db is None:
            seen = self.references[-HOST_LOG:]
        else:
            rows = self.db["host_speed"].rows_where(
                "device = ?", [self.key], order_by="rowid desc", limit=HOST_LOG, select="reference_ms"
            )
            seen = [r["reference_ms"] for r in rows]
        if not seen:
            return self.calibration.reference_ms
        return sorted(seen)[int(QUICK_QUANTILE * (len(seen) - 1))]

    def host_slowdown(self) -> float:
        """How much slower the quick host is than at calibration, the yardstick costs are kept at."""
        quick, yardstick = self.quick_reference_ms(), self.calibration.reference_ms
        return quick / yardstick if quick and yardstick else 1.0

    def host_scale(self) -> float:
        """What unit costs move by between the calibration's host and the quick host (`HOST_ELASTICITY`): costs
        compared with each other need no scale, latencies reported to users do (`at_quick_host`)."""
        return self.host_slowdown() ** HOST_ELASTICITY

    def at_quick_host(self, c: GraphCost) -> GraphCost:
        """``c`` (costed at the calibration's host speed) at the host's quick speed. A calibration that fell
        in a slow spell (H100: reference 0.093 ms, 0.059 ms on the host the hour before) made every prediction
        12-48 % high; scaled like this, a search still compares like with like."""
        return c.scaled(self.host_scale())

    def _measure(self, ugs: Sequence[Graph]) -> list[float]:
        """The units' marginal latencies, measured now side by side (`measure_marginals`) and scaled to the
        calibration's host speed; raises what onnxruntime raises for a unit that cannot run alone."""
        t0 = time.perf_counter()
        cal = self.calibration
        plans = [(ug, 1 if cal.estimate(ug) >= ALONE_ABOVE * cal.run_ms else COPIES) for ug in ugs]
        try:
            measured = measure_marginals(plans, self.device, cal.run_ms, self.mode)
        finally:
            self.measuring_s += time.perf_counter() - t0
        self._log_host(measured[0][1].reference_ms)  # one reference run beside them all
        return [to_calibrated_host(ms, timing, cal) for ms, timing in measured]

    def _key(self, g: Graph, unit: Unit, position: Mapping[int, int]) -> tuple[str, Graph | None]:
        """The unit's `unit_key`, with its graph where the key is new to this model (None where remembered: its
        cost is in `memo` then)."""
        footprint = _footprint(g, unit, position)
        key = self.keys.get(footprint)
        if key is not None:
            return key, None
        ug = unit_graph(g, unit)
        if self.dims:
            ug = replace(ug, types={k: t.with_dims(self.dims) for k, t in ug.types.items()})
        key = self.keys[footprint] = unit_key(ug)
        return key, ug

    def unit_cost(self, g: Graph, unit: Unit, position: Mapping[int, int] | None = None) -> UnitCost:
        """The unit's cost; ``position`` (id of each node of ``g`` -> its index) spares recomputing it when
        costing every unit of one graph."""
        key, ug = self._key(g, unit, position or {id(n): i for i, n in enumerate(g.nodes)})
        if key not in self.memo:
            assert ug is not None  # a remembered key has its cost
            known = self._known(key)
            if known is None:
                self._new([(key, ug, unit.label)])
            else:
                self.memo[key] = known
        ms, estimated = self.memo[key]
        return UnitCost(unit.label, key, ms, estimated)

    def verdict(self, pair: str) -> dict[str, float | bool] | None:
        """What timing a pair of models end to end on this device found before (`record_verdict`): a warm run
        that reaches the same rewrite of the same model need not time it again (BERT-base on the 2-core CPU:
        19 s)."""
        if self.db is None or self.refresh:
            return None
        row = next(self.db["verdicts"].rows_where("device = ? AND pair = ?", [self.key, pair]), None)
        if row is None:
            return None
        kept = {"kept_original": True} if row["kept_original"] else {}
        return {"before_ms": row["before_ms"], "after_ms": row["after_ms"], **kept}

    def record_verdict(self, pair: str, measured: Mapping[str, float | bool]) -> None:
        """Keep the end-to-end timing of a pair of models (original, rewrite), for `verdict`."""
        if self.db is not None:
            row = {k: measured[k] for k in ("before_ms", "after_ms")}
            self.db["verdicts"].upsert(
                {
                    "device": self.key,
                    "pair": pair,
                    **row,
                    "kept_original": int(bool(measured.get("kept_original"))),
                    "measured_at": _now(),
                },
                pk=("device", "pair"),
            )

    def _known(self, key: str) -> tuple[float, bool] | None:
        """The unit's cost as known before this run: from the store, else from the device's prior table."""
        if self.refresh:
            return None
        if self.db is not None:
            row = next(self.db["costs"].rows_where("device = ? AND unit = ?", [self.key, key]), None)
            if row is not None and not (row["estimated"] and self.measure):
                self.cached += 1
                return row["ms"], bool(row["estimated"])
        if self.prior is not None and key in self.prior.costs:
            self.from_prior += 1
            return self.prior.costs[key], False
        return None

    def _new(self, found: Sequence[tuple[str, Graph, str]]) -> None:
        """Cost units (key, graph, label) nothing knows into `memo`: measured side by side (and stored), or
        estimated where they may not be. A batch that onnxruntime fails is measured again unit by unit, so that
        only a unit that cannot run alone (data-dependent inputs) is estimated, with the error as its note."""
        measurable = []
        for key, ug, label in found:
            if not self.measure or self._out_of_time() or not all(t.is_static for t in ug.types.values()):
                self.memo[key] = (self.calibration.estimate(ug), True)  # not stored: a later run measures it
            else:
                measurable.append((key, ug, label))
        if not measurable:
            return
        try:
            costs = [(ms, False, "") for ms in self._measure([ug for _, ug, _ in measurable])]
        except Exception as e:  # onnxruntime raises its own exception types
            if len(measurable) > 1:
                for one in measurable:
                    self._new([one])
                return
            note = str(e).splitlines()[0][:200] if str(e) else ""
            costs = [(self.calibration.estimate(measurable[0][1]), True, note)]
        for (key, ug, label), (ms, estimated, note) in zip(measurable, costs):
            if not estimated:
                self.measured += 1
                self.samples[key] = (ug, [ms])
            self._record(key, label, ms, estimated, note)

    def _out_of_time(self) -> bool:
        """Whether measuring has used the seconds `measure_until` allows."""
        return self.measure_until is not None and self.measuring_s >= self.measure_until

    def _record(self, key: str, label: str, ms: float, estimated: bool, note: str = "") -> None:
        self.memo[key] = (ms, estimated)
        if self.db is not None:
            row = {"device": self.key, "unit": key, "label": label, "ms": ms, "estimated": int(estimated)}
            self.db["costs"].upsert({**row, "note": note, "measured_at": _now()}, pk=("device", "unit"))

    def _settle(self, costs: Sequence[UnitCost]) -> None:
        """Measure units used `SETTLE_COUNT` times or more twice again, after the rest and in another order,
        and cost each at the median of its three measurements."""
        heavy = [c for c in costs if c.count >= SETTLE_COUNT and len(self.samples.get(c.key, (None, ()))[1]) == 1]
        for sweep in (heavy[::-1], heavy):
            for start in range(0, len(sweep), MEASURE_BATCH):
                if self._out_of_time():  # each keeps the measurements it has
                    break
                batch = sweep[start : start + MEASURE_BATCH]
                for c, ms in zip(batch, self._measure([self.samples[c.key][0] for c in batch])):
                    self.samples[c.key][1].append(ms)
        for c in heavy:
            c.ms = statistics.median(self.samples[c.key][1])
            self._record(c.key, c.label, c.ms, False)

    def _cost_new(
        self, found: Sequence[tuple[str, Graph | None, str]], progress: Callable[[int, int], None] | None
    ) -> None:
        """Cost the units (key, graph, label) not yet in `memo`: those the store or the prior knows, then the
        rest measured costliest first (analytic estimate times uses), so that what `measure_until` leaves to
        estimate is the cheapest. ``progress`` hears (units costed, units to cost) after each of the rest."""
        new: dict[str, tuple[Graph, str]] = {}
        uses: dict[str, int] = {}
        for key, ug, label in found:
            if key in self.memo:
                continue
            uses[key] = uses.get(key, 0) + 1
            if ug is not None:
                new.setdefault(key, (ug, label))
        rest = []
        for key, (ug, label) in new.items():
            known = self._known(key)
            if known is None:
                rest.append((key, ug, label))
            else:
                self.memo[key] = known
        rest.sort(key=lambda r: -self.calibration.estimate(r[1]) * uses[r[0]])  # stable: graph order on ties
        for start in range(0, len(rest), MEASURE_BATCH):
            self._new(rest[start : start + MEASURE_BATCH])
            if progress is not None and self.measure:  # estimates take no time to show
                progress(min(start + MEASURE_BATCH, len(rest)), len(rest))

    def graph_cost(self, g: Graph, progress: Callable[[int, int], None] | None = None) -> GraphCost:
        """Predicted latency of one run of ``g`` (concrete shapes needed for measurements); ``progress`` hears
        (units costed, units to cost) after each unit neither this model, the store nor the prior knew."""
        g = fold_static_shapes(g)
        by_key: dict[str, UnitCost] = {}
        position = {id(n): i for i, n in enumerate(g.nodes)}
        found = units(g)
        keyed = [(*self._key(g, unit, position), unit.label) for unit in found]
        known = set(self.samples)
        self._cost_new(keyed, progress)
        for key, _, label in keyed:
            if key in by_key:
                by_key[key].count += 1
            else:
                by_key[key] = UnitCost(label, key, *self.memo[key])
        # settled only where first measured: a cost a search has compared with stays put, so that a warm run,
        # reading it from the store, makes the same comparisons (BERT-base: units of the search's candidates,
        # used once in a region, settled when the whole result was costed; the warm search then took another
        # path, to a rewrite the cold run had not timed end to end, and timed it: 22 s)
        self._settle([c for c in by_key.values() if c.key not in known])
        run = self.calibration.run_ms
        return GraphCost(run + sum(u.ms * u.count for u in by_key.values()), run, list(by_key.values()))


SETTLE_COUNT = 4
"""A unit a graph uses this many times is measured three times and costed at the median: one measurement in a
slow spell would count that often (NasRNN on the H100: 80 units of 7 kinds, every one 1.1-1.6x its cost in
an earlier run, the model +33 %)."""

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
    runs = [(onnx_io.model_bytes(h), check.random_inputs(h, seed=0)) for timed, _, _ in plans for h in timed]
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


HOST_ELASTICITY = 0.78
"""How a unit's cost moves with the host's speed: as the reference run's time to this power. Even a small
unit is part GPU time: over 51 units of SqueezeNet, BERT-base and NasRNN (0.005-0.06 ms, 12 measurements each
at references 0.072-0.099 ms on the H100; bench_drift.py, bench/results/2026-11-23/drift-h100.json) the least-squares
slope of log cost on log reference had median 0.78 (10th-90th percentile 0.65-0.89), unrelated to the unit's
size. Scaled in full, a calibration taken in a slow spell put CSRNet's prediction 24 % low."""


def to_calibrated_host(ms: float, timing: Timing, calibration: Calibration) -> float:
    """``ms``, measured while the host ran the reference model in ``timing.reference_ms``, scaled to the host
    speed of the calibration. A batch-1 run is host-bound and the host's speed drifts: on the H100 the
    reference moved 0.073-0.094 ms over six minutes and unit costs with it (bench_drift.py: a unit's
    measurements spread 1.36x max/min, 1.16x scaled), and a search that measured the model's units in a quick
    spell and its rewrites' units in a slow one saw every rewrite as a loss (SqueezeNet's fire merges, found
    minutes earlier on the same machine, were not)."""
    if not calibration.reference_ms or not timing.reference_ms:
        return ms
    return ms * (calibration.reference_ms / timing.reference_ms) ** HOST_ELASTICITY


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
    share (bench_fusions.py shows the same kernels on each). Asked once per unit (its ops, attributes, types
    and small constants, what a fusion's pattern reads): two sessions, each writing its optimized model."""
    if len(ug.nodes) < 2:
        return False
    key = graph_digest(ug)
    if key not in _fused:
        alone = optimized_ops(onnx_io.model_bytes(ug), cuda=False)
        read = optimized_ops(onnx_io.model_bytes(read_on(ug)), cuda=False)
        _fused[key] = sum(k for op, k in read.items() if op != "Reshape") < sum(
            k for op, k in alone.items() if op != "Reshape"
        )
    return _fused[key]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---- calibration --------------------------------------------------------------------------------------------


def _chain(op: str, shape: tuple[int, ...], length: int, second: bool = False) -> tuple[Graph, dict[str, np.ndarray]]:
    """``length`` element-wise ops in a row over one input (with a second input for binary ops)."""
    t = TensorType("float32", shape)
    nodes, prev = [], "x"
    for i in range(length):
        nodes.append(Node(op, (prev, "y") if second else (prev,), (f"v{i}",), make_attrs({})))
        prev = f"v{i}"
    inputs = ("x", "y") if second else ("x",)
    types = {v: t for v in (*inputs, *(f"v{i}" for i in range(length)))}
    rng = np.random.default_rng(0)
    return Graph(tuple(nodes), inputs, (prev,), types), {
        v: rng.standard_normal(shape).astype(np.float32) for v in inputs
    }


def _matmul(n: int) -> tuple[Graph, dict[str, np.ndarray]]:
    t = TensorType("float32", (n, n))
    rng = np.random.default_rng(0)
    w = WeightData(rng.standard_normal((n, n)).astype(np.float32))
    g = Graph((Node("MatMul", ("x", "w"), ("y",)),), ("x",), ("y",), {"x": t, "w": t, "y": t}, ("w",), {"w": w})
    return g, {"x": rng.standard_normal((n, n)).astype(np.float32)}


def calibrate(device: Device) -> Calibration:
    """Measure run overhead and per-kernel cost (1 vs 11 tiny Relus), peak FLOP/s (a large MatMul) and
    bandwidth (a large Add: two reads and a write per element), and keep the quickest reference run timed
    beside them: the host speed unit costs are scaled to (`to_calibrated_host`)."""
    one = time_model(onnx_io.model_bytes(_chain("Relu", (4,), 1)[0]), _chain("Relu", (4,), 1)[1], device)
    g11, f11 = _chain("Relu", (4,), 11)
    eleven = time_model(onnx_io.model_bytes(g11), f11, device)
    kernel = max((eleven.median_ms - one.median_ms) / 10, 1e-4)
    run = max(one.median_ms - kernel, 0.0)
    n = 4096 if device.is_cuda else 1024
    mm, feeds = _matmul(n)
    big = time_model(onnx_io.model_bytes(mm), feeds, device, warmup=3, samples=7)
    gflops = 2 * n**3 / max(big.median_ms - run, 1e-3) / 1e6
    size = (64 * 2**20) if device.is_cuda else (8 * 2**20)
    add, feeds = _chain("Add", (size,), 1, second=True)
    wide = time_model(onnx_io.model_bytes(add), feeds, device, warmup=3, samples=7)
    gbps = 3 * 4 * size / max(wide.median_ms - run, 1e-3) / 1e6
    reference = min(t.reference_ms or float("inf") for t in (one, eleven, big, wide))
    return Calibration(run, kernel, gflops, gbps, reference if reference < float("inf") else 0.0)


def model_latency(path: str, g: Graph, device: Device, samples: int = 50, mode: Mode = DEFAULT_MODE) -> Timing:
    """Measured end-to-end latency of a whole model file, for comparing with `graph_cost`; its reference run
    tells how quick the host was meanwhile."""
    return time_model(path, check.random_inputs(g, seed=0), device, warmup=20, samples=samples, mode=mode)


def interleaved_timings(
    paths: Sequence[str | os.PathLike],
    graphs: Sequence[Graph],
    device: Device,
    rounds: int = 3,
    mode: Mode = DEFAULT_MODE,
    progress: Callable[[int, int], None] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    budget_s: float | None = None,
) -> list[list[Timing]]:
    """Each model's timing in every one of ``rounds`` rounds: each round opens a fresh session of every
    model and times them side by side (`taso.profiler.time_models`, its warm-up and its samples within
    ``budget_s`` each where one is given), so round k of two models is a pair.
    Each round opens the sessions in another order: opened first in every round, a model measured 1-2 %
    slower than a second session of itself in all 14 zoo models (H100, bench_optimize.py). ``progress``
    hears (rounds done, rounds) after each round: a round of a large model takes seconds. ``inputs`` are the
    user's (``--check-inputs``): a model that runs only on meaningful values is timed on them, not drawn ones."""
    runs = [(str(p), inputs if inputs is not None else check.random_inputs(g, seed=0)) for p, g in zip(paths, graphs)]
    per: list[list[Timing]] = [[] for _ in paths]
    for r in range(rounds):
        first = r % len(runs)
        timed = time_models(runs[first:] + runs[:first], device, warmup=20, samples=40, mode=mode, budget_s=budget_s)
        for i, t in enumerate(timed):
            per[(first + i) % len(runs)].append(t)
        if progress is not None:
            progress(r + 1, rounds)
    return per


def interleaved_rounds(
    paths: Sequence[str | os.PathLike],
    graphs: Sequence[Graph],
    device: Device,
    rounds: int = 3,
    mode: Mode = DEFAULT_MODE,
    progress: Callable[[int, int], None] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    budget_s: float | None = None,
) -> list[list[float]]:
    """Each model's median latency in every round of `interleaved_timings`."""
    timings = interleaved_timings(paths, graphs, device, rounds, mode, progress, inputs, budget_s)
    return [[t.median_ms for t in ts] for ts in timings]


def interleaved_latency(
    paths: Sequence[str | os.PathLike],
    graphs: Sequence[Graph],
    device: Device,
    rounds: int = 3,
    mode: Mode = DEFAULT_MODE,
) -> list[float]:
    """Each model's median latency over `interleaved_rounds`."""
    return [statistics.median(v) for v in interleaved_rounds(paths, graphs, device, rounds, mode)]


def clearly_faster(before: Sequence[float], after: Sequence[float]) -> bool:
    """Whether ``after`` beats ``before`` beyond the noise between rounds: faster in median and in all but at
    most one of the paired rounds. Sessions of one unchanged model measured up to 2x apart on a shared H100
    (bench_noise.py), so a median of a few rounds alone keeps a slower rewrite about every other time."""
    wins = sum(a < b for b, a in zip(before, after))
    return statistics.median(after) < statistics.median(before) and wins >= len(before) - 1


def cost_table(costs: Iterable[UnitCost], top: int | None = None) -> Sequence[UnitCost]:
    ranked = sorted(costs, key=lambda u: -u.ms * u.count)
    return ranked[:top] if top else ranked


def export_reference(model: CostModel, path: str) -> int:
    """Write ``model``'s measured unit costs (from its store) and calibration as a reference table (JSON), at
    the host's quick speed: what CI, which has no GPU, costs graphs with. Returns how many units it holds."""
    import json

    assert model.db is not None, "a reference table is exported from a store"
    k = model.host_scale()
    costs = {
        r["unit"]: r["ms"] * k
        for r in model.db["costs"].rows_where("device = ? AND estimated = 0", [model.key], order_by="unit")
    }
    ref = {"device": model.device.__dict__, "calibration": model.calibration.at_host(k).__dict__, "costs": costs}
    with open(path, "w") as f:
        f.write(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    return len(costs)


def reference_model(path: str) -> CostModel:
    """A cost model that measures nothing: unit costs from a reference table written by `export_reference`,
    analytic estimates with that device's calibration for units the table lacks. A file that is not such a
    table is `BadInput` (one line), never a KeyError from deep in the cost model."""
    from taso.cost.tables import read_table

    device, calibration, costs = read_table(path)
    return CostModel(device, None, measure=False, calibration=calibration, table=costs)
