"""Weight-only subgraphs computed once; and optimize never keeps a rewrite that measures slower."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import write_graph
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import cost
from taso import onnx as onnx_io
from taso.cost import profiler
from taso.execute import compare
from taso.execute.precompute import precompute
from taso.optimize import abstract_values, fold_shapes
from taso.optimize.guard import confirm_speedup
from taso.optimize.report import quiet


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
    measured = confirm_speedup((files["one"], files["many"]), one, many, model, quiet)
    assert measured["kept_original"] and measured["after_ms"] > measured["before_ms"]
    measured = confirm_speedup((files["many"], files["one"]), many, one, model, quiet)
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


def _windows(tmp: Path) -> Path:
    """``x.view(B, H // 7, 7, W // 7, 7, C)``, a transpose, then ``.view(B * (H // 7) * (W // 7), 49, C)`` as
    TorchScript writes them for Swin's window partition: every target computed at run time from Shape, with
    batch and width dynamic and H, C static. The second target reads the shape of the transposed output (H // 7
    is known there only after re-inference) through a Slice, Mod, Sub and Cast, as the exporter's padding
    arithmetic does, and C through a Size."""

    def const(name: str, value: object) -> TensorProto:
        return numpy_helper.from_array(np.array(value, np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        *(helper.make_node("Gather", ["s", f"i{k}"], [f"d{k}"], axis=0) for k in range(4)),
        helper.make_node("Div", ["d1", "seven"], ["hd"]),
        helper.make_node("Div", ["d2", "seven"], ["wd"]),
        *(helper.make_node("Unsqueeze", [v, "zero1"], [f"u_{v}"]) for v in ("d0", "hd", "wd", "d3")),
        helper.make_node("Concat", ["u_d0", "u_hd", "seven1", "u_wd", "seven1", "u_d3"], ["t1"], axis=0),
        helper.make_node("Reshape", ["x", "t1"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["p"], perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Shape", ["p"], ["ps"], start=1, end=4),
        helper.make_node("Slice", ["ps", "zero1", "one1"], ["h1"]),
        helper.make_node("Mod", ["h1", "seven"], ["hm"]),
        helper.make_node("Sub", ["hm", "zero1"], ["hs"]),
        helper.make_node("Cast", ["hs"], ["hc"], to=TensorProto.INT64),
        helper.make_node("Mul", ["u_d0", "hc"], ["bh"]),
        helper.make_node("Mul", ["bh", "u_wd"], ["n"]),
        helper.make_node("Size", ["seven1"], ["one"]),
        helper.make_node("Mul", ["u_d3", "one"], ["c"]),
        helper.make_node("Concat", ["n", "fortynine", "c"], ["t2"], axis=0),
        helper.make_node("Reshape", ["p", "t2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "windows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 14, "width", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["windows", 49, 8])],
        initializer=[
            *(const(f"i{k}", k) for k in range(4)),
            const("seven", 7),
            const("seven1", [7]),
            const("zero1", [0]),
            const("one1", [1]),
            const("fortynine", [49]),
        ],
    )
    return write_graph(graph, tmp / "windows.onnx")


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The window partition and its folded form, on disk."""
    tmp = tmp_path_factory.mktemp("windows")
    src = _windows(tmp)
    folded, _ = fold_shapes(onnx_io.load_model(src))
    return src, onnx_io.save_model(folded, tmp / "folded.onnx")


def test_shape_arithmetic_over_static_dims_folds_and_dynamic_dims_stay(windows: tuple[Path, Path]) -> None:
    """H // 7, C and 7 * 7 fold; the second target's one unknown entry (batch * 2 * width / 7 windows) becomes
    -1, so none of its computation is left; the first reads batch (copied, 0) beside width / 7 (unknown), which
    -1 may not stand for beside a 0: it stays computed."""
    g = onnx_io.load_model(windows[0])
    folded, removed = fold_shapes(g)
    census = folded.op_census()
    assert removed == len(g.nodes) - len(folded.nodes) > 0
    assert "Slice" not in census and "Mod" not in census and "Size" not in census and census["Reshape"] == 2
    first, second = (n for n in folded.nodes if n.op == "Reshape")
    assert folded.data[second.inputs[1]].array.tolist() == [-1, 49, 8]
    assert abstract_values(folded)[first.inputs[1]][1] == ("batch", 2, 7, None, 7, 8)
    assert folded.types["y"].shape[1:] == (49, 8)  # re-inferred from the folded target


def test_a_dim_name_means_one_size_in_both_graphs(windows: tuple[Path, Path]) -> None:
    """Re-inference numbers the dims it names anew (``unk__0`` is width / 7 after the fold, batch * 2 before):
    optimize's cost model sizes both graphs' dims by name, so a name both use must be the same dim."""
    g = onnx_io.load_model(windows[0])
    folded, _ = fold_shapes(g)
    dims = {"batch": 2, "width": 21}
    before, after = onnx_io.dim_sizes(g, dims), onnx_io.dim_sizes(folded, dims)
    assert len(after) > len(dims) and all(before[d] == n for d, n in after.items() if d in before)


def test_a_dim_param_is_never_a_known_size(windows: tuple[Path, Path]) -> None:
    """The abstract shape of a tensor with dynamic dims names them, and arithmetic on them stays unknown."""
    g = onnx_io.load_model(windows[0])
    values = abstract_values(g)
    assert values["s"] == ((4,), ("batch", 14, "width", 8))
    assert values["hd"] == ((), (2,)) and values["wd"] == ((), (None,))


@given(batch=st.integers(1, 4), windows_across=st.integers(1, 4))
@settings(max_examples=8, deadline=None)
def test_folded_shape_arithmetic_computes_the_same_at_every_size(
    windows: tuple[Path, Path], batch: int, windows_across: int
) -> None:
    """The folded model at sizes of the dynamic dims other than any the fold saw gives the original's outputs:
    a symbolic dim folded as if known (at the size 1 the cost model uses, say) fails here."""
    src, out = windows
    g = onnx_io.load_model(src)
    result = compare(src, out, g, dims={"batch": batch, "width": 7 * windows_across})
    assert result.ok, result.summary()


def test_no_minus_one_beside_a_copied_dim(windows: tuple[Path, Path]) -> None:
    """At batch 0 a target [0, 2, 7, -1, 7, 8] cannot be inferred where the computed [0, 2, 7, 1, 7, 8] ran:
    the folded model must still run on an empty batch. (Run unoptimized: onnxruntime's own ReshapeFusion makes
    that -1 when the target's other entries are constants, and then fails the same way.)"""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.zeros((0, 14, 21, 8), np.float32)
    outs = [ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0] for p in windows]
    assert outs[0].shape == outs[1].shape == (0, 49, 8)


def test_a_dim_is_copied_only_at_its_own_index(tmp_path: Path) -> None:
    """``x.view(n, batch)`` of an x [batch, n]: each target entry names a dim of the input, but at the other
    index, so neither may be copied (0), and -1 may stand for one entry only: the target stays computed."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Concat", ["n", "b"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "swap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "batch"])],
        initializer=[numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("zero", 0), ("one", 1))],
    )
    src = write_graph(graph, tmp_path / "swap.onnx")
    g = onnx_io.load_model(src)
    folded, removed = fold_shapes(g)
    assert removed == 0
    out = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    for batch, n in ((2, 3), (3, 1)):
        assert compare(src, out, g, dims={"batch": batch, "n": n}).ok


def test_a_minus_one_beside_copied_dims_is_spelt_as_its_size(tmp_path: Path) -> None:
    """The dynamo exporter's head split, ``[batch, seq, -1, 64]`` with ``allowzero``, runs at batch 0: there a 0
    is a size and the -1 is inferred from it. Folded, the batch and seq entries are copies (0), and beside a
    copy onnxruntime cannot infer a -1 on an empty tensor: the -1 is written as the 2 it stands for."""
    import onnxruntime as ort

    nodes = [
        helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
        helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
        helper.make_node("Concat", ["b", "s", "minus_one", "width"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"], allowzero=1),
    ]
    graph = helper.make_graph(
        nodes,
        "heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 2, 64])],
        initializer=[
            numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("minus_one", -1), ("width", 64))
        ],
    )
    src = write_graph(graph, tmp_path / "heads.onnx")
    folded, removed = fold_shapes(onnx_io.load_model(src))
    assert removed > 0
    out = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    for batch, seq in ((0, 5), (2, 3)):
        x = np.random.default_rng(0).standard_normal((batch, seq, 128)).astype(np.float32)
        runs = [
            ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0] for p in (src, out)
        ]
        assert runs[0].shape == runs[1].shape == (batch, seq, 2, 64) and np.array_equal(*runs)


def test_a_zero_size_in_an_allowzero_target_is_never_a_copy(tmp_path: Path) -> None:
    """With ``allowzero`` a 0 in the target is a size: an x [2, batch, 0] reshaped to (0, batch, 2) is empty.
    Written as a constant the 0 would copy x's 2, so the target stays computed; with its 0 a size computed
    too, the target is folded and both run."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["b"], axis=0),
        helper.make_node("Concat", ["zero", "b", "two"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"], allowzero=1),
    ]
    graph = helper.make_graph(
        nodes,
        "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "batch", 0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, "batch", 2])],
        initializer=[
            numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("zero", 0), ("one", 1), ("two", 2))
        ],
    )
    src = write_graph(graph, tmp_path / "empty.onnx")
    g = onnx_io.load_model(src)
    folded, removed = fold_shapes(g)
    assert removed == 0
    out = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    for batch in (1, 3):
        result = compare(src, out, g, dims={"batch": batch})
        assert result.ok, result.summary()


@given(a=st.integers(-19, 19), b=st.integers(-7, 7).filter(bool), data=st.data())
@settings(max_examples=20, deadline=None)
def test_integer_division_truncates_and_mod_follows_onnx(tmp_path_factory, a: int, b: int, data) -> None:
    """ONNX's Div on integers truncates toward zero where Python's // floors; Mod takes the divisor's sign,
    fmod the dividend's. Each is folded from a static dim (``a`` = dim - 20) and checked against onnxruntime."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1),
        helper.make_node("Sub", ["s", "twenty"], ["a"]),
        helper.make_node("Div", ["a", "b"], ["q"]),
        helper.make_node("Mod", ["a", "b"], ["m"]),
        helper.make_node("Mod", ["a", "b"], ["f"], fmod=1),
        helper.make_node("Concat", ["q", "m", "f"], ["t"], axis=0),
        helper.make_node("Cast", ["t"], ["tf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["x"], ["r"], keepdims=0),
        helper.make_node("Add", ["r", "tf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "intdiv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", a + 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("twenty", 20), ("b", b))],
    )
    tmp = tmp_path_factory.mktemp("intdiv")
    src = write_graph(graph, tmp / "intdiv.onnx")
    g = onnx_io.load_model(src)
    folded, _ = fold_shapes(g)
    assert folded.op_census() == {"ReduceSum": 1, "Add": 1}
    assert compare(
        src, onnx_io.save_model(folded, tmp / "folded.onnx"), g, dims={"batch": data.draw(st.integers(1, 3))}
    ).ok


@st.composite
def _shape_programs(draw: st.DrawFn) -> tuple[onnx.GraphProto, list[str]]:
    """A random program of shape arithmetic over an x whose dims are some static, some named: Slice (any
    starts, ends, steps), Gather, Concat, Unsqueeze, Casts and integer Add/Sub/Mul/Div/Mod, their values
    each an output of its own; and a Reshape of x whose target multiplies the dims on either side of a split,
    with or without ``allowzero`` (the dynamo exporter sets it)."""
    dims = [draw(st.integers(1, 4) | st.sampled_from(["a", "b"])) for _ in range(4)]
    nodes, inits = [helper.make_node("Shape", ["x"], ["v0"])], []
    vectors, scalars = {"v0": 4}, []  # value -> its length; scalars

    def const(value: object) -> str:
        inits.append(numpy_helper.from_array(np.array(value, np.int64), f"c{len(inits)}"))
        return inits[-1].name

    for k in range(1, draw(st.integers(4, 12))):
        out, op = f"v{k}", draw(st.sampled_from(["arith", "slice", "arith", "gather", "concat", "unsqueeze", "cast"]))
        vector = draw(st.sampled_from(sorted(vectors)))
        if op == "slice":
            start, end, step = draw(st.integers(-6, 6)), draw(st.integers(-6, 6)), draw(st.sampled_from([-2, -1, 1, 2]))
            nodes.append(
                helper.make_node("Slice", [vector, const([start]), const([end]), const([0]), const([step])], [out])
            )
            vectors[out] = len(range(vectors[vector])[start:end:step])
        elif op == "gather" and vectors[vector]:
            n = vectors[vector]
            index = draw(st.integers(-n, n - 1) | st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
            nodes.append(helper.make_node("Gather", [vector, const(index)], [out], axis=0))
            (scalars.append(out) if isinstance(index, int) else vectors.__setitem__(out, len(index)))
        elif op == "concat":
            other = draw(st.sampled_from(sorted(vectors)))
            nodes.append(helper.make_node("Concat", [vector, other], [out], axis=0))
            vectors[out] = vectors[vector] + vectors[other]
        elif op == "arith":
            name = draw(st.sampled_from(["Add", "Sub", "Mul", "Div", "Mod", "fmod"]))
            shift, operand = const(draw(st.integers(-6, 6))), const(draw(st.integers(-5, 5).filter(bool)))
            kw = {"fmod": 1} if name == "fmod" else {}
            nodes.append(helper.make_node("Sub", [vector, shift], [f"{out}_s"]))  # sizes less a shift: signs vary
            nodes.append(helper.make_node("Mod" if name == "fmod" else name, [f"{out}_s", operand], [out], **kw))
            vectors[out] = vectors[vector]  # a divisor is never 0
        elif op == "unsqueeze" and scalars:
            nodes.append(helper.make_node("Unsqueeze", [draw(st.sampled_from(scalars)), const([0])], [out]))
            vectors[out] = 1
        else:
            nodes.append(helper.make_node("Cast", [vector], [f"{out}_32"], to=TensorProto.INT32))
            nodes.append(helper.make_node("Cast", [f"{out}_32"], [out], to=TensorProto.INT64))
            vectors[out] = vectors[vector]
    outputs = [(v, n) for v, n in vectors.items() if n]  # each its own output: a value folds where all is known
    nodes += [helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0)]
    for v, _ in outputs:
        nodes.append(helper.make_node("Cast", [v], [f"{v}_f"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Add", ["sum", f"{v}_f"], [f"y_{v}"]))
    split = draw(st.integers(1, 3))
    for side, axes in (("l", range(split)), ("r", range(split, 4))):
        prev = None
        for axis in axes:
            nodes.append(helper.make_node("Gather", ["v0", const([axis])], [f"{side}{axis}"], axis=0))
            if prev is not None:
                nodes.append(helper.make_node("Mul", [prev, f"{side}{axis}"], [f"{side}{axis}m"]))
            prev = f"{side}{axis}" if prev is None else f"{side}{axis}m"
        nodes.append(helper.make_node("Identity", [prev], [side]))
    nodes += [
        helper.make_node("Concat", ["l", "r"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["z"], allowzero=draw(st.sampled_from([0, 1]))),
    ]
    graph = helper.make_graph(
        nodes,
        "program",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [
            *(helper.make_tensor_value_info(f"y_{v}", TensorProto.FLOAT, [n]) for v, n in outputs),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["z0", "z1"]),
        ],
        initializer=inits,
    )
    return graph, [d for d in dims if isinstance(d, str)]


@given(program=_shape_programs(), sizes=st.lists(st.integers(1, 4), min_size=4, max_size=4))
@settings(max_examples=40, deadline=None)
def test_random_shape_programs_fold_to_what_onnxruntime_computes(tmp_path_factory, program, sizes) -> None:
    """Whatever the program, the folded model computes the original's outputs at two sizes of its named dims:
    each abstract rule (Slice's clamping and negative steps, Gather's negative indices, integer division) and
    each Reshape target put in (copies, -1) is checked against onnxruntime's own run."""
    graph, named = program
    tmp = tmp_path_factory.mktemp("program")
    src = write_graph(graph, tmp / "program.onnx")
    g = onnx_io.load_model(src)
    out = onnx_io.save_model(fold_shapes(g)[0], tmp / "folded.onnx")
    for dims in ({"a": sizes[0], "b": sizes[1]}, {"a": sizes[2], "b": sizes[3]}):
        result = compare(src, out, g, dims=dims)
        assert result.ok, result.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["swin_t_ts", "bert_ts", "swin_t_dynamo"])
def test_corpus_shape_arithmetic_folds_and_computes_the_same_at_two_sizes(tmp_path: Path, name: str) -> None:
    """Real exports: Swin-T (dynamic batch; window reshapes, window padding by zeros and crops to the whole
    axis), by both exporters, and BERT (dynamic batch and sequence; [B, S, -1, 64] targets copied). The folded
    model, run unoptimized, gives the original's outputs at two sizes of every dynamic dim, neither of them a
    size the fold was told."""
    import corpus
    import onnxruntime as ort

    src = tmp_path / f"{name}.onnx"
    onnx.save_model(corpus.load(name), str(src))
    g, _ = precompute(onnx_io.load_model(src))
    folded, removed = fold_shapes(g)
    assert removed > 0
    assert name != "swin_t_ts" or "Shape" not in folded.op_census()  # every window reshape's target is constant
    assert not name.startswith("swin") or "Pad" not in folded.op_census()  # window padding by zeros: none left
    out = onnx_io.save_model(folded, tmp_path / "folded.onnx")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    original, candidate = (ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for p in (src, out))
    rng = np.random.default_rng(0)
    for sizes in ({"batch": 1, "seq": 16}, {"batch": 3, "seq": 7}):
        feeds = {}
        for i in original.get_inputs():
            shape = [sizes[d] if isinstance(d, str) else d for d in i.shape]
            feeds[i.name] = rng.integers(0, 100, shape) if "int" in i.type else rng.standard_normal(shape, np.float32)
        for want, got in zip(original.run(None, feeds), candidate.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
