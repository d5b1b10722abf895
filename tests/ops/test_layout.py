"""Concat, Split, Transpose and Reshape (taso/ops/layout.py) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from taso import ops
from taso.ir import TensorType

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.layout), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def test_split_refuses_sizes_that_do_not_add_up() -> None:
    with pytest.raises(ops.OpError, match="add up"):
        ops.infer(
            "Split",
            [TensorType("float32", (2, 6)), TensorType("int64", (2,))],
            {"axis": 1},
            [None, np.array([2, 3])],
            2,
        )
