"""Optimize a model: the passes from an ONNX file to its checked, rewritten copy."""

from taso.optimize.pipeline import COSTS_NOT_CACHED, PASSES, optimize
from taso.optimize.report import Progress, Report
from taso.optimize.run import Pass, Run, Settings
from taso.optimize.shapefold import abstract_values, fold_shapes

__all__ = [
    "COSTS_NOT_CACHED",
    "PASSES",
    "Pass",
    "Progress",
    "Report",
    "Run",
    "Settings",
    "abstract_values",
    "fold_shapes",
    "optimize",
]
