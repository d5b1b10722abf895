"""The one round trip the ONNX tests share: a model through `optimize` with no rules, checked and valid."""

from __future__ import annotations

from pathlib import Path

import onnx

from taso.optimize import optimize
from taso.rules import store


def round_trip(src: Path, tmp_path: Path) -> Path:
    out, empty = tmp_path / "out.onnx", tmp_path / "empty.db"
    store.create(empty)  # no rules: these tests are about import, export and the check
    report = optimize(src, out, empty)
    assert report.check is not None and report.check.ok, report.check
    onnx.checker.check_model(str(out), full_check=True)
    return out
