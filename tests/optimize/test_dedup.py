"""Repeated operations merged (taso.optimize.dedup): a node that repeats an earlier one is read from it, what it
computes unchanged (onnxruntime runs both graphs alike), and never where the values could differ or a name must
stay: random draws, custom-domain ops, graph outputs, values a subgraph reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper, save_model

from taso import onnx as onnx_io
from taso.optimize.dedup import merge_duplicates

n = helper.make_node


def _model(tmp: Path, nodes: list, outputs: list[str], name: str = "m.onnx") -> Path:
    """A model of ``nodes`` over ``x`` [batch, 8] (float) with int64 constants, its ``outputs`` float [batch, 8]."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in {"i0": [0], "i1": [1], "k": [2, 4]}.items()]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["batch", 8]) for o in outputs],
        inits,
    )
    path = tmp / name
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _run(path: Path, batch: int = 3) -> list[np.ndarray]:
    x = np.random.default_rng(0).standard_normal((batch, 8)).astype(np.float32)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _merged(tmp: Path, path: Path) -> tuple[Path, int, int]:
    g, _ = onnx_io.import_model(path)
    out, removed = merge_duplicates(g)
    saved = tmp / f"merged-{path.name}"
    onnx_io.save_model(out, saved)
    return saved, removed, len(out.nodes)


def _reshapes_twice(op: str = "Shape", domain: str = "") -> list:
    """Two copies of ``Reshape(x, shape-of-x)`` chains, the shape taken by ``op`` (a Shape: the same values twice)."""
    return [
        n(op, ["x"], ["s1"], domain=domain),
        n(op, ["x"], ["s2"], domain=domain),
        n("Reshape", ["x", "s1"], ["r1"]),
        n("Reshape", ["x", "s2"], ["r2"]),
        n("Relu", ["r1"], ["a"]),
        n("Relu", ["r2"], ["b"]),
        n("Add", ["a", "b"], ["y"]),
    ]


def test_a_repeated_chain_is_computed_once_and_computes_the_same(tmp_path: Path) -> None:
    path = _model(tmp_path, _reshapes_twice(), ["y"])
    merged, removed, left = _merged(tmp_path, path)
    assert removed == 3 and left == 4  # each copy of Shape, Reshape and Relu merged into the first, in a chain
    for batch in (1, 3):
        np.testing.assert_array_equal(_run(merged, batch)[0], _run(path, batch)[0])


def test_random_draws_are_never_merged(tmp_path: Path) -> None:
    nodes = [
        n("RandomNormalLike", ["x"], ["d1"]),
        n("RandomNormalLike", ["x"], ["d2"]),
        n("Sub", ["d1", "d2"], ["y"]),  # not zero: two draws
    ]
    g, _ = onnx_io.import_model(_model(tmp_path, nodes, ["y"]))
    out, removed = merge_duplicates(g)
    assert removed == 0 and out is g


def test_custom_domain_ops_are_never_merged(tmp_path: Path) -> None:
    nodes = [
        n("Mystery", ["x"], ["m1"], domain="com.example"),
        n("Mystery", ["x"], ["m2"], domain="com.example"),
        n("Add", ["m1", "m2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    path = tmp_path / "custom.onnx"
    save_model(helper.make_model(graph, opset_imports=opsets), str(path))
    g, _ = onnx_io.import_model(path)
    out, removed = merge_duplicates(g)
    assert removed == 0 and sum(x.op == "Mystery" for x in out.nodes) == 2


def test_a_repeat_that_is_a_graph_output_keeps_its_name(tmp_path: Path) -> None:
    nodes = [n("Relu", ["x"], ["a"]), n("Relu", ["x"], ["b"])]
    g, _ = onnx_io.import_model(_model(tmp_path, nodes, ["a", "b"]))
    out, removed = merge_duplicates(g)
    assert removed == 0 and out is g  # nothing gained: the graph is handed back, no step to validate


def test_bodies_that_draw_are_never_merged(tmp_path: Path) -> None:
    """Two equal Ifs whose branches draw (reading nothing outside): merged, their difference would be zero."""

    def branch(tag: str) -> object:
        out = helper.make_tensor_value_info(tag, TensorProto.FLOAT, [3, 8])
        return helper.make_graph([n("RandomNormal", [], [tag], shape=[3, 8])], tag, [], [out])

    nodes = [
        n("ReduceSum", ["x"], ["s"], keepdims=0),
        n("Greater", ["s", "s"], ["c"]),
        n("If", ["c"], ["d1"], then_branch=branch("t"), else_branch=branch("e")),
        n("If", ["c"], ["d2"], then_branch=branch("t"), else_branch=branch("e")),
        n("Sub", ["d1", "d2"], ["d"]),
        n("Add", ["x", "d"], ["y"]),
    ]
    g, _ = onnx_io.import_model(_model(tmp_path, nodes, ["y"]))
    out, removed = merge_duplicates(g)
    assert removed == 0 and sum(x.op == "If" for x in out.nodes) == 2


def test_a_value_a_subgraph_reads_keeps_its_name(tmp_path: Path) -> None:
    then = helper.make_graph(
        [n("Identity", ["b"], ["t"])], "then", [], [helper.make_tensor_value_info("t", 1, ["batch", 8])]
    )
    other = helper.make_graph(
        [n("Identity", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", 1, ["batch", 8])]
    )
    nodes = [
        n("Relu", ["x"], ["a"]),
        n("Relu", ["x"], ["b"]),
        n("ReduceSum", ["a"], ["sa"], keepdims=0),
        n("Greater", ["sa", "sa"], ["c"]),
        n("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    path = _model(tmp_path, nodes, ["y"])
    merged, removed, _ = _merged(tmp_path, path)
    assert removed == 0
    np.testing.assert_array_equal(_run(merged)[0], _run(path)[0])


UNARY = ("Relu", "Neg", "Abs", "Sigmoid", "Shape")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(UNARY), st.integers(0, 10)), min_size=1, max_size=12))
def test_merging_never_changes_what_a_model_computes(tmp_path_factory, picks: list[tuple[str, int]]) -> None:
    """Random chains over earlier values (each node reads one of the values so far, so repeats are common); the
    merged model computes every output as the original does, and no two of its nodes repeat each other."""
    tmp = tmp_path_factory.mktemp("dedup")
    floats, nodes, outs = ["x"], [], []
    for i, (op, k) in enumerate(picks):
        src = floats[k % len(floats)]
        if op == "Shape":
            nodes += [n("Shape", [src], [f"s{i}"]), n("Reshape", [src, f"s{i}"], [f"v{i}"])]
        else:
            nodes.append(n(op, [src], [f"v{i}"]))
        floats.append(f"v{i}")
    nodes.append(n("Sum", floats[1:], ["y"]))
    outs.append("y")
    path = _model(tmp, nodes, outs)
    merged, _, _ = _merged(tmp, path)
    np.testing.assert_array_equal(_run(merged)[0], _run(path)[0])
    g, _ = onnx_io.import_model(merged)
    keys = [(x.op, x.inputs, x.attrs) for x in g.nodes]
    assert len(keys) == len(set(keys))


def _masked(tmp: Path, name: str, consts: dict[str, list[float]]) -> Path:
    """``Where(x > 0, a1, b1) + Where(x > 0, a2, b2)`` over ``x`` [batch, 8], as TorchScript writes a mask per
    layer, its constants given by ``consts``."""
    nodes = [
        n("Greater", ["x", "zero"], ["mask"]),
        n("Where", ["mask", "a1", "b1"], ["w1"]),
        n("Where", ["mask", "a2", "b2"], ["w2"]),
        n("Add", ["w1", "w2"], ["y"]),
    ]
    values = {"zero": [0.0], **consts}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in values.items()]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], inits
    )
    path = tmp / f"{name}.onnx"
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_constants_of_equal_data_count_as_one_input(tmp_path: Path) -> None:
    path = _masked(tmp_path, "equal", {"a1": [0.0], "b1": [-1e9], "a2": [0.0], "b2": [-1e9]})
    merged, removed, _ = _merged(tmp_path, path)
    assert removed == 1
    for batch in (1, 3):
        np.testing.assert_array_equal(_run(merged, batch)[0], _run(path, batch)[0])


def test_constants_of_other_data_stay_apart(tmp_path: Path) -> None:
    equal = {"a1": [0.0], "b1": [-1e9], "a2": [0.0], "b2": [-1e9]}
    for path in (
        _masked(tmp_path, "other", {**equal, "b2": [-1e8]}),  # one scalar differs
        _masked(tmp_path, "signed", {**equal, "a2": [-0.0]}),  # -0 == 0, but not bit for bit: 1 / w2 would tell
    ):
        g, _ = onnx_io.import_model(path)
        assert merge_duplicates(g) == (g, 0), path
