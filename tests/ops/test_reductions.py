"""The reductions (taso/ops/reductions.py) against onnxruntime, and their axes read from and written back to
either ONNX form (an attribute before ReduceSum-13 and ReduceMean-18, a constant input from then on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taso import ops

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.reductions), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)
