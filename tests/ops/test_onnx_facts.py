"""What subst knows of ONNX ops it does not model (taso/ops/onnx_facts.py): one entry per op, read by every
stage through the same queries that read a catalogue op's entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from taso import ops
from taso.ops import traits


@pytest.mark.parametrize("name", sorted(ops.ONNX_OPS))
def test_each_fact_about_an_onnx_op_is_read_from_its_one_entry(name: str) -> None:
    """The check's feeds, the cost model's sets and ONNX import ask `traits_of`, `having`, `size_inputs`,
    `shape_input` and `index_input`: for an op outside the catalogue each answers from its `ONNX_OPS` entry."""
    fact = ops.ONNX_OPS[name]
    assert name not in ops.OPS, "a modelled op keeps its facts on its catalogue entry"
    assert ops.traits_of(name) == fact.traits
    assert all(name in ops.having(t) for t in fact.traits)
    assert set(fact.traits) <= {v for k, v in vars(traits).items() if k.isupper()}, "a trait of taso.ops.traits"
    assert ops.size_inputs(name) == fact.sizes
    assert ops.shape_input(name) == fact.shape_of
    assert ops.index_input(name) == fact.indices
    assert ops.moves_values(name) == (ops.REARRANGES in fact.traits)
    if fact.shape_of is not None:  # the shape input sizes the result; the data input is another one
        assert fact.shape_of[0] in fact.sizes and fact.shape_of[1] not in fact.sizes


@pytest.mark.parametrize("name", sorted(ops.OPS))
def test_a_catalogue_op_answers_the_same_queries_from_its_entry(name: str) -> None:
    """Its entry answers, with what it says of the node left opaque (`OpDef.opaque`: a Gather by token ids)."""
    op = ops.get(name)
    opaque = op.opaque or ops.OnnxOp()
    assert ops.traits_of(name) == op.traits
    assert ops.size_inputs(name) == op.static_inputs + opaque.sizes
    assert ops.shape_input(name) == op.shape_of
    assert ops.index_input(name) == opaque.indices
    assert ops.moves_values(name) == (ops.REARRANGES in op.tags)


def test_an_op_nobody_describes_has_no_facts() -> None:
    assert ops.traits_of("Frobnicate") == frozenset()
    assert (ops.size_inputs("Frobnicate"), ops.shape_input("Frobnicate"), ops.index_input("Frobnicate")) == (
        (),
        None,
        None,
    )
    assert not ops.moves_values("Frobnicate")


def test_an_embedding_gather_left_opaque_still_gets_token_ids_in_range(tmp_path: Path) -> None:
    """Gather by computed indices stays opaque, and the check's drawn inputs still index within the table:
    the fact moved from `ONNX_OPS` to the entry's ``opaque`` (without it ids are drawn at random)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from taso import onnx as onnx_io
    from taso.execute import feeds

    table = numpy_helper.from_array(np.zeros((5, 3), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        initializer=[table],
    )
    path = tmp_path / "embed.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    g = onnx_io.load_model(path)
    assert g.nodes[0].is_opaque
    assert feeds.hints(g, {})["ids"].below == 5
