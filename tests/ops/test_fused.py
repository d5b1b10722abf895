"""onnxruntime's fused kernels (taso/ops/fused.py) against its CPU provider: numpy semantics, shape rule, the
``com.microsoft`` domain on export and back on import."""

from __future__ import annotations

from pathlib import Path

import pytest

from taso import ops

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.fused), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)
