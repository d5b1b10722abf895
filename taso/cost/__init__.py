"""Costs: a graph's cost from fused units, measured in onnxruntime (the profiler) or read from tables.

The modules, in the order a unit's cost is found: `unit` (what a unit is, its key) over `fusion` (what
onnxruntime fuses), `measure` (timing units side by side), `estimate` (the analytic fallback) against a device's
`calibration`, `host` (the host's drifting speed), `cache` (the per-user cost cache's tables), `model` (the
`CostModel` that ties them together), `tables` (cost tables: exported, shipped, read back), `latency` (whole
models timed end to end, for the speedup guard), and `profiler` (onnxruntime sessions and their timings).
"""

from taso.cost.calibration import DEFAULT_CALIBRATION, Calibration
from taso.cost.fusion import ELEMENTWISE, EPILOGUES, REGION_CONTEXT, VIEWS
from taso.cost.host import HOST_ELASTICITY
from taso.cost.latency import (
    clearly_faster,
    interleaved_latency,
    interleaved_timings,
    lost_for_good,
    medians,
    model_latency,
)
from taso.cost.measure import fused_when_read, measure_marginal, read_on, replicate
from taso.cost.model import CostModel, GraphCost, cost_table
from taso.cost.profiler import Mode
from taso.cost.tables import export_reference, reference_model
from taso.cost.unit import graph_digest, unit_graph, unit_key, units

__all__ = [
    "Calibration",
    "CostModel",
    "DEFAULT_CALIBRATION",
    "ELEMENTWISE",
    "EPILOGUES",
    "GraphCost",
    "HOST_ELASTICITY",
    "Mode",
    "REGION_CONTEXT",
    "VIEWS",
    "clearly_faster",
    "cost_table",
    "export_reference",
    "fused_when_read",
    "graph_digest",
    "interleaved_latency",
    "interleaved_timings",
    "lost_for_good",
    "measure_marginal",
    "medians",
    "model_latency",
    "read_on",
    "reference_model",
    "replicate",
    "unit_graph",
    "unit_key",
    "units",
]
