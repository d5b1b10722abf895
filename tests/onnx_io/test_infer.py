"""Type inference at import: the shape arithmetic over static shapes folded, never a random draw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from conftest import write_graph
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 3), st.integers(1, 32))
def test_bound_dims_give_every_value_the_shape_onnxruntime_computes(bert_path: Path, batch: int, seq: int) -> None:
    """The shape arithmetic over bound dims (BERT's position ids: Shape, Squeeze, Range) is folded for shape
    inference: every value is static, at exactly the shape a run makes, at any size (1 included, where
    broadcasting against an unknown length kept it unknown)."""
    fixed = onnx_io.concretize(onnx_io.load_model(bert_path), {"batch": batch, "seq": seq})
    values = [o for n in fixed.nodes for o in n.outputs if o]
    model = onnx_io.to_proto(fixed)
    model.graph.output.extend(onnx.ValueInfoProto(name=v) for v in values if v not in fixed.outputs)
    rng = np.random.default_rng(seq)
    feeds = {"input_ids": rng.integers(0, 100, (batch, seq)), "attention_mask": rng.integers(0, 2, (batch, seq))}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    ran = dict(zip(names, session.run(names, feeds)))
    assert {v: fixed.types[v].shape for v in values} == {v: ran[v].shape for v in values}


def test_a_random_op_is_never_folded_for_shape_inference(tmp_path: Path) -> None:
    """A Range whose length a RandomUniformLike draws is as long as each run draws: folding the draw once would
    give it a static shape that a run contradicts (and a rewrite could rely on)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("RandomUniformLike", ["sf"], ["r"], low=1.0, high=9.0),
        helper.make_node("ReduceMax", ["r"], ["m"], keepdims=0),
        helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
        helper.make_node("Range", ["zero", "n", "one"], ["y"]),
        helper.make_node("Range", ["zero", "s0", "one"], ["z"]),  # a length the shape alone gives: folded
        helper.make_node("ReduceMax", ["s"], ["s0"], keepdims=0),
    ]
    nodes = [nodes[0], nodes[7], *nodes[1:7], *(helper.make_node("Identity", [v], [f"{v}_out"]) for v in "yz")]
    graph = helper.make_graph(
        nodes,
        "random_length",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(f"{v}_out", TensorProto.INT64, [f"{v}_length"]) for v in "yz"],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")],
    )
    g = onnx_io.load_model(write_graph(graph, tmp_path / "random.onnx"))
    assert g.types["z"].shape == (3,)
    assert not g.types["y"].is_static
