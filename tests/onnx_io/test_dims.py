"""Symbolic dims fixed to sizes, the ones shape inference named inside the model included."""

from __future__ import annotations

from pathlib import Path

from taso import onnx as onnx_io
from taso.ir import Graph, ModelMeta, Node, TensorType, lint, make_attrs


def test_dim_sizes_names_the_dims_shape_inference_made_inside_the_model(bert_path: Path) -> None:
    g = onnx_io.load_model(bert_path)
    named = {d for t in g.types.values() if t.shape is not None for d in t.shape if isinstance(d, str)}
    assert {"batch", "seq"} < named  # and dims the exporter's shape inference made up inside the model
    for dims in ({"batch": 1, "seq": 32}, {}):  # no --dim: every dim at the default 1
        sizes = onnx_io.dim_sizes(g, dims)
        assert sizes["batch"] == dims.get("batch", 1) and sizes["seq"] == dims.get("seq", 1)
        assert named <= set(sizes)  # Range's length over Shape(input_ids) too: 26 of 32 units were estimated
        fixed = onnx_io.concretize(g, dims)
        for v, t in g.types.items():  # binding the names gives the types inference gives at those sizes
            assert fixed.types[v].is_static, v
            if t.shape is not None and all(d is not None for d in t.shape):
                assert t.with_dims(sizes) == fixed.types[v], v


def test_reinfer_gives_the_graph_back_with_its_weights_whatever_inference_saw_of_them(bert_path: Path) -> None:
    """Inference sees large weights as typed inputs only (copying them took BERT-base 2 s a call): the graph
    comes back with its own inputs, weights and data, and the types a full import inferred."""
    g = onnx_io.load_model(bert_path)
    assert any(d.array.nbytes > 4096 for d in g.data.values())
    again = onnx_io.reinfer(g)
    assert again == g and again.inputs == g.inputs and again.weights == g.weights and again.types == g.types
    assert all(again.data[w].array is g.data[w].array for w in g.weights)


def test_reinfer_keeps_the_constants_export_wrote_for_a_node_import_now_reads_as_opaque(tmp_path: Path) -> None:
    """A catalogue Slice of reversed step whose range the spec calls empty: export writes its attributes as
    constant inputs and import reads the node back opaque, reading them; the graph keeps them (it lost them,
    and the next save failed: a node read a value nothing defined)."""
    rows = TensorType("float32", (1, 2))
    g = Graph(
        nodes=(
            Node("Slice", ("x",), ("s",), make_attrs({"axes": (0,), "starts": (0,), "ends": (1,), "steps": (-1,)})),
            Node("Relu", ("s",), ("y",)),
        ),
        inputs=("x",),
        outputs=("y",),
        types={"x": rows, "s": rows, "y": rows},
        meta=ModelMeta(opsets=(("", 18),)),
    )
    again = onnx_io.reinfer(g)
    (sliced,) = (n for n in again.nodes if n.op == "Slice")
    assert sliced.is_opaque and len(sliced.inputs) == 5
    assert set(sliced.inputs[1:]) <= set(again.weights) and lint(again) is again
    saved = onnx_io.load_model(onnx_io.save_model(again, tmp_path / "s.onnx"))
    assert [n.op for n in saved.nodes] == ["Slice", "Relu"]
