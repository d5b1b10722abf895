"""onnxruntime's fused kernels (taso/ops/fused.py) against its CPU provider: numpy semantics, shape rule, the
``com.microsoft`` domain on export and back on import."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import ops
from taso.ir import TensorType

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.fused), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def _fast_gelu_model(path: Path, domain: str, outputs: int = 1) -> Path:
    """One FastGelu (or a SkipLayerNormalization with ``outputs`` outputs) in ``domain``, for import."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    ys = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2, 4]) for i in range(outputs)]
    if outputs == 1:
        node = helper.make_node("FastGelu", ["x"], ["y0"], domain=domain)
        weights = []
    else:  # its input_skip_bias_sum (output 3) used: mean and inv_std_var left out
        node = helper.make_node("SkipLayerNormalization", ["x", "x", "g"], ["y0", "", "", "y1"], domain=domain)
        weights = [numpy_helper.from_array(np.ones(4, np.float32), "g")]
    graph = helper.make_graph([node], "g", [x], ys, weights)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    onnx.save_model(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def test_a_fused_kernel_is_the_catalogue_op_only_in_onnxruntimes_domain(tmp_path: Path) -> None:
    """A node named as a fused kernel in another domain is another op: it stays opaque, written back as read."""
    ours = onnx_io.load_model(_fast_gelu_model(tmp_path / "ort.onnx", ops.CONTRIB)).nodes[0]
    assert not ours.is_opaque and ours.op == "FastGelu"
    other = onnx_io.load_model(_fast_gelu_model(tmp_path / "other.onnx", "com.example")).nodes[0]
    assert other.is_opaque and other.domain == "com.example"


def test_a_skip_norm_whose_extra_output_is_used_stays_opaque(tmp_path: Path) -> None:
    """Only output 0 is modelled: a rewrite must not drop the skip sum a later node reads."""
    node = onnx_io.load_model(_fast_gelu_model(tmp_path / "sum.onnx", ops.CONTRIB, outputs=2)).nodes[0]
    assert node.is_opaque and node.op == "SkipLayerNormalization"


def test_a_skip_norm_takes_dims_named_twice_and_refuses_sizes_that_differ() -> None:
    """The transformers optimizer's BERT names one dim unk__1 in the input and unk__2 in the skip: one norm. Two
    different sizes are no skip connection."""
    vec = TensorType("float32", (4,))
    named = [TensorType("float32", ("batch", "unk__1", 4)), TensorType("float32", ("batch", "unk__2", 4)), vec]
    assert ops.infer("SkipLayerNormalization", named, {"epsilon": 1e-5}) == (named[0],)
    with pytest.raises(ops.OpError, match="one 2-D or 3-D shape"):
        sizes = [TensorType("float32", (2, 3, 4)), TensorType("float32", (2, 5, 4)), vec]
        ops.infer("SkipLayerNormalization", sizes, {"epsilon": 1e-5})
