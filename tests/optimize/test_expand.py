"""An Expand to a computed shape named by the shape's abstract value (taso.optimize.shapefold): torch's
``mask.expand(batch, -1, seq, seq)``, as the TorchScript exporter writes it for T5, tests each entry against -1
(Equal, Where); once those are followed, the mask's type names its dims, the attention it meets keeps them, and
the reshapes after it fold. Each abstract step is checked against every size its dim params may take."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from conftest import write_graph
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.execute import compare
from taso.ir import Node
from taso.optimize.shapefold import _elementwise, _equal, _expanded, _where, abstract_values, fold_shapes

SIZES = (0, 1, 2, 3)
"""The sizes a dim param is tried at: 0 and 1 are where broadcasting and equality surprise."""
ELEMS = st.sampled_from([-1, 0, 1, 2, 3, "a", "b"])
DIMS = st.sampled_from([1, 2, 3, "a", "b"])


def _at(e: int | str, sizes: dict[str, int]) -> int:
    return sizes[e] if isinstance(e, str) else e


def _assignments() -> list[dict[str, int]]:
    return [{"a": a, "b": b} for a, b in itertools.product(SIZES, SIZES)]


@given(x=st.lists(ELEMS, min_size=1, max_size=3), y=st.lists(ELEMS, min_size=1, max_size=3))
@settings(max_examples=300, deadline=None)
def test_equal_decides_only_what_every_size_agrees_on(x: list, y: list) -> None:
    """Where the abstract Equal gives 0 or 1, the concrete Equal gives it at every size of the dim params."""
    values = {"x": ((len(x),), tuple(x)), "y": ((len(y),), tuple(y))}
    if len(x) != len(y) and 1 not in (len(x), len(y)):
        return
    node = Node("Equal", ("x", "y"), ("z",))
    result = _equal(node, None, values)  # type: ignore[arg-type]
    assert result is not None
    for sizes in _assignments():
        concrete = np.equal([_at(e, sizes) for e in x], [_at(e, sizes) for e in y]).astype(int).tolist()
        assert all(a is None or a == c for a, c in zip(result[1], concrete))


def test_a_dim_param_is_never_minus_one_and_always_itself() -> None:
    """What the fold needs from Equal: torch's -1 test is false of a dim, true of -1, and a dim equals itself;
    a dim against a size it may have, or against another dim, is unknown."""
    values = {"t": ((4,), ("a", -1, "b", 2)), "m": ((1,), (-1,)), "s": ((4,), ("a", "b", 2, "b"))}
    assert _equal(Node("Equal", ("t", "m"), ("z",)), None, values)[1] == (0, 1, 0, 0)  # type: ignore[arg-type,index]
    assert _equal(Node("Equal", ("t", "s"), ("z",)), None, values)[1] == (1, 0, None, None)  # type: ignore[arg-type,index]


@given(c=st.lists(st.sampled_from([0, 1, None]), min_size=3, max_size=3), x=st.lists(ELEMS, min_size=3, max_size=3))
def test_where_picks_an_entry_only_on_a_known_condition(c: list, x: list) -> None:
    values = {"c": ((3,), tuple(c)), "x": ((3,), tuple(x)), "one": ((1,), (1,))}
    result = _where(Node("Where", ("c", "x", "one"), ("z",)), None, values)  # type: ignore[arg-type]
    assert result is not None
    assert result[1] == tuple(None if k is None else e if k else 1 for k, e in zip(c, x))


def test_shape_values_broadcast_only_one_element_against_many() -> None:
    values = {"p": ((2,), (1, 2)), "q": ((3,), (1, 2, 3)), "k": ((), (5,))}
    add = lambda *e: None  # noqa: E731
    assert _elementwise(Node("Add", ("p", "q"), ("z",)), values, add) is None
    assert _elementwise(Node("Add", ("k", "q"), ("z",)), values, add) == ((3,), (None, None, None))


@given(shape=st.lists(DIMS, max_size=3), target=st.lists(DIMS, max_size=3))
@settings(max_examples=300, deadline=None)
def test_an_expanded_type_is_the_broadcast_at_every_size(shape: list, target: list) -> None:
    """Where `_expanded` names Expand's output, that is numpy's broadcast at every size of the dim params where
    the Expand runs at all: two different dim params, either of which may be 1, are never named."""
    named = _expanded(tuple(shape), tuple(target))
    if named is None:
        return
    for sizes in _assignments():
        concrete = [_at(d, sizes) for d in shape], [_at(d, sizes) for d in target]
        try:
            wide = np.broadcast_shapes(tuple(concrete[0]), tuple(concrete[1]))
        except ValueError:
            continue  # onnxruntime refuses the Expand at these sizes: nothing runs after it
        assert wide == tuple(_at(d, sizes) for d in named)


def test_two_dim_params_are_not_broadcast_to_either() -> None:
    assert _expanded(("a",), ("b",)) is None
    assert _expanded(("a", 1), ("a", "b")) == ("a", "b")


def _t5_mask(tmp: Path) -> Path:
    """T5's masked attention as the TorchScript exporter writes it: a mask [1, 1, seq] expanded to
    ``(batch, -1, seq)`` through torch's -1 test, scores [batch, seq, seq] masked with it, the result [batch,
    seq, 4] reshaped to ``(batch, seq, -1)`` from its own Shape, as the heads are merged."""
    c = {"zero": 0, "one": 1, "i0": [0], "i1": [1], "axes": [0, 1], "neg1": [-1], "negs": [-1, -1, -1]}
    c |= {"ones": [1, 1, 1], "fzero": 0.0}
    inits = [
        numpy_helper.from_array(np.array(v, np.float32 if isinstance(v, float) else np.int64), k) for k, v in c.items()
    ]
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["b"], axis=0),
        n("Gather", ["s", "one"], ["q"], axis=0),
        n("Range", ["zero", "q", "one"], ["r"]),
        n("Unsqueeze", ["r", "axes"], ["r3"]),
        n("GreaterOrEqual", ["r3", "zero"], ["keep"]),
        n("Unsqueeze", ["b", "i0"], ["b1"]),
        n("Unsqueeze", ["q", "i0"], ["q1"]),
        n("Concat", ["b1", "neg1", "q1"], ["wanted"], axis=0),
        n("Equal", ["wanted", "negs"], ["kept"]),
        n("Where", ["kept", "ones", "wanted"], ["target"]),
        n("Expand", ["keep", "target"], ["mask"]),
        n("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        n("MatMul", ["x", "xt"], ["scores"]),
        n("Where", ["mask", "scores", "fzero"], ["masked"]),
        n("MatMul", ["masked", "x"], ["mixed"]),
        n("Shape", ["mixed"], ["ms"]),
        n("Gather", ["ms", "zero"], ["mb"], axis=0),
        n("Gather", ["ms", "one"], ["mq"], axis=0),
        n("Unsqueeze", ["mb", "i0"], ["mb1"]),
        n("Unsqueeze", ["mq", "i0"], ["mq1"]),
        n("Concat", ["mb1", "mq1", "neg1"], ["merged"], axis=0),
        n("Reshape", ["mixed", "merged"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "t5_mask",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=inits,
    )
    return write_graph(graph, tmp / "t5_mask.onnx")


@pytest.fixture(scope="module")
def t5_mask(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("t5_mask")
    src = _t5_mask(tmp)
    return src, onnx_io.save_model(fold_shapes(onnx_io.load_model(src))[0], tmp / "folded.onnx")


def test_the_expanded_mask_names_its_dims_and_the_heads_merge_folds(t5_mask: tuple[Path, Path]) -> None:
    g = onnx_io.load_model(t5_mask[0])
    assert g.types["mask"].shape != ("batch", 1, "seq")  # onnx sizes an Expand only from a constant
    folded, _ = fold_shapes(g)
    assert folded.types["mask"].shape == ("batch", 1, "seq")
    assert folded.types["mixed"].shape == ("batch", "seq", 4)
    (reshape,) = (n for n in folded.nodes if n.op == "Reshape")
    assert folded.data[reshape.inputs[1]].array.tolist() == [0, 0, 4]  # the Shape, Gathers and Concat are gone
    census = folded.op_census()
    assert "Equal" not in census and census["Concat"] == 1  # the -1 test is decided; the Expand's target stays


@given(batch=st.integers(1, 3), seq=st.integers(1, 5))
@settings(max_examples=10, deadline=None)
def test_the_folded_mask_computes_the_same_at_every_size(t5_mask: tuple[Path, Path], batch: int, seq: int) -> None:
    """(At 0 the original's own ``(batch, seq, -1)`` cannot be inferred: it does not run there.)"""
    src, out = t5_mask
    result = compare(src, out, onnx_io.load_model(src), dims={"batch": batch, "seq": seq})
    assert result.ok, result.summary()


def test_a_cast_to_bool_is_whether_an_entry_is_nonzero(tmp_path: Path) -> None:
    """A dim may be 0 (an empty batch): its truth is unknown, where a Cast between integers keeps the dim."""
    c = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("sizes", [2, 0]),)]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Concat", ["s", "sizes"], ["t"], axis=0),
        helper.make_node("Cast", ["t"], ["truth"], to=TensorProto.BOOL),
        helper.make_node("Cast", ["t"], ["same"], to=TensorProto.INT32),
        helper.make_node("Identity", ["x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "casts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"])],
        [
            helper.make_tensor_value_info(v, t, [3])
            for v, t in (("truth", TensorProto.BOOL), ("same", TensorProto.INT32))
        ]
        + [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])],
        initializer=c,
    )
    values = abstract_values(onnx_io.load_model(write_graph(graph, tmp_path / "casts.onnx")))
    assert values["truth"] == ((3,), (None, 1, 0)) and values["same"] == ((3,), ("batch", 2, 0))
