"""What subst knows of ONNX ops it does not model (taso/ops/onnx_facts.py): one entry per op, read by every
stage through the same queries that read a catalogue op's entry."""

from __future__ import annotations

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
    op = ops.get(name)
    assert ops.traits_of(name) == op.traits
    assert ops.size_inputs(name) == op.static_inputs
    assert ops.shape_input(name) == op.shape_of
    assert ops.index_input(name) is None
    assert ops.moves_values(name) == (ops.REARRANGES in op.tags)


def test_an_op_nobody_describes_has_no_facts() -> None:
    assert ops.traits_of("Frobnicate") == frozenset()
    assert (ops.size_inputs("Frobnicate"), ops.shape_input("Frobnicate"), ops.index_input("Frobnicate")) == (
        (),
        None,
        None,
    )
    assert not ops.moves_values("Frobnicate")
