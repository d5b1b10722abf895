"""The host's speed, which drifts: a batch-1 run is bound by the host, so every unit measurement is scaled to the
host speed seen at calibration (`to_calibrated_host`) and reports give latencies at the host's quick speed, read
from the reference runs the cost cache logs beside each measurement (`HOST_LOG`, `QUICK_QUANTILE`).
"""

from __future__ import annotations

from collections.abc import Sequence

from taso.cost.calibration import Calibration
from taso.cost.profiler import Timing

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


HOST_LOG = 500
"""How many of a device's latest reference runs its quick speed is read from: enough to span the minutes-long
slow spells of a shared host (a unit measurement logs one, every 50-400 ms), few enough to follow a store moved
to another host."""
QUICK_QUANTILE = 0.1
"""Which quantile of the logged reference runs is the host's quick speed. The H100 host is bimodal: the
reference ran 0.062-0.066 ms or 0.089-0.110 ms, switching within seconds, whatever was timed beside it
(bench_yardstick.py), and the share of slow runs moved from minutes to minutes (a median of one run's log
read 0.059, another's 0.087). The quick mode is what the host can do, the same in every run."""


def quick_reference_ms(seen: Sequence[float]) -> float:
    """The host's quick speed: the `QUICK_QUANTILE` of the reference runs ``seen`` (at least one)."""
    return sorted(seen)[int(QUICK_QUANTILE * (len(seen) - 1))]
