"""AveragePool and MaxPool (taso/ops/pooling.py) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taso import ops

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.pooling), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    k=st.integers(1, 3),
    s=st.integers(1, 2),
    pads=st.tuples(*[st.integers(0, 1)] * 4),
    avg=st.booleans(),
    include=st.integers(0, 1),
)
def test_pool_semantics_match_onnxruntime(k: int, s: int, pads: tuple, avg: bool, include: int, tmp_path: Path) -> None:
    if max(pads) >= k:
        return  # ONNX requires pads smaller than the kernel
    attrs = {"kernel_shape": (k, k), "strides": (s, s), "pads": pads}
    if avg:
        attrs["count_include_pad"] = include
    agree("AveragePool" if avg else "MaxPool", [(1, 2, 6, 5)], attrs, {}, 1, tmp_path)
