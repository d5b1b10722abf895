"""Corrections: a mismatch the boxes miss is rejected, the same mutant naming its boxes is corrected, exactly."""

from __future__ import annotations

import pytest

from taso import pet
from taso.ir import Node

from .samples import assert_equal_on_random_inputs, conv_graph, graph


def _off_centre_seam(b: pet.Builder, nodes: tuple[Node, ...]) -> pet.Mutant | None:
    """A bad mutant: the conv in two halves cut a third of the way along the width, each half padded as if it
    were the whole image, so the two columns at the cut are wrong; it claims its boxes split only at the edges,
    whose corners and centres never probe the cut."""
    (conv,) = nodes
    n, c, h, w = b.shape(conv.inputs[0])
    left, right = b.split(conv.inputs[0], 3, (w // 3,))
    halves = [b.one("Conv", [part, *conv.inputs[1:]], **conv.attr) for part in (left, right)]
    return pet.single(b.one("Concat", halves, axis=3), {3: (1, w - 1)})


def test_a_mismatch_the_boxes_miss_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pet.MUTATORS, "off-centre-seam", pet.MutantKind("Conv", _off_centre_seam))
    g = conv_graph((2, 3, 5, 12), (4, 3, 3, 3), False, pads=(1, 1, 1, 1))
    assert pet.plan("off-centre-seam", g.nodes, g.types) is None
    assert not [name for name, _ in pet.mutations(g) if "off-centre-seam" in name]
    # the same mutant telling the truth about its cut is corrected, and then exact
    truthful = lambda b, nodes: pet.single(_off_centre_seam(b, nodes).outputs[0], {3: (3, 5)})  # noqa: E731
    monkeypatch.setitem(pet.MUTATORS, "truthful-seam", pet.MutantKind("Conv", truthful))
    fix = pet.plan("truthful-seam", g.nodes, g.types)
    assert fix is not None and fix.fixes == (pet.Fix(3, ((3, 5),)),)
    h = pet.mutate(g, g.nodes, "truthful-seam", fix)
    assert h is not None
    assert_equal_on_random_inputs(g, h, seed=5)


def _copied_line(axis: int, at: int, splits: tuple[int, ...]) -> pet.Mutator:
    """A bad merge of sibling MatMuls: right for the first sibling, but the second one's line ``at - 1`` along
    ``axis`` (a batch, a row or a column) is copied over line ``at``; it claims the boxes split at ``splits``."""

    def build(b: pet.Builder, mms: tuple[Node, ...]) -> pet.Mutant:
        merged = pet.MUTATORS["merge-matmuls"].build(b, mms)
        assert merged is not None
        first, second = merged.outputs
        before, line, _, after = b.split(second, axis, (at - 1, at, at + 1))
        copied = b.one("Concat", [before, line, line, after], axis=axis)
        return pet.Mutant((first, copied), ({}, {axis: splits}))

    return build


@pytest.mark.parametrize("axis", [0, 1, 2], ids=["batch", "rows", "columns"])
def test_a_merge_whose_mismatch_the_boxes_miss_is_rejected(axis: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The multi-output machinery and every way a MatMul slab is recomputed: a planted line that no probe
    reaches is rejected, and the same mutant naming the line's boxes is corrected there, and then exact."""
    g = graph((12, 12, 6), [("MatMul", {"w": (6, 12)}, {}), ("MatMul", {"w": (6, 12)}, {})])
    lying, truthful = f"lying-{axis}", f"truthful-{axis}"  # plans are cached by kind name: one name per mutator
    monkeypatch.setitem(pet.MUTATORS, lying, pet.MutantKind("MatMul", _copied_line(axis, 3, (1, 11)), merges=()))
    assert pet.plan(lying, g.nodes, g.types) is None
    assert not [name for name, _ in pet.mutations(g) if lying in name]
    monkeypatch.setitem(pet.MUTATORS, truthful, pet.MutantKind("MatMul", _copied_line(axis, 3, (3, 4)), merges=()))
    fix = pet.plan(truthful, g.nodes, g.types)
    assert fix is not None and fix.fixes[0].intervals == () and fix.fixes[1] == pet.Fix(axis, ((3, 4),))
    h = pet.mutate(g, g.nodes, truthful, fix)
    assert h is not None
    assert_equal_on_random_inputs(g, h, seed=axis)
