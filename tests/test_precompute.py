"""Weight-only subgraphs computed once; and optimize never keeps a rewrite that measures slower."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import write_graph
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import cost, onnx_io, profiler
from taso.check import compare
from taso.optimize import _confirm_speedup, _quiet
from taso.precompute import precompute


def _bn_style(tmp: Path) -> Path:
    """A per-channel scale reaching a Conv's output through Unsqueeze -> Mul on weights, as in the onnx
    wheel's light Inception-v2: opaque ops, but weight-only, so computable once."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    s = numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "scale")
    nodes = [
        helper.make_node("Unsqueeze", ["scale", "axes"], ["s1"], name="unsq"),
        helper.make_node("Mul", ["s1", "two"], ["s2"], name="double"),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s2"], ["y"], name="scale_mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])],
        initializer=[
            w,
            s,
            numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    return write_graph(graph, tmp / "bn.onnx")


def test_weight_only_chain_becomes_one_initializer(tmp_path: Path) -> None:
    src = _bn_style(tmp_path)
    g = onnx_io.load_model(src)
    folded, removed = precompute(g)
    assert removed == 2 and [n.op for n in folded.nodes] == ["Conv", "Mul"]
    assert folded.data["s2"].array.shape == (4, 1, 1)
    np.testing.assert_allclose(folded.data["s2"].array.ravel(), 2 * g.data["scale"].array)
    out = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    assert compare(src, out, g).ok


def test_a_draw_from_weights_is_not_folded(tmp_path: Path) -> None:
    """Bernoulli draws anew in every run, even over weights: folded once, every run would give the same draw."""
    graph = helper.make_graph(
        [helper.make_node("Bernoulli", ["p"], ["b"]), helper.make_node("Add", ["x", "b"], ["y"])],
        "draw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.full(4, 0.5, np.float32), "p")],
    )
    g = onnx_io.load_model(write_graph(graph, tmp_path / "draw.onnx"))
    folded, removed = precompute(g)
    assert removed == 0 and [n.op for n in folded.nodes] == ["Bernoulli", "Add"]


def test_nothing_to_fold_is_a_no_op(bert_path: Path) -> None:
    g = onnx_io.load_model(bert_path)
    assert precompute(g) == (g, 0)


def test_a_rewrite_that_measures_slower_is_not_kept(tmp_path: Path) -> None:
    """relu(relu(x)) = relu(x): fifty Relus compute what one does, slower; the measurement must reject it."""
    one = onnx_io.load_model(_relu_chain(tmp_path, 1))
    many = onnx_io.load_model(_relu_chain(tmp_path, 50))
    model = cost.CostModel(profiler.pick_device("cpu"), None, calibration=cost.DEFAULT_CALIBRATION)
    files = {n: onnx_io.save_model(g, tmp_path / f"{n}.onnx") for n, g in (("one", one), ("many", many))}
    measured = _confirm_speedup((files["one"], files["many"]), one, many, model, _quiet)
    assert measured["kept_original"] and measured["after_ms"] > measured["before_ms"]
    measured = _confirm_speedup((files["many"], files["one"]), many, one, model, _quiet)
    assert "kept_original" not in measured


def _relu_chain(tmp: Path, n: int) -> Path:
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Relu", [prev], [f"r{i}" if i < n - 1 else "y"], name=f"relu{i}"))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])],
    )
    return write_graph(graph, tmp / f"chain{n}.onnx")


@given(dims=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
@settings(max_examples=15, deadline=None)
def test_static_shapes_fold_to_what_onnxruntime_computes(tmp_path_factory, dims: list[int], data) -> None:
    """Shape of a static tensor (with an exporter's ``start``/``end`` slice) becomes an initializer, and what
    is computed from it folds too; the model still computes the same. Shape is outside the catalogue, so its
    slice lives in the opaque node's attributes (BERT's `Shape(ids, start=1, end=2)` once folded to [1, 128])."""
    start = data.draw(st.integers(-len(dims), len(dims) - 1))
    end = data.draw(st.integers(start % len(dims) + 1, len(dims)))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=start, end=end),
        helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["x"], ["r"], keepdims=0),
        helper.make_node("Add", ["r", "f"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [end - start % len(dims)])],
    )
    tmp = tmp_path_factory.mktemp("shapes")
    src = write_graph(graph, tmp / "shapes.onnx")
    g = onnx_io.load_model(src)
    folded, removed = precompute(g)
    assert removed == 2 and [n.op for n in folded.nodes] == ["ReduceSum", "Add"]
    assert compare(src, onnx_io.save_model(folded, tmp / "folded.onnx"), g).ok
