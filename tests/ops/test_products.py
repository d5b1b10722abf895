"""MatMul, Gemm, Conv and BlockDiagonal (taso/ops/products.py) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taso import ops
from taso.ir import Node, TensorType, make_attrs

from .cases import agree, onnxruntime_cases, run_graph


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.products), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


_conv = st.fixed_dictionaries(
    {
        "kh": st.sampled_from([1, 3]),
        "kw": st.sampled_from([1, 3]),
        "sh": st.integers(1, 2),
        "sw": st.integers(1, 2),
        "pads": st.tuples(*[st.integers(0, 1)] * 4),
        "dil": st.integers(1, 2),
        "group": st.sampled_from([1, 2]),
        "bias": st.booleans(),
        "h": st.integers(5, 7),
        "w": st.integers(5, 7),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=_conv)
def test_conv_semantics_match_onnxruntime(c: dict, tmp_path: Path) -> None:
    shapes = [(2, 4, c["h"], c["w"]), (6, 4 // c["group"], c["kh"], c["kw"])] + ([(6,)] if c["bias"] else [])
    attrs = {
        "kernel_shape": (c["kh"], c["kw"]),
        "strides": (c["sh"], c["sw"]),
        "pads": c["pads"],
        "dilations": (c["dil"], c["dil"]),
        "group": c["group"],
    }
    agree("Conv", shapes, attrs, {}, 1, tmp_path)


def test_auto_pad_is_resolved_to_explicit_pads(tmp_path: Path) -> None:
    d = ops.get("Conv")
    x, w = TensorType("float32", (1, 2, 7, 7)), TensorType("float32", (3, 2, 3, 3))
    attrs = d.from_onnx({"auto_pad": "SAME_UPPER", "strides": (2, 2)}, [x, w], 2, 17)
    assert attrs["pads"] == (1, 1, 1, 1) and "auto_pad" not in attrs
    dyn = TensorType("float32", ("n", 2, "h", "w"))
    assert "dynamic" in d.from_onnx({"auto_pad": "SAME_LOWER"}, [dyn, w], 2, 17)


def test_product_shape_rules_refuse_bad_inputs() -> None:
    f32 = lambda *s: TensorType("float32", s)  # noqa: E731
    with pytest.raises(ops.OpError, match="inner dimensions"):
        ops.infer("MatMul", [f32(2, 3), f32(4, 5)], {})
    with pytest.raises(ops.OpError, match="channels"):
        ops.infer(
            "Conv",
            [f32(1, 3, 5, 5), f32(4, 2, 3, 3)],
            ops.get("Conv").from_onnx({}, [f32(1, 3, 5, 5), f32(4, 2, 3, 3)], 2, 17),
        )
    with pytest.raises(ops.OpError, match="do not split into 4 groups"):
        ops.infer("BlockDiagonal", [f32(6, 2, 3, 3)], {"group": 4})
    with pytest.raises(ops.OpError, match="of at least 2"):  # plain already: a rewrite would change nothing
        ops.infer("BlockDiagonal", [f32(6, 2, 3, 3)], {"group": 1})


@settings(max_examples=10, deadline=None)
@given(
    group=st.sampled_from([2, 3, 6]),
    per=st.integers(1, 2),
    kernel=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    bias=st.booleans(),
)
def test_a_block_diagonal_kernel_makes_a_plain_conv_compute_the_grouped_one(
    group: int, per: int, kernel: int, stride: int, bias: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Conv(x, BlockDiagonal(w){group}) with group 1, by the catalogue, against the grouped Conv in onnxruntime."""
    rng = np.random.default_rng(group * 100 + per * 10 + kernel + stride)
    x = rng.standard_normal((1, per * group, 6, 5)).astype(np.float32)
    w = rng.standard_normal((2 * group, per, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(2 * group).astype(np.float32)
    pad = kernel // 2
    attrs = {"kernel_shape": (kernel,) * 2, "strides": (stride,) * 2, "pads": (pad,) * 4, "dilations": (1, 1)}
    params = {"w": w, "b": b} if bias else {"w": w}
    conv = Node("Conv", ("x", *params), ("y",), make_attrs({**attrs, "group": group}))
    want = run_graph((conv,), x, params, "y", tmp_path_factory.mktemp("dense"))
    dense = ops.get("BlockDiagonal").run([w], {"group": group})[0]
    assert dense.shape == (2 * group, per * group, kernel, kernel)
    got = ops.get("Conv").run([x, dense, *([b] if bias else [])], {**attrs, "group": 1})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("shapes", "attrs", "message"),
    [
        ([(2, 4), (3, 5)], {"transB": 0}, "inner dimensions 4 and 3"),
        ([(2, 4), (3, 4), (2, 2)], {"transB": 1}, "broadcast"),
        ([(2, 4), (4, 3), (3, 1, 1)], {"transB": 0}, "does not broadcast to"),
    ],
)
def test_gemm_refuses_operands_that_do_not_fit(shapes: list, attrs: dict, message: str) -> None:
    full = {"alpha": 1.0, "beta": 1.0, "transA": 0, **attrs}
    with pytest.raises(ops.OpError, match=message):
        ops.infer("Gemm", [TensorType("float32", s) for s in shapes], full)


def test_gemm_over_the_field_is_its_semantics_mod_p_and_refuses_fractions() -> None:
    rng = np.random.default_rng(0)
    xs = [rng.integers(0, ops.P, s) for s in ((3, 4), (5, 4), (5,))]
    attrs = {"alpha": 3.0, "beta": 2.0, "transA": 0, "transB": 1}
    exact = (3 * (xs[0].astype(object) @ xs[1].T.astype(object)) + 2 * xs[2].astype(object)) % ops.P
    (y,) = ops.GEMM.field(xs, attrs, 1, 0)  # type: ignore[misc]
    assert np.array_equal(y.astype(object), exact)
    with pytest.raises(ops.OpError, match="fractional"):
        ops.GEMM.field(xs, {**attrs, "alpha": 0.5}, 1, 0)  # type: ignore[misc]
