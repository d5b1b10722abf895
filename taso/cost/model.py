"""Graph cost from operator latencies measured on the target device, cached per user.

A graph is cut into *units* (`taso.cost.unit`): one op, plus the ops onnxruntime fuses into it anyway
(`taso.cost.fusion`), so the model never credits a rewrite with a fusion ORT would have made itself. Each
distinct unit is measured once (`taso.cost.measure`) and its latency kept in the cost cache under the device's
key (`taso.cost.cache`); a graph's cost is the sum of its units plus one run overhead. Units computed from
weights alone cost nothing: they are precomputed once. A unit that cannot be timed gets an analytic estimate
(`taso.cost.estimate`, against the device's `taso.cost.calibration`), marked as estimated in reports. Every
measurement is scaled to the host speed seen at calibration, and reports give latencies at the host's quick
speed (`taso.cost.host`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import sqlite_utils

from taso.cost import cache
from taso.cost.calibration import DEFAULT_CALIBRATION, Calibration, Scales, calibrate, unit_class
from taso.cost.host import HOST_ELASTICITY, HOST_LOG, quick_reference_ms, to_calibrated_host
from taso.cost.measure import ALONE_ABOVE, COPIES, MEASURE_BATCH, measure_marginals, shape_follows_values
from taso.cost.profiler import DEFAULT_MODE, Device, Mode
from taso.cost.unit import Contexts, Unit, _footprint, twin_key, unit_graph, unit_key, units
from taso.execute import fold_static_shapes
from taso.ir import Graph, all_static

if TYPE_CHECKING:
    from taso.cost.tables import Prior


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
        self.prior_units: dict[str, int] = {}
        """Units costed from each of the prior's tables (`Prior.cost`), by source."""
        self.scales: Scales | None = None
        """What a prior of another device (`Prior.scaled_from`) is scaled by here: read from the first units it
        holds that this device has measured (`_carry_prior`); until then none of its costs is taken."""
        self.key = f"{device.key}|{mode.tag}" if mode.tag else device.key
        """What the store files this model's measurements under: the device, and how it was timed."""
        self.dims = dict(dims or {})
        """Sizes for symbolic dims: a dynamic model is costed at one concrete size."""
        self.memo: dict[str, tuple[float, bool]] = {key: (ms, False) for key, ms in (table or {}).items()}
        """Unit costs known so far (seeded from a reference table, see `reference_model`)."""
        self.keys: dict[tuple, str] = {}
        """`_footprint` -> `unit_key`: a search costs thousands of graphs that share most of their units."""
        self.contexts = Contexts()
        """Ids of the nodes of the graphs this model has keyed: what `unit_keys` finds units by."""
        self.unit_keys: dict[tuple[int, ...], tuple[str, str]] = {}
        """A unit's nodes' ids (`Contexts`) -> its `unit_key` and label, for units that read no constant."""
        self.prefetched: dict[int, tuple[Graph, list[tuple[str, Graph | None, str]]]] = {}
        """The last `prefetch`'s graphs by id, each held beside its `_keyed` units: a search prefetches an
        expansion's candidates, then costs them one by one, and keying a graph's units twice was a fifth of its
        time."""
        self.samples: dict[str, tuple[Graph, list[float]]] = {}
        """Units this model measured: the timed graph and every measurement taken of it."""
        self.used: set[str] = set()
        """Units a cost this model gave has counted (`graph_cost`): settled ones stay put from then on."""
        self.measured = self.cached = 0
        self.measuring_s = 0.0
        """Seconds spent measuring so far: a search's clock leaves them out (see `taso.optimize`)."""
        self.measure_until: float | None = measure_limit
        """`measuring_s` past which units not yet known are estimated instead of measured (None: no limit); the
        device's calibration counts, as the first measurement a fresh store makes."""
        self.references: list[float] = []
        """Reference runs timed beside this model's measurements, where there is no store to log them in."""
        self.unmeasured: frozenset[str] = frozenset()
        """Units estimated, not measured, where neither the store nor the prior knows them: a model's units that no
        rewrite of the search touches (`untouched`) cost the original and every candidate alike, so they decide
        nothing the search chooses (a rewrite that makes one anew gets its estimate too)."""
        self.twins: dict[str, str] = {}
        """`twin_key` -> the key of the first unit of that twin costed here by measuring or estimating: its
        twins take its cost (`_twinned`)."""
        self.calibration_estimated = False
        """Whether `calibration` is `DEFAULT_CALIBRATION`, for want of a measurement (none allowed, or no time)."""
        if db is not None:
            cache.create_tables(db)
        self.calibration = calibration or self._calibration()

    def _calibration(self) -> Calibration:
        stored = None
        if self.db is not None and not self.refresh:
            stored = cache.calibration(self.db, self.key)
        if stored is not None:
            return stored
        if self.prior is not None and self.prior.scaled_from is None and not self.refresh:
            return self.prior.calibration  # its costs were measured at its calibration's speeds
        if not self.measure or self._out_of_time():  # not stored: a run with time to measure calibrates
            self.calibration_estimated = True
            return DEFAULT_CALIBRATION
        t0 = time.perf_counter()
        cal = calibrate(self.device, self.mode)
        self.measuring_s += time.perf_counter() - t0
        if self.db is not None:
            cache.keep_calibration(self.db, self.key, cal)
        self._log_host(cal.reference_ms)
        return cal

    def _log_host(self, reference_ms: float | None) -> None:
        if not reference_ms:
            return
        if self.db is None:
            self.references.append(reference_ms)
        else:
            cache.log_host(self.db, self.key, reference_ms)

    def quick_reference_ms(self) -> float:
        """The `QUICK_QUANTILE` of the device's latest `HOST_LOG` reference runs (the calibration's alone when
        none is logged): how quick its host is when nothing slows it."""
        if self.db is None:
            seen = self.references[-HOST_LOG:]
        else:
            seen = cache.host_log(self.db, self.key, HOST_LOG)
        return quick_reference_ms(seen) if seen else self.calibration.reference_ms

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

    def _key(self, g: Graph, unit: Unit) -> tuple[str, Graph | None]:
        """The unit's `unit_key`, with its graph where the key is new to this model (None where remembered: its
        cost is in `memo` then)."""
        footprint = _footprint(g, unit)
        key = self.keys.get(footprint)
        if key is not None:
            return key, None
        ug = self._unit_graph(g, unit)
        key = self.keys[footprint] = unit_key(ug)
        return key, ug

    def _unit_graph(self, g: Graph, unit: Unit) -> Graph:
        """The unit as a graph of its own, at this model's sizes of symbolic dims."""
        ug = unit_graph(g, unit)
        return replace(ug, types={k: t.with_dims(self.dims) for k, t in ug.types.items()}) if self.dims else ug

    def untouched(self, g: Graph, touched: Collection[str]) -> frozenset[str]:
        """The keys of ``g``'s units none of whose nodes writes a value in ``touched`` (those of the parts the search
        rewrites within), less any key a unit that does write one also has."""
        g = fold_static_shapes(g)
        inside, outside = set(), set()
        for unit in units(g):
            written = any(o in touched for n in unit.nodes for o in n.outputs)
            key = self.keys.get(_footprint(g, unit)) or unit_key(self._unit_graph(g, unit))  # `_key` minds memo
            (inside if written else outside).add(key)
        return frozenset(outside - inside)

    def unit_cost(self, g: Graph, unit: Unit) -> UnitCost:
        """The unit's cost."""
        key, ug = self._key(g, unit)
        if key not in self.memo:
            assert ug is not None  # a remembered key has its cost
            known = self._known(key, unit.label)
            if known is None:
                self._new([(key, ug, unit.label)])
            else:
                self.memo[key] = known
        ms, estimated = self.memo[key]
        return UnitCost(unit.label, key, ms, estimated)

    def verdict(self, pair: str) -> dict[str, object] | None:
        """What timing a pair of models end to end on this device found before (`record_verdict`): a warm run
        that reaches the same rewrite of the same model need not time it again (BERT-base on the 2-core CPU:
        19 s)."""
        if self.db is None or self.refresh:
            return None
        return cache.verdict(self.db, self.key, pair)

    def record_verdict(self, pair: str, measured: Mapping[str, object]) -> None:
        """Keep the end-to-end timing of a pair of models (original, rewrite), for `verdict`."""
        if self.db is not None:
            cache.record_verdict(self.db, self.key, pair, measured)

    def _known(self, key: str, label: str) -> tuple[float, bool] | None:
        """The unit's cost as known before this run: from the store, else from the device's prior (`Prior.cost`:
        its own table, then the others scaled onto it; another device's only once it is scaled, `_carry_prior`)."""
        if self.refresh:
            return None
        if self.db is not None:
            row = cache.cost(self.db, self.key, key)
            if row is not None and not (row["estimated"] and self.measure):
                self.cached += 1
                return row["ms"], bool(row["estimated"])
        if self.prior is None or (self.prior.scaled_from is not None and self.scales is None):
            return None
        known = self.prior.cost(key, label)
        if known is None:
            return None
        ms, source = known
        self.from_prior += 1
        self.prior_units[source] = self.prior_units.get(source, 0) + 1
        return ms * (self.scales.of(label) if self.scales is not None else 1.0), False

    def prior_facts(self) -> dict[str, object]:
        """What the report says of the prior: its table and how many unit costs it gave, how many each of its
        tables gave (`tables`: the table, its device, units, and for a `Layer` the scale fitted onto the first
        and over how many shared units), and for another device's table, which device and how many units of it
        were measured here to scale it."""
        if not self.from_prior or self.prior is None:
            return {}
        used: list[dict[str, object]] = [
            {
                "table": self.prior.source,
                "device": self.prior.device.name,
                "units": self.prior_units.get(self.prior.source, 0),
            }
        ]
        for layer in self.prior.layers:
            if layer.source in self.prior_units:
                fit = {
                    "scale": layer.scales.overall,
                    "by_class": dict(layer.scales.by_class),
                    "shared": layer.scales.references,
                }
                used.append(
                    {"table": layer.source, "device": layer.device.name, "units": self.prior_units[layer.source], **fit}
                )
        facts: dict[str, object] = {"table": self.prior.source, "units": self.from_prior, "tables": used}
        if self.prior.scaled_from is not None and self.scales is not None:
            facts |= {"scaled_from": self.prior.scaled_from, "references": self.scales.references}
            facts |= {"scale": self.scales.overall, "by_class": dict(self.scales.by_class)}
        return {"prior": facts}

    def _carry_prior(self, new: Mapping[str, tuple[Graph, str]], uses: Mapping[str, int]) -> None:
        """Read `scales` for a prior of another device from up to `REFERENCE_UNITS` of the ``new`` units (key:
        graph, label) it holds: the costliest of each class first (by the table's cost times uses), then the
        costliest of the rest, each as this device's store has it measured or measured now. Only the units the
        search meets are references, so nothing is measured that it does not need."""
        held = sorted(
            (k for k in new if self.prior.costs.get(k, 0.0) > 0),  # a unit the table has at 0 says nothing
            key=lambda k: -self.prior.costs[k] * uses[k],
        )
        classes, picked = set(), []
        for k in held:  # one of each class first
            if unit_class(new[k][1]) not in classes:
                classes.add(unit_class(new[k][1]))
                picked.append(k)
        picked = (picked + [k for k in held if k not in picked])[:REFERENCE_UNITS]
        unmeasured = []
        for k in picked:
            row = cache.cost(self.db, self.key, k) if self.db is not None and not self.refresh else None
            if row is not None and not row["estimated"]:
                self.memo[k] = (row["ms"], False)
                self.cached += 1
            else:
                unmeasured.append((k, *new[k]))
        self._new(unmeasured)
        self.scales = Scales.read(
            [(new[k][1], self.memo[k][0], self.prior.costs[k]) for k in picked if not self.memo[k][1]]
        )

    def _new(self, found: Sequence[tuple[str, Graph, str]]) -> None:
        """Cost units (key, graph, label) nothing knows into `memo`: measured side by side (and stored), or
        estimated where they may not be: no time left, a symbolic shape or no type at all (a custom op's output
        neither onnx nor onnxruntime typed), or output shapes that follow the values of what the unit reads
        (`shape_follows_values`). A batch that onnxruntime fails is measured again
        unit by unit, so that only a unit that cannot run alone is estimated, with the error as its note."""
        measurable = []
        for key, ug, label in found:
            if (
                not self.measure
                or key in self.unmeasured
                or self._out_of_time()
                or not all_static(ug.types, ug.values())
                or shape_follows_values(ug)
            ):
                self.memo[key] = (self.calibration.estimate(ug), True)  # not stored: a later run decides again
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
        for (key, ug, _), (ms, estimated, _) in zip(measurable, costs):
            if not estimated:
                self.measured += 1
                self.samples[key] = (ug, [ms])
        self._record([(key, label, *cost) for (key, _, label), cost in zip(measurable, costs)])

    def _out_of_time(self) -> bool:
        """Whether measuring has used the seconds `measure_until` allows."""
        return self.measure_until is not None and self.measuring_s >= self.measure_until

    def _record(self, costs: Sequence[tuple[str, str, float, bool, str]]) -> None:
        """Keep unit costs (key, label, ms, estimated, note) in `memo` and the store."""
        for key, _, ms, estimated, _ in costs:
            self.memo[key] = (ms, estimated)
        if self.db is not None:
            cache.keep_costs(self.db, self.key, costs)

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
        self._record([(c.key, c.label, c.ms, False, "") for c in heavy])

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
        if self.prior is not None and self.prior.scaled_from is not None and self.scales is None:
            self._carry_prior(new, uses)
            new = {k: v for k, v in new.items() if k not in self.memo}  # the references, measured
        rest = []
        for key, (ug, label) in new.items():
            known = self._known(key, label)
            if known is None:
                rest.append((key, ug, label))
            else:
                self.memo[key] = known
        rest, twins = self._twinned(rest)
        rest.sort(key=lambda r: -self.calibration.estimate(r[1]) * uses[r[0]])  # stable: graph order on ties
        for start in range(0, len(rest), MEASURE_BATCH):
            self._new(rest[start : start + MEASURE_BATCH])
            if progress is not None and self.measure:  # estimates take no time to show
                progress(min(start + MEASURE_BATCH, len(rest)), len(rest))
        for key, label, source in twins:
            ms, estimated = self.memo[source]
            if estimated:
                self.memo[key] = (ms, True)  # not stored, as `_new` leaves an estimate
            else:
                self.samples[key] = self.samples[source]  # one list of measurements: settled together
                self._record([(key, label, ms, False, "")])

    def _twinned(
        self, rest: Sequence[tuple[str, Graph, str]]
    ) -> tuple[list[tuple[str, Graph, str]], list[tuple[str, str, str]]]:
        """``rest`` split into the units to cost and those (key, label, twin's key) whose `twin_key` a unit costed
        here or earlier in ``rest`` has: they cost what it costs, and are not measured again. A unit left to estimate
        (`unmeasured`) is no twin's source: one a rewrite touches is measured."""
        first, twins = [], []
        for key, ug, label in rest:
            source = key if key in self.unmeasured else self.twins.setdefault(twin_key(ug), key)
            if source == key:
                first.append((key, ug, label))
            else:
                twins.append((key, label, source))
        return first, twins

    def _keyed(self, g: Graph) -> list[tuple[str, Graph | None, str]]:
        """(key, graph where new to this model, label) of each unit of ``g`` (shapes folded where static)."""
        if id(g) in self.prefetched:  # the graph is held there, so no other graph has its id meanwhile
            return self.prefetched[id(g)][1]
        g = fold_static_shapes(g)
        ids, constant, reading = self.contexts.of(g)
        keyed: list[tuple[str, Graph | None, str]] = []
        for unit in units(g, constant):
            if reading and not reading.isdisjoint(map(id, unit.nodes)):
                keyed.append((*self._key(g, unit), unit.label))
                continue
            nodes = tuple([ids[id(n)] for n in unit.nodes])
            known = self.unit_keys.get(nodes)
            if known is None:
                key, ug = self._key(g, unit)
                self.unit_keys[nodes] = (key, unit.label)
                keyed.append((key, ug, unit.label))
            else:
                keyed.append((known[0], None, known[1]))  # keyed before: `_key` remembers it, its cost is known
        return keyed

    def prefetch(self, graphs: Sequence[Graph]) -> None:
        """Cost the units of ``graphs`` that neither this model, the store nor the prior knows, all together
        (`_cost_new`: measured side by side, `MEASURE_BATCH` at a time), before the graphs are costed one by
        one: a search's candidates, each with a unit or two of its own, were measured one candidate at a time,
        every measurement paying a warm-up and a budget for one or two units (ResNet-50's cold search on the
        2-core CPU: 30 units in 34 s). What they cost is unchanged: a unit measures the same beside any others
        (`measure_marginals`), and is settled when a cost first counts it (`graph_cost`)."""
        self.prefetched = {id(g): (g, self._keyed(g)) for g in graphs}
        self._cost_new([k for _, keyed in self.prefetched.values() for k in keyed], None)

    def graph_cost(self, g: Graph, progress: Callable[[int, int], None] | None = None) -> GraphCost:
        """Predicted latency of one run of ``g`` (concrete shapes needed for measurements); ``progress`` hears
        (units costed, units to cost) after each unit neither this model, the store nor the prior knew."""
        by_key: dict[str, UnitCost] = {}
        keyed = self._keyed(g)
        self._cost_new(keyed, progress)
        for key, _, label in keyed:
            if key in by_key:
                by_key[key].count += 1
            else:
                by_key[key] = UnitCost(label, key, *self.memo[key])
        # settled only where first counted: a cost a search has compared with stays put, so that a warm run,
        # reading it from the store, makes the same comparisons (BERT-base: units of the search's candidates,
        # used once in a region, settled when the whole result was costed; the warm search then took another
        # path, to a rewrite the cold run had not timed end to end, and timed it: 22 s)
        self._settle([c for c in by_key.values() if c.key not in self.used])
        self.used.update(by_key)
        run = self.calibration.run_ms
        return GraphCost(run + sum(u.ms * u.count for u in by_key.values()), run, list(by_key.values()))


REFERENCE_UNITS = 8
"""Units of a prior of another device measured here to scale the rest by (`CostModel._carry_prior`): one
measurement (`MEASURE_BATCH`), a few seconds on a GPU."""
SETTLE_COUNT = 4
"""A unit a graph uses this many times is measured three times and costed at the median: one measurement in a
slow spell would count that often (NasRNN on the H100: 80 units of 7 kinds, every one 1.1-1.6x its cost in
an earlier run, the model +33 %)."""


def cost_table(costs: Iterable[UnitCost], top: int | None = None) -> Sequence[UnitCost]:
    ranked = sorted(costs, key=lambda u: -u.ms * u.count)
    return ranked[:top] if top else ranked
