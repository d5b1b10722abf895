"""Import into the IR: kinds of values, and nodes outside the catalogue kept verbatim as opaque nodes."""

from __future__ import annotations

from pathlib import Path

import onnx
from conftest import zoo
from onnx import TensorProto, helper

from taso import onnx as onnx_io
from taso.ir import Kind

from .roundtrip import round_trip


def test_ir_marks_activations_weights_and_constants(bert_path: Path) -> None:
    g = onnx_io.load_model(bert_path)
    assert g.kinds["input_ids"] is Kind.ACTIVATION
    assert g.kinds["layer.0.attn.q.w"] is Kind.WEIGHT
    assert g.kinds["layer.0.attn.q.matmul_out"] is Kind.ACTIVATION
    folded = onnx_io.load_model(bert_path)
    assert all(folded.kinds[o] is Kind.CONSTANT for n in folded.nodes if not n.reads for o in n.outputs)


def test_control_flow_and_unknown_ops_pass_through(tmp_path: Path, save) -> None:
    src = save(zoo.control_flow(), "cf.onnx")
    g = onnx_io.load_model(src)
    by_op = {n.op: n for n in g.nodes}
    assert by_op["If"].is_opaque and by_op["Loop"].is_opaque
    assert not by_op["ReduceSum"].is_opaque and by_op["ReduceSum"].attr["axes"] == (0, 1, 2, 3)  # none given: all
    assert not by_op["Conv"].is_opaque and by_op["Conv"].attr["pads"] == (1, 1, 1, 1)
    assert "relu_out" in by_op["If"].implicit and "scale_b" in by_op["If"].implicit
    out = round_trip(src, tmp_path)
    a, b = onnx.load(str(src)), onnx.load(str(out))
    for x, y in zip(a.graph.node, b.graph.node, strict=True):
        if x.op_type in ("If", "Loop"):
            assert x.SerializeToString(deterministic=True) == y.SerializeToString(deterministic=True)
    assert [n.doc_string for n in b.graph.node] == [n.doc_string for n in a.graph.node]


def test_custom_domain_and_local_function_pass_through(tmp_path: Path, save) -> None:
    fn = helper.make_function(
        "com.example",
        "Swish",
        ["x"],
        ["y"],
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Swish", ["r"], ["y"], name="swish", domain="com.example"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)], functions=[fn]
    )
    model.ir_version = 8
    src = save(model, "fn.onnx")
    out = round_trip(src, tmp_path)
    b = onnx.load(str(out))
    assert [f.name for f in b.functions] == ["Swish"] and b.graph.node[1].domain == "com.example"
    assert onnx_io.load_model(out) == onnx_io.load_model(src)


def test_int_attrs_reads_an_opaque_node_as_written() -> None:
    """The Reshapes of an empty slice leave the nodes after them untyped, so they stay opaque: their integer
    attributes come from what the file wrote, not the catalogue's defaults (an allowzero=1 read as 0 would let
    the no-op fold merge a Reshape that copies a zero)."""
    consts = {"c0": [0], "c1": [-1], "c2": [0], "c3": [1], "c4": [0, 1, -1], "c5": [0, -1]}
    nodes = [
        helper.make_node("Slice", ["x", "c0", "c1", "c2", "c3"], ["v0"]),
        helper.make_node("Reshape", ["v0", "c4"], ["v1"]),
        helper.make_node("Reshape", ["v1", "c5"], ["v2"], allowzero=1),
        helper.make_node("Transpose", ["v2"], ["y"], perm=[1, 0]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, "a"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor(k, TensorProto.INT64, [len(v)], v) for k, v in consts.items()],
    )
    g = onnx_io.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    reshape, transpose = g.nodes[-2:]
    assert reshape.is_opaque and transpose.is_opaque
    assert onnx_io.int_attrs(reshape)["allowzero"] == 1
    assert onnx_io.int_attrs(transpose)["perm"] == (1, 0)
    assert onnx_io.int_attrs(g.nodes[1]) == {"allowzero": 0}  # a catalogue node's, normalised
