"""The result's value types written into it (taso.optimize.annotate): behind a Reshape to a computed shape
onnxruntime cannot tell a residual Add's operands alike and leaves the Add and the LayerNormalization after it
unfused; written, the types let it fuse them (SkipLayerNormalization), and they are inferred afresh, so a type
the rewrites carried that no longer holds (sized at the costing dims) is never written."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.ir import Graph, TensorType
from taso.optimize import optimize
from taso.optimize.annotate import annotated
from taso.rules import store

n = helper.make_node


def _residual_norm(tmp: Path, idle: bool = False) -> Path:
    """``LayerNorm(Reshape(x @ w + b, [batch, seq, 8]) + x)``, the target computed from ``Shape(x)`` as
    TorchScript writes it, over ``x`` [batch, seq, 8] (with ``idle``, an Identity before the Reshape)."""
    r = np.random.default_rng(0)
    consts = {
        "w": r.standard_normal((8, 8)).astype(np.float32),
        "b": r.standard_normal(8).astype(np.float32),
        "gamma": np.ones(8, np.float32),
        "beta": np.zeros(8, np.float32),
        "i0": np.array([0], np.int64),
        "i1": np.array([1], np.int64),
        "c8": np.array([8], np.int64),
    }
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "i0"], ["d0"]),
        n("Gather", ["s", "i1"], ["d1"]),
        n("Concat", ["d0", "d1", "c8"], ["target"], axis=0),
        n("MatMul", ["x", "w"], ["m"]),
        n("Add", ["m", "b"], ["biased0" if idle else "biased"]),
        *([n("Identity", ["biased0"], ["biased"])] if idle else []),
        n("Reshape", ["biased", "target"], ["h"]),
        n("Add", ["h", "x"], ["res"]),
        n("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5),
    ]
    io = [helper.make_tensor_value_info(v, TensorProto.FLOAT, ["batch", "seq", 8]) for v in ("x", "y")]
    graph = helper.make_graph(nodes, "g", io[:1], io[1:], [numpy_helper.from_array(a, k) for k, a in consts.items()])
    path = tmp / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _fused_ops(path: Path, tmp: Path) -> Counter[str]:
    """The op types of ``path`` as onnxruntime runs it on the CPU at its full optimization level."""
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp / f"ort-{path.name}")
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return Counter(x.op_type for x in onnx.load(opts.optimized_model_filepath).graph.node)


def _run(path: Path, batch: int, seq: int) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((batch, seq, 8)).astype(np.float32)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_written_types_let_onnxruntime_fuse_the_residual_norm(tmp_path: Path) -> None:
    src = _residual_norm(tmp_path)
    plain, written = tmp_path / "plain.onnx", tmp_path / "written.onnx"
    g = onnx_io.load_model(src)
    onnx_io.save_model(g, plain)
    onnx_io.save_model(annotated(g), written)
    assert _fused_ops(plain, tmp_path)["SkipLayerNormalization"] == 0
    assert _fused_ops(written, tmp_path)["SkipLayerNormalization"] == 1
    for batch, seq in ((1, 16), (3, 5)):
        np.testing.assert_allclose(_run(written, batch, seq), _run(src, batch, seq), rtol=1e-5, atol=1e-5)


def _without_identity(g: Graph) -> Graph:
    """``g`` with its one Identity node gone, its readers reading its input."""
    (idle,) = (m for m in g.nodes if m.op == "Identity")
    swap = {idle.outputs[0]: idle.inputs[0]}
    nodes = tuple(replace(m, inputs=tuple(swap.get(i, i) for i in m.inputs)) for m in g.nodes if m is not idle)
    return replace(g, nodes=nodes)


def test_optimize_writes_the_types_into_what_it_rewrote(tmp_path: Path) -> None:
    """A result subst rewrote (here one idle Identity dropped) carries its types, which onnxruntime fuses better
    than the original; handed back as it came (nothing applied), the model gets none it did not have."""
    src, db = _residual_norm(tmp_path, idle=True), tmp_path / "rules.db"
    store.create(db)
    rewritten, kept = tmp_path / "r.onnx", tmp_path / "k.onnx"
    report = optimize(src, rewritten, db, rewrite=lambda g: (_without_identity(g), {"Identity dropped": 1}))
    assert report.check is not None and report.check.ok
    assert _fused_ops(src, tmp_path)["SkipLayerNormalization"] == 0
    assert _fused_ops(rewritten, tmp_path)["SkipLayerNormalization"] == 1
    optimize(src, kept, db, rewrite=lambda g: (g, {}))
    assert onnx_io.load_model(kept).meta.annotated == onnx_io.load_model(src).meta.annotated


def test_a_carried_type_that_no_longer_holds_is_not_written(tmp_path: Path) -> None:
    g = onnx_io.load_model(_residual_norm(tmp_path))
    stale = replace(g, types={**g.types, "h": TensorType("float32", (1, 16, 8))})  # sized at the costing dims
    out = annotated(stale)
    assert out.types["h"] == TensorType("float32", ("batch", "seq", 8))
    written = onnx_io.save_model(out, tmp_path / "written.onnx")
    np.testing.assert_allclose(_run(written, 3, 5), _run(_residual_norm(tmp_path), 3, 5), rtol=1e-5, atol=1e-5)


def _positions(tmp: Path) -> Path:
    """``LayerNorm(x @ w + table[:seq] + x)`` over ``x`` [batch, seq, 8], the exporter declaring the slice of the
    position table [seq, 8], which inference cannot (the slice is clamped to the table's 64 rows)."""
    r = np.random.default_rng(0)
    consts = {
        "w": r.standard_normal((8, 8)).astype(np.float32),
        "table": r.standard_normal((64, 8)).astype(np.float32),
        "gamma": np.ones(8, np.float32),
        "beta": np.zeros(8, np.float32),
        "i0": np.array([0], np.int64),
    }
    nodes = [
        n("Shape", ["x"], ["seq"], start=1, end=2),
        n("Slice", ["table", "i0", "seq", "i0"], ["pos"]),
        n("MatMul", ["x", "w"], ["m"]),
        n("Add", ["m", "pos"], ["h"]),
        n("Add", ["h", "x"], ["res"]),
        n("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5),
    ]
    io = [helper.make_tensor_value_info(v, TensorProto.FLOAT, ["batch", "seq", 8]) for v in ("x", "y")]
    declared = [helper.make_tensor_value_info("pos", TensorProto.FLOAT, ["seq", 8])]
    inits = [numpy_helper.from_array(a, k) for k, a in consts.items()]
    graph = helper.make_graph(nodes, "g", io[:1], io[1:], inits, value_info=declared)
    path = tmp / "positions.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_what_the_source_declared_is_inferred_from(tmp_path: Path) -> None:
    """The exporter's [seq, 8] carries on to the residual Add, which inference alone would give a new dim."""
    src = _positions(tmp_path)
    out = annotated(onnx_io.load_model(src))
    assert out.types["h"] == TensorType("float32", ("batch", "seq", 8))
    written = onnx_io.save_model(out, tmp_path / "written.onnx")
    assert _fused_ops(written, tmp_path)["SkipLayerNormalization"] == 1
    for batch, seq in ((1, 16), (3, 5)):
        np.testing.assert_allclose(_run(written, batch, seq), _run(src, batch, seq), rtol=1e-5, atol=1e-5)
