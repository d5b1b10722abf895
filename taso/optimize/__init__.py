"""Optimize a model: the passes from an ONNX file to its checked, rewritten copy."""

from taso.optimize.pipeline import COSTS_NOT_CACHED, Progress, Report, Settings, optimize
from taso.optimize.shapefold import abstract_values, fold_shapes

__all__ = [
    "COSTS_NOT_CACHED",
    "Progress",
    "Report",
    "Settings",
    "abstract_values",
    "fold_shapes",
    "optimize",
]
