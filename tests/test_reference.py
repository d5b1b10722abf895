"""The float64 reference (`taso.execute.reference`) runs ops outside the catalogue in onnxruntime one node at a
time, and nodes alike share a session: alike must mean the same op, attributes, input pattern, types and shapes,
or a node would run with another's attributes or fail on another's shapes."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
from conftest import write_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.execute.reference import Reference

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["LeakyRelu", "ThresholdedRelu", "CumSum", "Max", "PRelu"]),
        st.integers(0, 1),  # the attribute or constant operand: one of two values
        st.integers(0, 99),  # which value so far it reads
    ),
    min_size=1,
    max_size=8,
)


def _model(steps: list[tuple[str, int, int]], path: Path) -> tuple[Path, set[tuple]]:
    """A graph of ``steps`` over two inputs of other shapes, and the distinct (op, attributes, shape) it runs."""
    shapes = {"x": (2, 3), "y": (3, 3)}
    inits = [
        numpy_helper.from_array(np.array(v, np.float32 if k < 6 else np.int64), f"c{k}")
        for k, v in enumerate([-0.5, -0.25, 0.5, 0.75, 2.0, 3.0, 0, 1])
    ]
    nodes, kinds = [], set()
    for k, (op, choice, at) in enumerate(steps):
        v = list(shapes)[at % len(shapes)]
        args: list[str] = [v]
        attrs: dict = {}
        if op == "LeakyRelu":
            attrs = {"alpha": (0.1, 0.2)[choice]}
        elif op == "ThresholdedRelu":
            attrs = {"alpha": (0.2, 0.5)[choice]}
        elif op == "CumSum":
            args.append(f"c{6 + choice}")  # the axis
        elif op == "Max":
            args += [f"c{choice}", f"c{2 + choice}"]
        else:
            args.append(f"c{4 + choice}")  # the slope
        nodes.append(helper.make_node(op, args, [f"v{k}"], **attrs))
        shapes[f"v{k}"] = shapes[v]
        kinds.add((op, choice if attrs else None, shapes[v]))  # an operand's value is fed, not built in
    info = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n])  # noqa: E731
    outs = [n for n in shapes if n.startswith("v")]
    graph = helper.make_graph(nodes, "g", [info("x"), info("y")], [info(o) for o in outs], inits)
    return write_graph(graph, path), kinds


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(STEPS, st.integers(0, 2**16))
def test_nodes_alike_share_a_session_and_each_runs_with_its_own_attributes_and_shapes(
    tmp_path: Path, steps: list[tuple[str, int, int]], seed: int
) -> None:
    path, kinds = _model(steps, tmp_path / "m.onnx")
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y": rng.random((3, 3)).astype(np.float32) + 0.5}
    reference = Reference.of(onnx_io.load_model(path))
    exact = reference(feeds)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    for name, got in zip(names, session.run(names, feeds)):
        np.testing.assert_allclose(exact[name], got, rtol=1e-5, atol=1e-6, err_msg=name)
    assert len(reference._sessions) == len(kinds)


def test_the_reference_computes_a_sigmoid_that_overflows_float64s_exp_without_a_warning(tmp_path: Path) -> None:
    """FastViT's logits reach -1000s before a Sigmoid: exp(1000) overflows float64 and 1 / (1 + inf) is the
    right 0. The model's own arithmetic is no news to the user: no numpy RuntimeWarning line on their stderr."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    src = write_graph(
        helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "g", [x], [y]), tmp_path / "s.onnx"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = Reference.of(onnx_io.load_model(src))({"x": np.array([-1000, -1, 0, 1000], np.float32)})["y"]
    np.testing.assert_allclose(got, [0.0, 1 / (1 + np.e), 0.5, 1.0])
