"""Cost tables: unit costs measured on one device, written as JSON (`export_reference`), read back as
a cost model that measures nothing (`reference_model`, what CI costs with) or as the prior of a device
(`prior_for`): the tables shipped for known GPUs spare a cold run measuring what they hold, so it measures only
what they lack. The prior is layered: the device's own table first, then the units only the provider's other
tables hold, scaled onto it by the ratios over the units both hold (`fit_scales`: the H200's table holds 4 corpus
models, the H100's the rest). A device no table is of (an A100) takes the first of its provider, carried over by
a short calibration (`taso.cost.calibration.Scales`): a few of the units it holds are measured here, and the rest
are scaled by the ratios."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from taso.cost import cache
from taso.cost.calibration import Calibration, Scales, unit_class
from taso.cost.model import CostModel
from taso.cost.profiler import DEFAULT_MODE, Device, Mode
from taso.errors import BadInput


@dataclass(frozen=True)
class Table:
    """A cost table as read (`read_table`): its device, calibration and unit costs (ms at its host's quick speed),
    and the labels of the units it names (a table exported before labels were kept names none)."""

    source: str
    device: Device
    calibration: Calibration
    costs: Mapping[str, float]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Layer:
    """Another shipped table of the prior's provider: the units the prior's own table lacks, each scaled onto
    that table's device by `scales`, fitted on the units both hold (`fit_scales`)."""

    source: str
    device: Device
    costs: Mapping[str, float]
    scales: Scales


@dataclass(frozen=True)
class Prior:
    """The shipped cost tables of a device's provider (`prior_for`): its own table's calibration and unit costs,
    then the units only the other tables hold (`layers`), taken where the store has none, so that a cold run
    measures only what no table holds."""

    source: str
    device: Device
    calibration: Calibration
    costs: Mapping[str, float]
    scaled_from: str | None = None
    """The name of the device the table was measured on, where it is not this one (the same provider, another
    GPU): a lower-trust source, its costs taken only scaled by `taso.cost.calibration.Scales` read on this device."""
    layers: tuple[Layer, ...] = ()
    """The provider's other tables, in `PRIORS` order: a unit the table lacks is costed from the first that
    holds it, at that table's cost times its `Layer.scales` (then, like the table's own, by `scaled_from`'s)."""

    def cost(self, key: str, label: str) -> tuple[float, str] | None:
        """The unit's cost at `device`'s speeds and the table it came from; None where no table holds it."""
        if key in self.costs:
            return self.costs[key], self.source
        for layer in self.layers:
            if key in layer.costs:
                return layer.costs[key] * layer.scales.of(label), layer.source
        return None


PRIORS = (Path(__file__).with_name("reference_costs.json"), Path(__file__).with_name("reference_costs_h200.json"))
"""The cost tables shipped with subst (one per known device, package data beside this module):
reference_costs.json, the H100's, first (the one carried to a GPU none is of), and reference_costs_h200.json, the
H200's (bench/h200-table.sh: 1,042 units of 4 corpus models measured there, 515 of them labelled by
models/prior_coverage.py --labels); one not there yet is passed over."""

FIT_LEAST = 20
"""Units two tables must share for a scale between them (`fit_scales`), overall and for a class of its own: the
H100's and the H200's share 551, whose ratios (H200 over H100) spread 0.63-1.24 (5th-95th percentile) around
1.02; by class (334 of them labelled) from 0.68 (Concat) to 1.16 (Relu), which cuts the median error of one
ratio for all from 12 % to 8 % on them."""


def prior_for(device: Device, mode: Mode = DEFAULT_MODE, tables: Sequence[Path] | None = None) -> Prior | None:
    """The prior of ``device`` from ``tables`` (the shipped `PRIORS` by default), of its provider only (a GPU's
    table is never a CPU's prior, nor the reverse): the first measured on a device of its `Device.identity`
    (whatever the others hold), else the first of its provider, to be scaled (`Prior.scaled_from`); each other
    table is a `Layer` scaled onto it, where they share enough units to fit a scale. None where no table is of
    the provider, or costs are timed in another ``mode`` (a table timed without CUDA graphs is no prior for costs
    timed with them)."""
    if mode.tag:
        return None
    paths = PRIORS if tables is None else tables
    same = [t for t in (read_table(str(p)) for p in paths if p.is_file()) if t.device.provider == device.provider]
    if not same:
        return None
    own = next((t for t in same if t.device.identity == device.identity), None)
    first = own or same[0]
    layers = []
    for table in same:
        scales = None if table is first else fit_scales(first, table)
        if scales is not None:
            layers.append(Layer(table.source, table.device, table.costs, scales))
    scaled_from = None if own is not None else first.device.name
    return Prior(first.source, first.device, first.calibration, first.costs, scaled_from, tuple(layers))


def fit_scales(to: Table, other: Table) -> Scales | None:
    """What ``other``'s costs are multiplied by to stand beside ``to``'s: `Scales.fit` over the units both hold
    (by class where a table labels them), at least `FIT_LEAST`; None where they share fewer."""
    labels = {**other.labels, **to.labels}
    shared = [k for k in other.costs if k in to.costs]
    return Scales.fit([(unit_class(labels.get(k, "")), to.costs[k], other.costs[k]) for k in shared], FIT_LEAST)


def read_table(path: str) -> Table:
    """The cost table (`export_reference`) at ``path``; `BadInput` (one line) for a file that is not one."""

    def number(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0

    try:
        with open(path, encoding="utf-8") as f:
            ref = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read the cost table ({e.strerror})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not a cost table (not UTF-8 text; `export_reference` writes JSON)") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not a cost table (not JSON: {e})") from None
    if not isinstance(ref, dict) or not all(isinstance(ref.get(k), dict) for k in ("device", "calibration", "costs")):
        raise BadInput(f"{path}: not a cost table (a JSON object of device, calibration and costs expected)")
    try:
        device, calibration = Device(**ref["device"]), Calibration(**ref["calibration"])
    except TypeError as e:  # a field missing or unknown
        raise BadInput(f"{path}: not a cost table ({e})") from None
    if not all(isinstance(v, str) for v in device.__dict__.values()):
        raise BadInput(f"{path}: not a cost table (the device's fields are text)")
    if not all(number(v) for v in calibration.__dict__.values()) or min(calibration.gflops, calibration.gbps) <= 0:
        raise BadInput(f"{path}: not a cost table (the calibration's fields are numbers, its ceilings positive)")
    if not all(isinstance(k, str) and number(v) for k, v in ref["costs"].items()):
        raise BadInput(f"{path}: not a cost table (costs map unit keys to milliseconds)")
    labels = ref.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise BadInput(f"{path}: not a cost table (labels map unit keys to text)")
    return Table(path, device, calibration, ref["costs"], labels)


def export_reference(model: CostModel, path: str) -> int:
    """Write ``model``'s measured unit costs (from its store), their labels and calibration as a reference table
    (JSON), at the host's quick speed: what CI, which has no GPU, costs graphs with. Returns how many units it
    holds."""
    assert model.db is not None, "a reference table is exported from a store"
    k = model.host_scale()
    costs = {unit: ms * k for unit, ms in cache.measured_costs(model.db, model.key).items()}
    ref = {"device": model.device.__dict__, "calibration": model.calibration.at_host(k).__dict__, "costs": costs}
    ref["labels"] = cache.measured_labels(model.db, model.key)  # what a scale between tables is fitted by class on
    with open(path, "w") as f:
        f.write(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    return len(costs)


def reference_model(path: str) -> CostModel:
    """A cost model that measures nothing: unit costs from a reference table written by `export_reference`,
    analytic estimates with that device's calibration for units the table lacks. A file that is not such a
    table is `BadInput` (one line), never a KeyError from deep in the cost model."""
    table = read_table(path)
    return CostModel(table.device, None, measure=False, calibration=table.calibration, table=table.costs)
