"""Exp, Sqrt and Pow (taso/ops/powers.py) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest

from taso import ops

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.powers), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)
