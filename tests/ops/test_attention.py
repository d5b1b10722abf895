"""onnxruntime's MultiHeadAttention (taso/ops/attention.py) against its CPU provider, and its field rule against
the decomposition's: the fingerprint that pairs a spelled-out attention with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
    ``scale``, softmax over the last axis, heads merged back; the key given split into heads where ``key_split``."""
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
        Node("Softmax", ("scores",), ("p",), make_attrs({"axis": 3})),
        Node("MatMul", ("p", values), ("o",)),
        Node("Transpose", ("o",), ("ob",), make_attrs({"perm": (0, 2, 1, 3)})),
        Node("Reshape", ("ob", "merge"), ("out",), make_attrs({"allowzero": 0})),
    ]
    kv = (b, heads, s, head) if key_split else (b, s, heads * head)
    data = {"split": split, "merge": np.array([b, s, heads * head], np.int64), "c": np.array(scale, np.float32)}
    return _graph(nodes, {"q": (b, s, heads * head), "k": kv, "v": kv}, data)


@pytest.mark.parametrize("key_split", [False, True])
def test_the_field_rule_is_the_spelled_out_attentions(key_split: bool) -> None:
    """Over Z_p x Z_q the fused op and the exporter's spelling agree exactly (the fingerprint generation pairs
    them by), and a spelling scaled otherwise does not (the scale is seen)."""
    b, s, heads, head = 2, 3, 2, 16
    kv = (b, heads, s, head) if key_split else (b, s, heads * head)
    fused = _graph(
        [
            Node(
                "MultiHeadAttention",
                ("q", "k", "v"),
                ("out",),
                make_attrs({"num_heads": 0 if key_split else heads, "scale": 0.0}),
            )
        ],
        {"q": (b, s, heads * head), "k": kv, "v": kv},
        {},
    )
    inputs = random_field_inputs(fused, 0)
    want = field_eval(fused, inputs, 7)["out"]
    assert np.array_equal(field_eval(_spelled(b, s, heads, head, 0.5, key_split), inputs, 7)["out"], want)
    assert not np.array_equal(field_eval(_spelled(b, s, heads, head, 1.0, key_split), inputs, 7)["out"], want)
