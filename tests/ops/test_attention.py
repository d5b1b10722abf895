"""onnxruntime's MultiHeadAttention (taso/ops/attention.py) against its CPU provider, and its field rule against
the decomposition's: the fingerprint that pairs a spelled-out attention with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from taso import onnx as onnx_io
from taso import ops
from taso.generate.fingerprint import field_eval, random_field_inputs
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.attention), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def _graph(nodes: list[Node], inputs: dict[str, tuple], data: dict[str, np.ndarray]) -> Graph:
    """``nodes`` over float32 ``inputs`` and constant ``data``, typed by the catalogue; the last node's output."""
    types = {n: TensorType("float32", s) for n, s in inputs.items()}
    types |= {n: TensorType(str(a.dtype), a.shape) for n, a in data.items()}
    for n in nodes:
        types |= dict(
            zip(n.outputs, ops.infer(n.op, [types[v] for v in n.inputs], n.attr, [data.get(v) for v in n.inputs]))
        )
    weights = {n: WeightData(a) for n, a in data.items()}
    return Graph(tuple(nodes), tuple(inputs), (nodes[-1].outputs[0],), types, tuple(data), weights)


def _spelled(b: int, s: int, heads: int, head: int, scale: float, key_split: bool) -> Graph:
    """The TorchScript exporter's attention: heads split by Reshape and Transpose, Q and K^T each scaled by
    ``scale``, a mask added, softmax over the last axis, heads merged back; the key given split into heads where
    ``key_split``."""
    split = np.array([b, s, heads, head], np.int64)
    nodes = [
        Node("Reshape", ("q", "split"), ("q4",), make_attrs({"allowzero": 0})),
        Node("Transpose", ("q4",), ("qh",), make_attrs({"perm": (0, 2, 1, 3)})),
        Node("Mul", ("qh", "c"), ("qs",)),
    ]
    if key_split:
        nodes.append(Node("Transpose", ("k",), ("kt",), make_attrs({"perm": (0, 1, 3, 2)})))
        values = "v"
    else:
        nodes += [
            Node("Reshape", ("k", "split"), ("k4",), make_attrs({"allowzero": 0})),
            Node("Transpose", ("k4",), ("kt",), make_attrs({"perm": (0, 2, 3, 1)})),
            Node("Reshape", ("v", "split"), ("v4",), make_attrs({"allowzero": 0})),
            Node("Transpose", ("v4",), ("vh",), make_attrs({"perm": (0, 2, 1, 3)})),
        ]
        values = "vh"
    nodes += [
        Node("Mul", ("kt", "c"), ("ks",)),
        Node("MatMul", ("qs", "ks"), ("scores",)),
        Node("Add", ("scores", "mask"), ("masked",)),
        Node("Softmax", ("masked",), ("p",), make_attrs({"axis": 3})),
        Node("MatMul", ("p", values), ("o",)),
        Node("Transpose", ("o",), ("ob",), make_attrs({"perm": (0, 2, 1, 3)})),
        Node("Reshape", ("ob", "merge"), ("out",), make_attrs({"allowzero": 0})),
    ]
    kv = (b, heads, s, head) if key_split else (b, s, heads * head)
    data = {"split": split, "merge": np.array([b, s, heads * head], np.int64), "c": np.array(scale, np.float32)}
    return _graph(nodes, {"q": (b, s, heads * head), "k": kv, "v": kv, "mask": (1, heads, s, s)}, data)


_C64 = float(np.float32(64**-0.25))
"""PyTorch's scale for heads of 64, applied to Q and to K: 0.35355338 as a float32 (1/8 is no product of two)."""


@pytest.mark.parametrize(
    ("key_split", "head", "c", "scale"),
    [
        (False, 16, 0.5, 0.0),
        (True, 16, 0.5, 0.0),
        (True, 64, _C64, 0.0),
        (True, 64, _C64, float(np.float32(_C64 * _C64))),
    ],
    ids=["3-D key", "split key", "heads of 64, default scale", "heads of 64, its float32 square"],
)
def test_the_field_rule_is_the_spelled_out_attentions(key_split: bool, head: int, c: float, scale: float) -> None:
    """Over Z_p x Z_q the fused op (with its bias) and the exporter's spelling (with its mask, Q and K^T each times
    c) agree exactly, the fingerprint generation pairs them by, at the exporters' own constant too; a spelling
    scaled otherwise does not (the scale is seen)."""
    b, s, heads = 2, 3, 2
    kv = (b, heads, s, head) if key_split else (b, s, heads * head)
    attrs = make_attrs({"num_heads": 0 if key_split else heads, "scale": scale})
    fused = _graph(
        [Node("MultiHeadAttention", ("q", "k", "v", "mask"), ("out",), attrs)],
        {"q": (b, s, heads * head), "k": kv, "v": kv, "mask": (1, heads, s, s)},
        {},
    )
    inputs = random_field_inputs(fused, 0)
    want = field_eval(fused, inputs, 7)["out"]
    assert np.array_equal(field_eval(_spelled(b, s, heads, head, c, key_split), inputs, 7)["out"], want)
    assert not np.array_equal(field_eval(_spelled(b, s, heads, head, 1.0, key_split), inputs, 7)["out"], want)


@pytest.mark.parametrize(
    ("shapes", "attrs", "message"),
    [
        ([(2, 3, 8), (2, 5, 8), (2, 5, 8)], {"num_heads": 0}, "num_heads 0 needs a key split"),
        ([(2, 3, 8), (2, 5, 8), (2, 5, 8)], {"num_heads": 3}, "do not divide the query's width"),
        ([(2, 3, 8), (2, 4, 5, 2), (2, 4, 5, 3)], {"num_heads": 0}, "with 4 heads"),
        ([(2, 3, 8), (3, 5, 8), (3, 5, 8)], {"num_heads": 2}, "with 2 heads"),
        ([(2, 3, 8), (2, 5, 8), (2, 5, 8), (2, 3, 5)], {"num_heads": 2}, "bias must be"),
        ([(2, 3, 8), (2, 5, 8), (2, 5, 8), (2, 3, 3, 5)], {"num_heads": 2}, "with 2 heads"),
        ([(2, 3, 8), (2, 5, 8), (2, 5, 8), (1, 1, 3, 4)], {"num_heads": 2}, "with 2 heads"),
    ],
    ids=[
        "0 heads, 3-D key",
        "heads not dividing",
        "value unlike key",
        "batches differ",
        "3-D bias",
        "bias heads",
        "bias keys",
    ],
)
def test_shapes_onnxruntime_refuses_are_refused(shapes: list, attrs: dict, message: str) -> None:
    types = [TensorType("float32", s) for s in shapes]
    with pytest.raises(ops.OpError, match=message):
        ops.infer("MultiHeadAttention", types, {"scale": 0.0, **attrs})


def _ort_attention(path: Path, inputs: list[str], **attrs: object) -> Path:
    """One onnxruntime MultiHeadAttention over a query (2, 3, 8) and a split key and value (2, 4, 3, 2)."""
    shapes = {"q": [2, 3, 8], "k": [2, 4, 3, 2], "v": [2, 4, 3, 2], "b": [8], "m": [2, 3]}
    node = helper.make_node("MultiHeadAttention", inputs, ["y"], domain=ops.CONTRIB, **attrs)
    used = [i for i in inputs if i]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in used if n != "m"]
    io += [helper.make_tensor_value_info("m", TensorProto.INT32, shapes["m"])] if "m" in used else []
    graph = helper.make_graph([node], "g", io, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ops.CONTRIB, 1)]
    onnx.save_model(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


@pytest.mark.parametrize(
    ("inputs", "attrs", "reason"),
    [
        (["q", "k", "v"], {"num_heads": 4, "unidirectional": 1}, "causal"),
        (["q", "k", "v", "b"], {"num_heads": 4}, "input at a position"),
        (["q", "k", "v", "", "m"], {"num_heads": 4}, "input at a position"),
    ],
    ids=["causal", "projection bias", "key padding mask"],
)
def test_what_is_not_modelled_stays_opaque(inputs: list, attrs: dict, reason: str, tmp_path: Path) -> None:
    path = _ort_attention(tmp_path / "m.onnx", inputs, **attrs)
    ((node,), (why,)) = onnx_io.load_model(path).nodes, onnx_io.opaque_reasons(path)
    assert node.is_opaque and reason in why.reason, why


def test_a_split_keys_head_count_is_read_as_zero_and_written_back(tmp_path: Path) -> None:
    """One IR node whatever the head count: import reads num_heads 4 of a (2, 4, 3, 2) key as 0, export writes 4."""
    g = onnx_io.load_model(_ort_attention(tmp_path / "m.onnx", ["q", "k", "v"], num_heads=4))
    assert g.nodes[0].attr["num_heads"] == 0
    out = onnx_io.save_model(g, tmp_path / "back.onnx")
    assert helper.get_attribute_value(onnx.load(str(out)).graph.node[0].attribute[0]) == 4
