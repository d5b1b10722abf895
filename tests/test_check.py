"""The final check judges float32 error against a float64 reference: it passes the folds that merely round
differently (DenseNet-121, refused by an element-wise test) and refuses a rewrite wrong by far less than
that test's tolerance allows; shapes with unknown dims never crash it."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, write_graph, zoo
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import taso
from taso import cost
from taso import onnx as onnx_io
from taso.cost import profiler
from taso.errors import BadInput, CheckFailed
from taso.execute import check, feeds
from taso.execute.precompute import precompute
from taso.ir import Graph, TensorType, WeightData
from taso.optimize.guard import confirm_speedup
from taso.optimize.pipeline import Settings, optimize
from taso.optimize.report import quiet
from taso.rules import store
from taso.search import apply_everywhere

DENSENET_SEED = 7
"""Weights on which the element-wise test at rtol 1e-3, atol 1e-5 refuses the folds (an output near zero)."""


def filled(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """``model`` with the weights issue 28 measured on: seeded N(0, 1/fan-in) for tensors, |N| + 0.5 for
    per-channel vectors (BatchNorm's variances and the Mul/Add scales after it). The zoo's own filler keeps
    outputs small and centred; these reach thousands, where float32 rounding moves an output by more than an
    absolute tolerance of 1e-5 (zoo.materialize supplies the stand-ins' shapes)."""
    m = zoo.materialize(model, seed)
    rng = np.random.default_rng(seed)
    tensors = []
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f":
            fan_in = int(np.prod(a.shape[1:]))
            value = (
                rng.standard_normal(a.shape) / np.sqrt(fan_in)
                if a.ndim > 1
                else np.abs(rng.standard_normal(a.shape)) + 0.5
            )
            t = numpy_helper.from_array(value.astype(np.float32), t.name)
        tensors.append(t)
    del m.graph.initializer[:]
    m.graph.initializer.extend(tensors)
    return m


def folded(g: Graph, tmp: Path) -> Graph:
    """``g`` rewritten by the shipped store's always rules (BatchNorm and per-channel folds), as `optimize`
    applies them before its search."""
    shutil.copy(ROOT / "substitutions.db", tmp / "store.db")
    db = store.open_store(tmp / "store.db")
    rules = [r for r in store.load_rules(db, status="proved", op="BatchNormalization") if r.always]
    result, applied = apply_everywhere(precompute(g)[0], rules)
    assert applied, "no fold applied: the test would prove nothing"
    return result


@pytest.fixture(scope="module")
def densenet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Graph]:
    """The light DenseNet-121 on disk and its folds (computed once: they take seconds)."""
    tmp = tmp_path_factory.mktemp("densenet")
    path = tmp / "densenet.onnx"
    onnx.save_model(filled(onnx.load(str(zoo.LIGHT_DIR / "light_densenet121.onnx")), DENSENET_SEED), str(path))
    return path, folded(onnx_io.load_model(path), tmp)


def planted_epsilon(g: Graph) -> Graph:
    """``g`` with its first BatchNorm's epsilon 1e-4 instead of 1e-5: wrong by about 1e-5 of the output."""
    i = next(i for i, n in enumerate(g.nodes) if n.op == "BatchNormalization")
    n = g.nodes[i]
    assert n.attr["epsilon"] == pytest.approx(1e-5)
    nodes = list(g.nodes)
    nodes[i] = replace(n, attrs=tuple(sorted({**n.attr, "epsilon": 1e-4}.items())))
    return replace(g, nodes=tuple(nodes))


def planted_weight(g: Graph) -> Graph:
    """``g`` with the largest element of the stem Conv's kernel 1 % larger: 10^5 float32 ulps, moving the
    output by about 1e-4 of its norm."""
    conv = next(n for n in g.nodes if n.op == "Conv")
    w = g.data[conv.inputs[1]].array.copy()
    w.flat[np.argmax(np.abs(w))] *= np.float32(1.01)
    return replace(g, data={**g.data, conv.inputs[1]: WeightData(w)})


def test_check_passes_densenet_folds_that_the_element_wise_test_refuses(
    densenet: tuple[Path, Graph], empty_store: Path, tmp_path: Path
) -> None:
    src, result = densenet
    report = optimize(src, tmp_path / "out.onnx", empty_store, rewrite=lambda g: (result, {"folds": 1}))
    c = report.check
    assert c is not None and c.ok and c.mode == "reference", c
    assert c.rewrite_error is not None and c.original_error is not None and c.limit is not None
    assert c.rewrite_error.norm < 1e-6 and c.original_error.norm < 1e-6  # both are rounding, of one size
    assert "error vs float64: rewrite" in c.summary() and (tmp_path / "out.onnx").exists()
    old = check.compare(src, tmp_path / "out.onnx", onnx_io.load_model(src), rtol=1e-3, atol=1e-5)
    assert not old.ok and old.mode == "given tolerance"  # the old defaults, asked for explicitly, still refuse it


@pytest.mark.parametrize("plant", [planted_epsilon, planted_weight], ids=lambda f: f.__name__)
def test_check_refuses_a_densenet_rewrite_wrong_far_above_rounding(
    plant, densenet: tuple[Path, Graph], empty_store: Path, tmp_path: Path
) -> None:
    src, result = densenet
    with pytest.raises(CheckFailed) as failed:
        optimize(src, tmp_path / "out.onnx", empty_store, rewrite=lambda g: (plant(result), {"planted": 1}))
    c = failed.value.report.check
    assert c is not None and not c.ok and c.mode == "reference"
    assert c.rewrite_error is not None and c.limit is not None and not c.rewrite_error.within(c.limit)
    assert not (tmp_path / "out.onnx").exists()


def test_check_with_explicit_tolerances_decides_element_wise(tmp_path: Path) -> None:
    """x * 1.0001 for x * 1: refused by default (1e-4 is 800 float32 ulps), passed element-wise at the rtol a
    user asked for, with the errors still reported."""

    def scaled(k: float, name: str) -> Path:
        w = numpy_helper.from_array(np.full((64,), k, np.float32), "k")
        x, y = (helper.make_tensor_value_info(v, TensorProto.FLOAT, [4, 64]) for v in "xy")
        graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g", [x], [y], [w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.save_model(model, str(tmp_path / name))
        return tmp_path / name

    src, wrong = scaled(1.0, "src.onnx"), scaled(1.0001, "wrong.onnx")
    g = onnx_io.load_model(src)
    default = check.compare(src, wrong, g)
    assert not default.ok and default.mode == "reference"
    asked = check.compare(src, wrong, g, rtol=1e-3)
    assert asked.ok and asked.mode == "given tolerance" and asked.rewrite_error is not None
    assert "rtol 0.001, atol 1e-05, given tolerance" in asked.summary()


def nudged(src: Path, dst: Path) -> Path:
    """``src`` with every float output times 1 + 2^-23, plus 1e-30 (zeros move too): about one float32 rounding
    more, as a correct rewrite adds. A candidate that gives the original's outputs bit for bit is passed
    without a reference (mode "identical"), which these tests are not about."""
    model = onnx.load(str(src))
    g = model.graph
    for out in g.output:
        if out.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        producer = next(n for n in g.node if out.name in n.output)
        producer.output[list(producer.output).index(out.name)] = f"{out.name}#raw"
        g.node.append(helper.make_node("Mul", [f"{out.name}#raw", "nudge_scale"], [f"{out.name}#scaled"]))
        g.node.append(helper.make_node("Add", [f"{out.name}#scaled", "nudge_shift"], [out.name]))
    g.initializer.append(numpy_helper.from_array(np.array(1 + 2**-23, np.float32), "nudge_scale"))
    g.initializer.append(numpy_helper.from_array(np.array(1e-30, np.float32), "nudge_shift"))
    onnx.save_model(model, str(dst))
    return dst


def test_check_judges_bert_against_a_reference_despite_opaque_ops(bert_path: Path, tmp_path: Path) -> None:
    """BERT-tiny has Gather, Cast, ... outside the catalogue: they run one by one in onnxruntime. Its Erf is
    the catalogue's, so the reference computes it in float64 (onnxruntime has no double Erf, and the summary
    said so while it ran there)."""
    candidate = nudged(bert_path, tmp_path / "nudged.onnx")
    result = check.compare(bert_path, candidate, onnx_io.load_model(bert_path), dims={"batch": 1, "seq": 8})
    assert result.ok and result.mode == "reference", result.summary()
    assert "Erf in float32" not in result.summary()


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 63), st.sampled_from([0, 4, 5, 64, 2**12]), st.booleans())
def test_only_outputs_identical_bit_for_bit_pass_without_the_reference(index: int, ulps: int, up: bool) -> None:
    """x * w against x * w with one element of w moved by ``ulps`` float32 steps (4 or more move a product by
    two steps at least, so its rounding cannot hide the change): the check takes the candidate as identical
    to the original, and skips the float64 reference, exactly when nothing moved."""
    w = np.random.default_rng(index).standard_normal(64).astype(np.float32)
    moved = w.copy()
    moved.view(np.int32)[index] += ulps if up else -ulps
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, k in (("src", w), ("candidate", moved)):
            x, y = (helper.make_tensor_value_info(v, TensorProto.FLOAT, [4, 64]) for v in "xy")
            nodes = [helper.make_node("Mul", ["x", "k"], ["y"])]
            graph = helper.make_graph(nodes, name, [x], [y], [numpy_helper.from_array(k, "k")])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
            model.ir_version = 8
            paths.append(Path(tmp) / f"{name}.onnx")
            onnx.save_model(model, str(paths[-1]))
        result = check.compare(*paths, onnx_io.load_model(paths[0]))
    assert (result.mode == "identical") == (ulps == 0), result.summary()
    assert result.mode == "identical" or result.mode == "reference" and result.rewrite_error is not None
    assert result.ok or ulps > 0


def test_check_and_rewrite_survive_a_negative_dim(tmp_path: Path) -> None:
    """Exporters such as paddle2onnx write -1 for a dynamic dim; drawing random values for it crashed both
    the rewrite's float64 instantiation check and the final check (issue 31)."""
    rng = np.random.default_rng(0)
    shapes = {"w": (4, 3, 3, 3), "b": (4,), "scale": (4,), "bias": (4,), "mean": (4,), "var": (4,)}
    values = {n: rng.standard_normal(s) for n, s in shapes.items()}
    values["var"] = np.abs(values["var"]) + 0.5
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in values.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, 8, 8])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    onnx.save_model(model, str(tmp_path / "src.onnx"))
    g = onnx_io.load_model(tmp_path / "src.onnx")
    assert g.types["x"].shape == (-1, 3, 8, 8)
    result = folded(g, tmp_path)
    assert [n.op for n in result.nodes] == ["Conv"]
    out = onnx_io.save_model(result, tmp_path / "out.onnx")
    assert check.compare(tmp_path / "src.onnx", out, g).ok


dims = st.one_of(st.integers(-3, 5), st.none(), st.sampled_from(["batch", "seq"]))


@given(st.lists(dims, max_size=4), st.dictionaries(st.sampled_from(["batch", "seq"]), st.integers(0, 4)))
def test_check_draws_inputs_for_any_declared_shape(shape: list, sizes: dict) -> None:
    drawn = feeds.concrete_shape(TensorType("float32", tuple(shape)), sizes)
    assert all(d >= 0 for d in drawn)
    assert all(d == s for d, s in zip(drawn, shape) if isinstance(s, int) and s >= 0)
    assert all(d == sizes.get(s, feeds.DEFAULT_DIM) for d, s in zip(drawn, shape) if isinstance(s, str))


def test_check_falls_back_to_element_wise_where_float32_is_not_rounding(tmp_path: Path) -> None:
    """(x + 1e8) - 1e8 in float32 keeps only multiples of 8: nothing like x, which float64 gives back. The
    original's own error is no rounding then, so it can be no yardstick: the check compares element-wise."""
    big = numpy_helper.from_array(np.array(1e8, np.float32), "big")
    nodes = [helper.make_node("Add", ["x", "big"], ["s"]), helper.make_node("Sub", ["s", "big"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [big]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    src = tmp_path / "src.onnx"
    onnx.save_model(model, str(src))
    result = check.compare(src, nudged(src, tmp_path / "nudged.onnx"), onnx_io.load_model(src))
    assert result.ok and result.mode == "element-wise" and result.rewrite_error is None
    assert "not rounding" in result.summary() and "rtol 0.001" in result.summary()


@given(st.integers(0, 2**32 - 1), st.floats(1e-3, 1e3))
def test_check_errors_are_relative_to_the_output_scale(seed: int, scale: float) -> None:
    """A model whose outputs are k times larger, with errors k times larger, is judged the same."""
    rng = np.random.default_rng(seed)
    exact = rng.standard_normal(64)
    y = exact + 1e-6 * rng.standard_normal(64)
    every = np.ones(64, bool)
    a, b = check.errors(y, exact, every), check.errors(y * scale, exact * scale, every)
    assert a.norm == pytest.approx(b.norm, rel=1e-6) and a.worst == pytest.approx(b.worst, rel=1e-6)
    assert a.norm <= a.worst  # the largest element's share of the RMS is at least the norm-wise ratio


# ---- the check's inputs: integers the graph explains, and inputs the user gives ----------------------------


def _ints(**values: object) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in values.items()]


def vad_model(path: Path) -> Path:
    """A voice-activity model in miniature: its int64 ``sr`` must be a sample rate (8000..8999 or 16000..16999):
    frames = x reshaped to [-1, sr // 8000 * 256], which onnxruntime refuses for anything else. ``gain``, an
    integer input the Reshape does not read, scales the output."""
    nodes = [
        helper.make_node("Div", ["sr", "c8000"], ["k"], name="per_8k"),
        helper.make_node("Mul", ["k", "c256"], ["width"], name="width"),
        helper.make_node("Unsqueeze", ["width", "zero"], ["width1"], name="width1"),
        helper.make_node("Concat", ["minus1", "width1"], ["shape"], axis=0, name="shape"),
        helper.make_node("Reshape", ["x", "shape"], ["frames"], allowzero=1, name="frames"),
        helper.make_node("Tanh", ["frames"], ["t"], name="tanh"),
        helper.make_node("Cast", ["gain"], ["g"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["t", "g"], ["y"], name="y"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "samples"]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        helper.make_tensor_value_info("gain", TensorProto.INT64, [1]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["frames", "width"])
    inits = _ints(c8000=8000, c256=256, zero=[0], minus1=[-1])
    return write_graph(helper.make_graph(nodes, "vad", inputs, [y], inits), path)


def vad_inputs(sr: int, samples: int = 512, seed: int = 0) -> dict[str, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((1, samples)).astype(np.float32)
    return {"x": x, "sr": np.array(sr, np.int64), "gain": np.array([3], np.int64)}


def test_check_refuses_a_model_that_needs_meaningful_inputs_naming_the_input_at_fault(tmp_path: Path) -> None:
    """No random sample rate lets onnxruntime run the model: the refusal names ``sr`` (which the failing
    Reshape reads), not ``gain`` or the float ``x``, and says how to give the check its inputs."""
    src = vad_model(tmp_path / "vad.onnx")
    with pytest.raises(BadInput) as info:
        check.compare(src, src, onnx_io.load_model(src))
    message = str(info.value)
    assert "input 'sr' (int64) likely needs meaningful values" in message
    assert "'gain'" not in message and "'x'" not in message
    assert "--check-inputs FILE.npz" in message and "node 'frames'" in message


def test_check_runs_on_the_given_inputs_and_still_catches_a_wrong_rewrite(tmp_path: Path, empty_store: Path) -> None:
    """Given 8000 and 16000 (and 512 samples, binding the symbolic dim), the check runs and passes; a rewrite
    that turns Tanh into Relu is refused on the same inputs: the given inputs are really compared on."""
    src = vad_model(tmp_path / "vad.onnx")
    sets = [vad_inputs(8000), vad_inputs(16000, seed=1)]
    _, report = taso.optimize(src, store=empty_store, check_inputs=sets)
    assert report.check is not None and report.check.ok and report.check.inputs == "given"
    assert "on 2 given input set(s)" in report.check.summary()

    def tanh_is_relu(g: Graph) -> tuple[Graph, dict[str, int]]:
        return replace(g, nodes=tuple(replace(n, op="Relu") if n.op == "Tanh" else n for n in g.nodes)), {"x": 1}

    out = tmp_path / "out.onnx"
    with pytest.raises(CheckFailed, match="on 2 given input set"):
        optimize(src, out, empty_store, rewrite=tanh_is_relu, settings=Settings(check_inputs=sets))
    assert not out.exists()


@given(st.integers(1, 300), st.integers(0, 1), st.booleans())
@settings(max_examples=12, deadline=None)
def test_token_ids_are_drawn_within_the_axis_they_index(vocab: int, axis: int, flattened: bool) -> None:
    """Ids into a table of ``vocab`` rows (or columns), read directly or after a Flatten, lie within it, cover
    more than 0 and 1 where the table has more rows, and onnxruntime runs the model on them."""
    table = numpy_helper.from_array(np.ones((vocab, 3) if axis == 0 else (3, vocab), np.float32), "table")
    nodes = [helper.make_node("Flatten", ["ids"], ["flat"], axis=0)] if flattened else []
    nodes.append(helper.make_node("Gather", ["table", "flat" if flattened else "ids"], ["y"], axis=axis))
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "g", [ids], [y], [table]))
    g = onnx_io.from_proto(model)
    drawn = check.random_inputs(g, seed=vocab, sensible=True)["ids"]
    assert drawn.min() >= 0 and drawn.max() < vocab
    assert vocab <= 2 or drawn.max() > 1
    check.Runner(onnx_io.model_bytes(g))({"ids": drawn})


def test_integers_that_size_or_shape_a_result_are_drawn_so_the_model_runs(tmp_path: Path) -> None:
    """A Slice step (0 is refused) and the shape an input is expanded to (its own, not 0s and 1s): drawn from
    the graph, both run, where the old 0-or-1 draw gave a step of 0."""
    nodes = [
        helper.make_node("Slice", ["x", "start", "end", "axis", "step"], ["s"]),
        helper.make_node("Expand", ["x", "shape"], ["e"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 10]),
        helper.make_tensor_value_info("step", TensorProto.INT64, [1]),
        helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
    ]
    outputs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [None, None]) for v in "se"]
    graph = helper.make_graph(nodes, "g", inputs, outputs, _ints(start=[0], end=[100], axis=[1]))
    src = write_graph(graph, tmp_path / "m.onnx")
    g = onnx_io.load_model(src)
    assert 0 in [check.random_inputs(g, seed)["step"][0] for seed in (0, 1)]  # the plain draw fails
    for seed in (0, 1):
        drawn = check.random_inputs(g, seed, sensible=True)
        assert drawn["step"][0] > 0
        assert drawn["shape"].tolist() == [3, 10]  # x's own shape, which Expand always accepts
    assert check.compare(src, src, g).ok


def test_the_end_to_end_timing_runs_on_inputs_the_original_runs_on(tmp_path: Path) -> None:
    """The guard that times original and result (before the check) runs a model on the user's inputs, or on
    the first draw it runs on: on plain 0-or-1 ids RoBERTa's embeddings made onnxruntime fail there, a crash."""
    model = cost.CostModel(profiler.pick_device("cpu"), None, calibration=cost.DEFAULT_CALIBRATION)
    path = roberta_embeddings(tmp_path / "roberta.onnx")
    roberta = onnx_io.load_model(path)
    with pytest.raises(check.RunError, match="out of data bounds"):
        check.Runner(onnx_io.model_bytes(roberta))(check.random_inputs(onnx_io.concretize(roberta, {}), seed=0))
    measured = confirm_speedup((path, path), roberta, roberta, model, quiet)
    assert measured["before_ms"] > 0 and measured["after_ms"] > 0
    path = vad_model(tmp_path / "vad.onnx")
    vad = onnx_io.load_model(path)
    with pytest.raises(BadInput, match="'sr'"):
        confirm_speedup((path, path), vad, vad, model, quiet)
    measured = confirm_speedup((path, path), vad, vad, model, quiet, vad_inputs(16000))
    assert measured["before_ms"] > 0 and measured["after_ms"] > 0


def test_a_model_the_check_cannot_run_is_refused_before_any_search(tmp_path: Path) -> None:
    """The check's inputs are chosen first: a model onnxruntime runs on no drawn inputs is refused before the
    search (minutes on a large model), and nothing is written."""
    searched = []

    def rewrite(g: Graph) -> tuple[Graph, dict[str, int]]:
        searched.append(g)
        return g, {}

    out = tmp_path / "out.onnx"
    with pytest.raises(BadInput, match="'sr'"):
        optimize(vad_model(tmp_path / "vad.onnx"), out, rewrite=rewrite)
    assert not searched and not out.exists()


def test_integers_the_graph_misjudges_fall_back_to_the_plain_draw(tmp_path: Path) -> None:
    """x (4 elements) reshaped to [4 - 2n] with zeros kept runs only for n = 0: the sizes the graph suggests
    (2, then 1) fail, and the plain 0-or-1 draw that the check used before them still checks the model."""
    nodes = [
        helper.make_node("Mul", ["n", "two"], ["n2"]),
        helper.make_node("Sub", ["four", "n2"], ["size"]),
        helper.make_node("Unsqueeze", ["size", "zero"], ["shape"]),
        helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("n", TensorProto.INT64, []),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    src = write_graph(helper.make_graph(nodes, "g", inputs, [y], _ints(two=2, four=4, zero=[0])), tmp_path / "m.onnx")
    g = onnx_io.load_model(src)
    assert feeds.hints(g, {})["n"].size
    seed = next(s for s in range(100) if all(check.random_inputs(g, k)["n"] == 0 for k in (s, s + 1)))
    assert check.compare(src, src, g, seeds=(seed, seed + 1)).ok


def test_the_api_takes_one_set_of_arrays_and_names_a_bad_one_by_its_place(tmp_path: Path, empty_store: Path) -> None:
    src = vad_model(tmp_path / "vad.onnx")
    _, report = taso.optimize(src, store=empty_store, check_inputs=vad_inputs(8000))
    assert report.check is not None and report.check.ok and report.check.runs == 1
    wrong = {**vad_inputs(8000), "sr": np.array(8000, np.int32)}
    with pytest.raises(BadInput, match=r"^check_inputs\[1\]: 'sr' is int32, the model takes int64\[\]$"):
        taso.optimize(src, store=empty_store, check_inputs=[vad_inputs(16000), wrong])


FLAWS = ["none", "a float64", "b int32", "a rank 2", "b rank 0", "a dim 0 of 2", "a dim 2 of 4", "b other n", "--dim"]


@given(st.sampled_from(FLAWS), st.integers(0, 5), st.booleans())
def test_given_inputs_are_taken_exactly_when_they_fit_the_model(flaw: str, n: int, with_dim: bool) -> None:
    """Inputs a: float32[1, n, 3] and b: int64[n]: a set is taken iff each array has its input's element type
    and rank, the dims the model fixes, and one size for n, the --dim one where that is given."""
    types = {"a": TensorType("float32", (1, "n", 3)), "b": TensorType("int64", ("n",))}
    g = Graph((), ("a", "b"), ("a",), types)
    a_shape = {"a rank 2": (1, n), "a dim 0 of 2": (2, n, 3), "a dim 2 of 4": (1, n, 4)}.get(flaw, (1, n, 3))
    b_shape = {"b rank 0": (), "b other n": (n + 1,)}.get(flaw, (n,))
    arrays = {
        "a": np.zeros(a_shape, np.float64 if flaw == "a float64" else np.float32),
        "b": np.zeros(b_shape, np.int32 if flaw == "b int32" else np.int64),
    }
    dims = {"n": n + 1 if flaw == "--dim" else n} if with_dim or flaw == "--dim" else {}
    if flaw == "none":
        assert feeds.given(arrays, g, dims)[0].arrays == arrays
    else:
        with pytest.raises(BadInput, match=r"^check_inputs\[0\]: '[ab]' "):
            feeds.given(arrays, g, dims)


def roberta_embeddings(path: Path) -> Path:
    """RoBERTa's embeddings in miniature: token ids into a 50-row table, and token type ids into a table of
    one row (its type_vocab_size is 1), so only 0 is a valid type id."""
    rng = np.random.default_rng(0)
    tables = [
        numpy_helper.from_array(rng.standard_normal((rows, 8)).astype(np.float32), name)
        for name, rows in (("words", 50), ("types", 1))
    ]
    nodes = [
        helper.make_node("Gather", ["words", "input_ids"], ["w"]),
        helper.make_node("Gather", ["types", "token_type_ids"], ["t"]),
        helper.make_node("Add", ["w", "t"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info(v, TensorProto.INT64, ["batch", "seq"]) for v in ("input_ids", "token_type_ids")
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])
    return write_graph(helper.make_graph(nodes, "roberta", inputs, [y], tables), path)


def test_token_ids_into_a_one_row_table_are_checked_without_given_inputs(tmp_path: Path, empty_store: Path) -> None:
    """Random 0-or-1 type ids made onnxruntime refuse the original, and subst the model (exit 2); drawn within
    the table, the check runs and passes."""
    src = roberta_embeddings(tmp_path / "roberta.onnx")
    report = optimize(src, tmp_path / "out.onnx", empty_store, settings=Settings(device="estimate"))
    assert report.check is not None and report.check.ok and report.check.inputs == "random"


def _matmul_in_double(w: np.ndarray, path: Path, absolute: bool = False) -> Path:
    """x @ w computed in float64 (of |x| with ``absolute``: wrong wherever x has a negative element)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[1]])
    nodes = [
        helper.make_node("Abs" if absolute else "Identity", ["x"], ["xa"]),
        helper.make_node("Cast", ["xa"], ["xd"], to=TensorProto.DOUBLE),
        helper.make_node("MatMul", ["xd", "wd"], ["yd"]),
        helper.make_node("Cast", ["yd"], ["y"], to=TensorProto.FLOAT),
    ]
    weights = [numpy_helper.from_array(w.astype(np.float64), "wd")]
    return write_graph(helper.make_graph(nodes, "g", [x], [y], weights), path)


def test_a_later_input_set_worse_conditioned_than_the_first_is_judged_against_its_own_reference(
    tmp_path: Path,
) -> None:
    """x @ w on positive values rounds by an ulp or two; on [a, -1.01 a] against equal halves of w it cancels
    to 1 % of its terms, and float32's error grows 100-fold (FastViT-T8's second random draw did so). A
    candidate more exact than the original then differs from it by the original's own error, far past the
    allowance the first set measured: the second set is measured against its own reference and passes. A
    candidate wrong only on negative values, so only on that set, is still refused."""
    rng = np.random.default_rng(0)
    half = rng.uniform(0.5, 1.5, (128, 8)).astype(np.float32)
    w = np.concatenate([half, half])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    matmul = helper.make_node("MatMul", ["x", "w"], ["y"])
    src = write_graph(
        helper.make_graph([matmul], "g", [x], [y], [numpy_helper.from_array(w, "w")]), tmp_path / "a.onnx"
    )
    a = rng.uniform(0.5, 1.5, (1, 128)).astype(np.float32)
    sets = ({"x": rng.uniform(0.5, 1.5, (1, 256)).astype(np.float32)}, {"x": np.hstack([a, -a * np.float32(1.01)])})
    inputs = check.Inputs(sets, given=True)
    g = onnx_io.load_model(src)
    exact = check.compare(src, _matmul_in_double(w, tmp_path / "exact.onnx"), g, inputs=inputs)
    assert exact.ok and exact.mode == "reference", exact.summary()
    assert exact.original_error is not None and exact.original_error.norm > 1e-5  # the second set's, not the first's
    wrong = check.compare(src, _matmul_in_double(w, tmp_path / "abs.onnx", absolute=True), g, inputs=inputs)
    assert not wrong.ok and wrong.mismatches == ("y",)


@settings(max_examples=30, deadline=None)
@given(st.floats(150, 300), st.floats(1e-6, 1e-2))
def test_errors_of_huge_outputs_are_their_true_relative_size(exponent: float, rel: float) -> None:
    """Outputs past 1e154 square to infinity in float64: a norm taken naively makes the scale infinite and any
    error, however large, relatively nothing."""
    exact = np.full(64, 10.0**exponent)
    got = exact * (1 + rel)
    err = check.errors(got, exact, np.isfinite(exact))
    assert err.norm == pytest.approx(rel, rel=1e-6)
