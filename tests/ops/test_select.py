"""The selection ops (taso/ops/select.py) against onnxruntime, and their constant inputs read from and written
back to ONNX: Slice's starts, ends, axes and steps as exporters write them, Gather's indices."""

from __future__ import annotations

from pathlib import Path

import pytest

from taso import ops

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.select), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)
