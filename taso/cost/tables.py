"""Cost tables: unit costs measured on one device, written as JSON (`export_reference`), read back as
a cost model that measures nothing (`reference_model`, what CI costs with) or as the prior of a device
(`prior_for`): the tables shipped for known GPUs spare a cold run measuring what they hold, so it measures only
what they lack. A table of another device of the same provider (the H100's on an H200) is carried over by a short
calibration (`taso.cost.calibration.Scales`): a few of the units it holds are measured here, and the rest are
scaled by the ratios.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from taso.cost import cache
from taso.cost.calibration import Calibration
from taso.cost.model import CostModel
from taso.cost.profiler import DEFAULT_MODE, Device, Mode
from taso.errors import BadInput


@dataclass(frozen=True)
class Prior:
    """A shipped cost table (`export_reference`): its calibration and unit costs, taken where the store has
    none, so that a cold run measures only what the table lacks."""

    source: str
    device: Device
    calibration: Calibration
    costs: Mapping[str, float]
    scaled_from: str | None = None
    """The name of the device the table was measured on, where it is not this one (the same provider, another
    GPU): a lower-trust source, its costs taken only scaled by `taso.cost.calibration.Scales` read on this device."""


PRIORS = (Path(__file__).with_name("reference_costs.json"), Path(__file__).with_name("reference_costs_h200.json"))
"""The cost tables shipped with subst (one per known device, package data beside this module):
reference_costs.json, the H100's, first (the one carried to a GPU none is of), and reference_costs_h200.json, the
H200's (bench/h200-table.sh, every unit measured there); one not there yet is passed over."""


def prior_for(device: Device, mode: Mode = DEFAULT_MODE, tables: Sequence[Path] | None = None) -> Prior | None:
    """The first of ``tables`` (the shipped `PRIORS` by default) measured on a device of ``device``'s
    `Device.identity`, else the first measured on another device of its provider, to be scaled (`Prior.scaled_from`);
    None where there is none, or costs are timed in another ``mode`` (a table timed without CUDA graphs is no
    prior for costs timed with them). A GPU's table is never a CPU's prior, nor the reverse."""
    if mode.tag:
        return None
    read = [(path, *read_table(str(path))) for path in (PRIORS if tables is None else tables) if path.is_file()]
    for path, table_device, calibration, costs in read:
        if table_device.identity == device.identity:
            return Prior(str(path), table_device, calibration, costs)
    for path, table_device, calibration, costs in read:
        if table_device.provider == device.provider:
            return Prior(str(path), table_device, calibration, costs, scaled_from=table_device.name)
    return None


def read_table(path: str) -> tuple[Device, Calibration, dict[str, float]]:
    """The device, calibration and unit costs of a cost table (`export_reference`); `BadInput` (one line) for
    a file that is not one."""

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
    return device, calibration, ref["costs"]


def export_reference(model: CostModel, path: str) -> int:
    """Write ``model``'s measured unit costs (from its store) and calibration as a reference table (JSON), at
    the host's quick speed: what CI, which has no GPU, costs graphs with. Returns how many units it holds."""
    assert model.db is not None, "a reference table is exported from a store"
    k = model.host_scale()
    costs = {unit: ms * k for unit, ms in cache.measured_costs(model.db, model.key).items()}
    ref = {"device": model.device.__dict__, "calibration": model.calibration.at_host(k).__dict__, "costs": costs}
    with open(path, "w") as f:
        f.write(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    return len(costs)


def reference_model(path: str) -> CostModel:
    """A cost model that measures nothing: unit costs from a reference table written by `export_reference`,
    analytic estimates with that device's calibration for units the table lacks. A file that is not such a
    table is `BadInput` (one line), never a KeyError from deep in the cost model."""
    device, calibration, costs = read_table(path)
    return CostModel(device, None, measure=False, calibration=calibration, table=costs)
