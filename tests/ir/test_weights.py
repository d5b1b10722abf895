"""Weight data: digests by content or by recipe, deferred data made once when read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from taso.ir import WeightData


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=4), st.lists(st.integers(-3, 3), min_size=1, max_size=4))
def test_computed_weights_have_equal_digests_exactly_when_made_alike(a: list[int], b: list[int]) -> None:
    """A folded weight's digest is its recipe's: the same op on equal data digests alike (the search's repeat
    check sees one graph), other inputs or another op do not."""
    x, y = WeightData(np.array(a, np.float32)), WeightData(np.array(b, np.float32))

    def concat(p: WeightData, q: WeightData, op: str = "Concat") -> WeightData:
        return WeightData.computed(np.concatenate([p.array, q.array]), (op, (("axis", 0),), 0, p, q))

    same = concat(WeightData(np.array(a, np.float32)), WeightData(np.array(b, np.float32)))
    assert concat(x, y) == same and not same.array.flags.writeable
    assert (concat(y, x) == same) == (a == b)
    assert concat(x, y, op="Other") != same


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=4), st.lists(st.integers(-3, 3), min_size=1, max_size=4))
def test_deferred_weights_are_made_once_when_read_and_digest_as_computed_ones(a: list[int], b: list[int]) -> None:
    """A fold the search may throw away is made only when read, once; its digest is the one the same data
    made at once would have, so a graph hashes alike either way. A make that breaks its promise is caught."""
    x, y = WeightData(np.array(a, np.float32)), WeightData(np.array(b, np.float32))
    recipe = ("Concat", (("axis", 0),), 0, x, y)
    made = []

    def make() -> np.ndarray:
        made.append(1)
        return np.concatenate([x.array, y.array])

    lazy = WeightData.deferred("float32", (len(a) + len(b),), make, recipe)
    assert not made and lazy.spelled is None and lazy.shape == (len(a) + len(b),)
    assert lazy == WeightData.computed(np.concatenate([x.array, y.array]), recipe)
    assert lazy.array.tolist() == [*a, *b] and not lazy.array.flags.writeable
    assert lazy.array is lazy.array and made == [1]
    broken = WeightData.deferred("float32", (len(a) + len(b) + 1,), make, recipe)
    with pytest.raises(ValueError, match="promised"):
        _ = broken.array
