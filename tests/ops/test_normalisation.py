"""The normalisation layers and the BatchNormalization folds (taso/ops/normalisation.py) against onnxruntime:
the fold ops, which have no ONNX form, against what they fold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taso import onnx as onnx_io
from taso import ops
from taso.execute import Runner
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs

from .cases import agree, onnxruntime_cases, run_graph


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.normalisation), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def test_channel_vector_refuses_a_tensor_that_is_not_per_channel() -> None:
    with pytest.raises(ops.OpError, match="per-channel tensor"):
        ops.infer("ChannelVector", [TensorType("float32", (4, 1, 3))], {})


@pytest.mark.parametrize(("op", "extra"), [("LayerNormalization", [TensorType("float32", (4,))]), ("Softmax", [])])
@pytest.mark.parametrize("axis", [2, -3])
def test_an_axis_outside_the_rank_is_refused_at_inference(op: str, extra: list, axis: int) -> None:
    """A mutation test built LayerNormalization over [2, 4] with axis 2: accepted by the shape rule, it failed
    only when run. Both ends of the range are checked; the in-range axes still infer."""
    x = TensorType("float32", (2, 4))
    with pytest.raises(ops.OpError, match="out of range"):
        ops.infer(op, [x, *extra], {"axis": axis, "epsilon": 1e-5})
    for ok in (-2, -1, 0, 1):
        assert ops.infer(op, [x, *extra], {"axis": ok, "epsilon": 1e-5}) == (x,)


@settings(max_examples=10, deadline=None)
@given(
    group=st.sampled_from([1, 2]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 1),
    bias=st.booleans(),
    eps=st.sampled_from([1e-5, 1e-3]),
)
def test_folded_batchnorm_weights_compute_what_onnxruntime_computes_unfolded(
    group: int, stride: int, pad: int, bias: bool, eps: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Conv(x, BnKernel(w, scale, var), BnBias(scale, bias, mean, var[, b])) against Conv then
    BatchNormalization in onnxruntime, for grouped, strided, padded, biased convs."""
    rng = np.random.default_rng(group * 100 + stride * 10 + pad + bias)
    c, m = 4, 6
    x = rng.standard_normal((1, c, 7, 7)).astype(np.float32)
    w = rng.standard_normal((m, c // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    scale, shift, mean = (rng.standard_normal(m).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.1, 2.0, m).astype(np.float32)
    attrs = {"kernel_shape": (3, 3), "strides": (stride,) * 2, "pads": (pad,) * 4, "dilations": (1, 1), "group": group}
    conv_in = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = (
        Node("Conv", tuple(conv_in), ("y",), make_attrs(attrs)),
        Node("BatchNormalization", ("y", "s", "t", "mu", "v"), ("z",), make_attrs({"epsilon": eps})),
    )
    params = {"w": w, "b": b, "s": scale, "t": shift, "mu": mean, "v": var}
    names = tuple(k for k in params if k != "b" or bias)
    types = {k: TensorType("float32", params[k].shape) for k in names}
    types |= {"x": TensorType("float32", x.shape)}
    out = ops.infer("Conv", [types[v] for v in conv_in], attrs)[0]
    types |= {"y": out, "z": out}
    g = Graph(nodes, ("x",), ("z",), types, names, {k: WeightData(params[k]) for k in names})
    path = onnx_io.save_model(g, tmp_path_factory.mktemp("bn") / "bn.onnx")
    want = Runner(path)({"x": x})["z"]
    kernel = ops.get("BnKernel").run([w, scale, var], {"epsilon": eps})[0]
    folded_bias = ops.get("BnBias").run([scale, shift, mean, var, *([b] if bias else [])], {"epsilon": eps})[0]
    got = ops.get("Conv").run([x, kernel, folded_bias], attrs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=8, deadline=None)
@given(mul=st.booleans(), add=st.booleans(), eps=st.sampled_from([1e-5, 1e-3]))
def test_a_per_channel_mul_and_add_fold_into_the_batchnorm_before_them(
    mul: bool, add: bool, eps: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """BatchNormalization then Mul and/or Add by (C, 1, 1) weights in onnxruntime, against one BatchNormalization
    whose scale and bias the catalogue's ChannelVector, Mul and Add computed (what the always rules fold)."""
    rng = np.random.default_rng(mul * 2 + add)
    c = 5
    x = rng.standard_normal((2, c, 4, 3)).astype(np.float32)
    scale, shift, mean, k, t = (rng.standard_normal(c).astype(np.float32) for _ in range(5))
    var = rng.uniform(0.1, 2.0, c).astype(np.float32)
    params = {"s": scale, "t": shift, "mu": mean, "v": var, "k": k.reshape(c, 1, 1), "a": t.reshape(c, 1, 1)}
    nodes = [Node("BatchNormalization", ("x", "s", "t", "mu", "v"), ("z0",), make_attrs({"epsilon": eps}))]
    if mul:
        nodes.append(Node("Mul", (nodes[-1].outputs[0], "k"), ("z1",)))
    if add:
        nodes.append(Node("Add", ("a", nodes[-1].outputs[0]), ("z2",)))
    used = {v for n in nodes for v in n.inputs}
    want = run_graph(
        tuple(nodes),
        x,
        {n: v for n, v in params.items() if n in used},
        nodes[-1].outputs[0],
        tmp_path_factory.mktemp("affine"),
    )
    vector = ops.get("ChannelVector")
    if mul:
        kv = vector.run([params["k"]], {})[0]
        scale, shift = (ops.get("Mul").run([p, kv], {})[0] for p in (scale, shift))
    if add:
        shift = ops.get("Add").run([shift, vector.run([params["a"]], {})[0]], {})[0]
    got = ops.get("BatchNormalization").run([x, scale, shift, mean, var], {"epsilon": eps})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
