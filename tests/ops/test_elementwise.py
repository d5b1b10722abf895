"""The element-wise ops (taso/ops/elementwise.py) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import ops
from taso.execute import Runner
from taso.execute.precompute import precompute
from taso.ops import field

from .cases import agree, onnxruntime_cases


@pytest.mark.parametrize(("op", "case"), onnxruntime_cases(ops.elementwise), ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    agree(op, *case, tmp_path)


def test_integer_division_stays_opaque_and_is_folded_as_onnx_truncates_it() -> None:
    """Div is modelled over the reals only: an int64 Div (shape arithmetic: a size halved) stays opaque, so
    precomputing it gives onnxruntime's truncated quotient, never numpy's true one (7 / 2 is 3, not 3.5)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [
        helper.make_node("Constant", [], ["seven"], value=numpy_helper.from_array(np.array([7], np.int64))),
        helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array([2], np.int64))),
        helper.make_node("Div", ["seven", "two"], ["half"]),
        helper.make_node("Constant", [], ["start"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Slice", ["x", "start", "half", "axes"], ["s"]),
        helper.make_node("Pad", ["s", "pads"], ["y"]),
    ]
    pads = numpy_helper.from_array(np.array([0, 0, 0, 1], np.int64), "pads")
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [pads]), opset_imports=[helper.make_opsetid("", 17)]
    )
    g = onnx_io.from_proto(model)
    div = next(n for n in g.nodes if n.op == "Div")
    assert div.is_opaque
    folded = precompute(g)[0]
    assert folded.data[div.outputs[0]].array.tolist() == [3]
    floats = onnx_io.from_proto(
        helper.make_model(
            helper.make_graph(
                [helper.make_node("Div", ["x", "x"], ["q"])],
                "f",
                [x],
                [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 8])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
    )
    assert not floats.nodes[0].is_opaque


def _model(nodes: list, inits: list, opset: int = 17, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", dtype, [2, 3])
    y = helper.make_tensor_value_info("y", dtype, [2, 3])
    return helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", opset)]
    )


def _clip(*bounds: str, dtype: int = TensorProto.FLOAT) -> tuple[onnx.ModelProto, list]:
    """x -> Clip(x, *bounds) -> y, its bounds from a Constant node (lo), an initializer (hi), a computed value
    (hi_x2: hi doubled), or left out ("")."""
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    lo = numpy_helper.from_array(np.array(0.0, np_type))
    nodes = [
        helper.make_node("Constant", [], ["lo"], value=lo),
        helper.make_node("Add", ["hi", "hi"], ["hi_x2"]),
        helper.make_node("Clip", ["x", *bounds], ["y"], name="clip"),
    ]
    return _model(nodes, [numpy_helper.from_array(np.array(6.0, np_type), "hi")], dtype=dtype), nodes


@pytest.mark.parametrize(
    ("bounds", "attrs"),
    [
        (("lo", "hi"), {"min": 0.0, "max": 6.0}),
        (("", "hi"), {"min": -ops.CLIP.attrs["max"], "max": 6.0}),
        (("lo",), {"min": 0.0, "max": ops.CLIP.attrs["max"]}),
    ],
)
def test_clip_bounds_from_constants_import_as_attributes_and_export_back(
    bounds: tuple, attrs: dict, tmp_path: Path
) -> None:
    """Clip's min and max are constant inputs in ONNX (a Constant node, an initializer, or left out for the
    default): import makes them attributes of a one-input node; export writes them back, and onnxruntime runs
    the exported model as it ran the source."""
    model, _ = _clip(*bounds)
    g = onnx_io.from_proto(model)
    clip = next(n for n in g.nodes if n.op == "Clip")
    assert not clip.is_opaque and clip.inputs == ("x",) and clip.attr == attrs
    src, out = tmp_path / "src.onnx", tmp_path / "out.onnx"
    onnx.save_model(model, str(src))
    onnx_io.save_model(g, out)
    x = np.linspace(-9, 9, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Runner(out)({"x": x})["y"], Runner(src)({"x": x})["y"])
    again = next(n for n in onnx_io.load_model(out).nodes if n.op == "Clip")
    assert again.attrs == clip.attrs and again.inputs == ("x",)


@pytest.mark.parametrize(
    ("bounds", "dtype", "reason"),
    [
        (("lo", "hi_x2"), TensorProto.FLOAT, "Clip max not a constant"),
        (("lo",), TensorProto.DOUBLE, "without both bounds"),
        (("lo", "hi"), TensorProto.INT32, "integer"),
        (("lo", "hi"), TensorProto.BFLOAT16, "Clip min of type bfloat16"),
    ],
)
def test_a_clip_import_cannot_read_as_float_attributes_stays_opaque(
    bounds: tuple, dtype: int, reason: str, tmp_path: Path
) -> None:
    """A computed bound is no attribute; a bound left out is float32's limit, not a double's; an integer Clip's
    bounds are not floats; a bfloat16 bound is no numpy number (int() would truncate it): each node stays
    opaque, saying why."""
    model, _ = _clip(*bounds, dtype=dtype)
    clip = next(n for n in onnx_io.from_proto(model).nodes if n.op == "Clip")
    assert clip.is_opaque
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    assert [reason in o.reason for o in onnx_io.opaque_reasons(tmp_path / "m.onnx") if o.op == "Clip"] == [True]


@pytest.mark.parametrize("bound", [np.inf, np.nan])
def test_a_clip_to_an_infinity_or_nan_stays_opaque(bound: float) -> None:
    """The rule text form writes no infinity (and NaN's bits order above +inf's in the clip axioms)."""
    model = _model(
        [helper.make_node("Clip", ["x", "", "hi"], ["y"])], [numpy_helper.from_array(np.array(bound, np.float32), "hi")]
    )
    assert onnx_io.from_proto(model).nodes[0].is_opaque


@pytest.mark.parametrize(("approximate", "opaque"), [("none", False), ("tanh", False), ("sigmoid", True)])
def test_gelu_imports_at_opset_20_with_its_approximation(approximate: str, opaque: bool) -> None:
    """ONNX's Gelu (opset 20) imports with its ``approximate`` attribute: the two forms are two functions; a
    value ONNX does not define stays opaque."""
    model = _model([helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)], [], opset=20)
    node = onnx_io.from_proto(model).nodes[0]
    assert node.is_opaque == opaque
    assert opaque or node.attr == {"approximate": approximate}


def test_gelu_field_semantics_tell_the_two_approximations_apart() -> None:
    """Fingerprints must not merge different functions: the two Gelus, or two HardSigmoids, differ over Z_p."""
    x, z = np.arange(50, dtype=np.int64), field.Ring(5)
    erf = ops.GELU.field([x], {"approximate": "none"}, 1, z)[0]  # type: ignore[misc]
    tanh = ops.GELU.field([x], {"approximate": "tanh"}, 1, z)[0]  # type: ignore[misc]
    assert not np.array_equal(erf, tanh)
    fifth = ops.HARD_SIGMOID.field([x], {"alpha": 0.2, "beta": 0.5}, 1, z)[0]  # type: ignore[misc]
    sixth = ops.HARD_SIGMOID.field([x], {"alpha": 1 / 6, "beta": 0.5}, 1, z)[0]  # type: ignore[misc]
    assert not np.array_equal(fifth, sixth)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_below_opset_20_stays_as_the_exporter_wrote_it(approximate: str, tmp_path: Path) -> None:
    """Before opset 20 exporters write GELU in primitives (x * 0.5 * (1 + Erf(x / sqrt 2)), or the tanh form):
    import keeps each primitive (now all catalogue ops) and export writes them back, no Gelu, and onnxruntime
    runs the round trip as the source. At opset 20 a Gelu node is kept as one node."""
    c = {"sqrt2": 2**0.5, "one": 1.0, "half": 0.5, "k": (2 / np.pi) ** 0.5, "cubic": 0.044715}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in c.items()]
    if approximate == "none":
        inner = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"])]
    else:
        inner = [
            helper.make_node("Mul", ["x", "x"], ["x2"]),
            helper.make_node("Mul", ["x2", "x"], ["x3"]),
            helper.make_node("Mul", ["x3", "cubic"], ["c3"]),
            helper.make_node("Add", ["x", "c3"], ["p"]),
            helper.make_node("Mul", ["p", "k"], ["q"]),
            helper.make_node("Tanh", ["q"], ["e"]),
        ]
    tail = [
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["x", "e1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    primitives, fused = (
        _model(inner + tail, inits),
        _model([helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)], [], opset=20),
    )
    x = np.linspace(-4, 4, 6, dtype=np.float32).reshape(2, 3)
    for model, ops_written in ((primitives, {n.op_type for n in inner + tail}), (fused, {"Gelu"})):
        src, out = tmp_path / "src.onnx", tmp_path / "out.onnx"
        onnx.save_model(model, str(src))
        g = onnx_io.load_model(src)
        assert not any(n.is_opaque for n in g.nodes)
        onnx_io.save_model(g, out)
        assert {n.op_type for n in onnx.load(str(out)).graph.node} == ops_written
        np.testing.assert_allclose(Runner(out)({"x": x})["y"], Runner(src)({"x": x})["y"], rtol=1e-6)
    want = ops.GELU.run([x.astype(np.float64)], {"approximate": approximate})[0]
    np.testing.assert_allclose(Runner(tmp_path / "src.onnx")({"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def test_a_clip_of_opset_10_with_attribute_bounds_imports_as_the_same_entry(tmp_path: Path) -> None:
    """Before opset 11 Clip's bounds were attributes: import upgrades the model (onnx's version converter makes
    them constant inputs), and the entry gets them as it gets an opset-13 Clip's."""
    model = _model([helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [], opset=10)
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    clip = next(n for n in onnx_io.load_model(tmp_path / "m.onnx").nodes if n.op == "Clip")
    assert not clip.is_opaque and clip.inputs == ("x",) and clip.attr == {"min": 0.0, "max": 6.0}
