"""Symbolic dims fixed to sizes, the ones shape inference named inside the model included."""

from __future__ import annotations

from pathlib import Path

from taso import onnx as onnx_io


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
