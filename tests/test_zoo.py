"""Every zoo model builds, is valid ONNX, runs in onnxruntime and survives subst's import/export losslessly.

The zoo is what the optimizer is held against, so a builder that quietly produced an invalid or degenerate
model (all-equal weights, a shape the checker rejects) would make every later result meaningless. The tool that
grows the committed cost table (models/merge_costs.py) is held here too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import zoo
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from taso import onnx as onnx_io
from taso.execute import Runner
from taso.ir import Graph
from taso.optimize import optimize

BUILT = [name for name in zoo.ZOO if name.removesuffix("_fp16") not in zoo.LIGHT_ZOO]
"""Models the builders make; the light models' import/export round trips live in test_onnx_io."""


Built = tuple[str, onnx.ModelProto, Path]


@pytest.fixture(scope="module")
def built(request, tmp_path_factory) -> Built:
    """Each model built once and saved; module scope makes pytest run all tests of one model together."""
    model = zoo.ZOO[request.param]()
    path = tmp_path_factory.mktemp(request.param) / "src.onnx"
    onnx.save_model(model, str(path))
    return request.param, model, path


@pytest.mark.parametrize("built", BUILT, indirect=True)
def test_model_is_valid_and_round_trips(built: Built, tmp_path: Path, empty_store: Path) -> None:
    _, model, src = built
    onnx.checker.check_model(model, full_check=True)
    out = tmp_path / "out.onnx"
    report = optimize(src, out, empty_store)
    assert report.check is not None and report.check.ok, report.check
    onnx.checker.check_model(str(out), full_check=True)
    assert _read(onnx_io.load_model(out)) == _read(onnx_io.load_model(src))


def _read(g: Graph) -> Graph:
    """``g`` with only the weights its nodes read. A catalogue node's constant operands live in its attributes,
    in the form import normalises them to (a Slice's ends clamped, a Squeeze's axes filled in); export writes
    them back as a constant of their own where the file held another form: what the nodes compute is the same,
    the constants no node reads are not compared."""
    read = {v for n in g.nodes for v in n.inputs} | set(g.outputs)
    unread = set(g.weights) - read
    return replace(
        g,
        weights=tuple(w for w in g.weights if w in read),
        data={w: d for w, d in g.data.items() if w not in unread},
        types={v: t for v, t in g.types.items() if v not in unread},
    )


@pytest.mark.parametrize("built", list(zoo.ZOO), indirect=True)
def test_weights_are_not_all_equal(built: Built) -> None:
    """Equal weights make wrong rewrites look right; shape constants (integers, masks) may repeat. Two values
    differ where the least is below the greatest (a NaN fails it too): np.unique's sort of VGG-19's 140 M
    weights took 8 s of CPU."""
    _, model, _ = built
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and a.size > 1:
            assert a.min() < a.max(), t.name


@pytest.mark.parametrize("built", list(zoo.ZOO), indirect=True)
def test_outputs_are_finite_and_vary(built: Built) -> None:
    """NaN outputs compare equal under the check's equal_nan and constant ones match any rewrite of themselves:
    either makes every equivalence check on the model pass vacuously."""
    _, _, src = built
    run = Runner(src)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in run.session.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in i.shape]
        floats = np.float16 if i.type == "tensor(float16)" else np.float32
        feeds[i.name] = rng.integers(0, 2, shape) if "int" in i.type else rng.standard_normal(shape).astype(floats)
    for name, value in run(feeds).items():
        assert np.all(np.isfinite(value)), name
        assert np.std(value) > 1e-3 * max(np.max(np.abs(value)), 1e-6), name


@pytest.mark.parametrize("built", BUILT, indirect=True)
def test_builders_follow_the_zoo_conventions(built: Built) -> None:
    """Opset 17 and IR 8 (onnxruntime 1.31 reads IR <= 10); static batch 1 unless the name says dynamic."""
    name, model, _ = built
    assert model.ir_version == 8 and [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    dims = [i.type.tensor_type.shape.dim[0] for i in model.graph.input]
    if name.endswith("_dyn"):
        assert all(d.dim_param == "batch" for d in dims)
    else:
        assert all(d.dim_value == 1 for d in dims)


@settings(max_examples=50, deadline=None)
@given(
    base=st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.floats(0.001, 10.0), min_size=1, max_size=12),
    extra=st.dictionaries(st.text("uvwxyz", min_size=1, max_size=3), st.floats(0.001, 10.0), max_size=12),
    scale=st.floats(0.5, 2.0),
)
def test_a_newer_cost_table_adds_only_its_new_units_scaled_onto_the_committed_one(
    base: dict[str, float], extra: dict[str, float], scale: float
) -> None:
    """models/merge_costs.py: a newer lease measured every unit ``scale`` times quicker; the committed values
    stand, and the units only the newer table holds come in at the committed table's speed."""
    import merge_costs

    newer = {k: ms / scale for k, ms in base.items()} | extra
    merged, added = merge_costs.merge({"device": {"name": "x"}, "costs": base}, [{"costs": newer}])
    assert merged["device"] == {"name": "x"}
    assert added[0][0] == len(extra) and added[0][1] == pytest.approx(scale)
    assert {k: merged["costs"][k] for k in base} == base
    assert all(merged["costs"][k] == pytest.approx(ms * scale) for k, ms in extra.items())
