"""subst as a library: rewrite an ONNX model with proved substitutions, called as ``onnxsim.simplify`` is.

    import onnx, taso
    model, report = taso.optimize(onnx.load("model.onnx"))
    print("\\n".join(report.lines()))

`load` and `save` read and write the IR (`taso.ir.Graph`); `verify` and `generate` build a rule store. Each is a
thin call into the library (`taso.api`). `optimize`, `verify` and `generate` are also the modules that implement
them (`taso.optimize.Settings`, `taso.verify.Summary`, `taso.generate.Result`): calling the module calls the API
function. The modules and what they need (onnx, onnxruntime, z3) are imported at first use, so ``import taso`` is
quick.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from taso import api
from taso.api import load, save
from taso.errors import BadInput, CheckFailed

__all__ = ["BadInput", "CheckFailed", "generate", "load", "optimize", "save", "verify"]

_CALLABLE = ("generate", "optimize", "verify")
"""Submodules that are also API functions."""


class _CallableModule(types.ModuleType):
    """A submodule that is also its API function: ``taso.optimize(model)`` and ``taso.optimize.Report`` both work.
    A plain function would not last: the import system binds a submodule onto its package as it loads it, so the
    first ``import taso.optimize`` (the library's own included) would replace the function with the module."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    """The `taso` package: makes each of `_CALLABLE` callable as the import system binds it here."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CALLABLE and isinstance(value, types.ModuleType):
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> types.ModuleType:
    """`taso.optimize`, `taso.verify`, `taso.generate`: imported at first use."""
    if name in _CALLABLE:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
