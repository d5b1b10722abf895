"""Weight data: read-only arrays hashed once, by content or by how they were computed."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from functools import cached_property

import numpy as np


class WeightData:
    """A read-only array with a digest computed once, so hashing a graph never rehashes weights. Equal digests
    mean equal data: the digest is of the content, or, for data computed from other weights, of how it was
    computed (`computed`). Data that only rearranges other data can be left to compute when first read
    (`deferred`): a search costs thousands of candidates by their shapes and keeps a few."""

    __slots__ = ("_array", "_make", "dtype", "shape", "__dict__")

    def __init__(self, array: np.ndarray, owned: bool = False) -> None:
        """``owned``: the caller made ``array`` for this and keeps no other reference, so it is frozen in place
        rather than copied (a search folds megabytes of weights per candidate)."""
        array = _read_only(array, owned)
        self._array: np.ndarray | None = array
        self._make: Callable[[], np.ndarray] | None = None
        self.dtype, self.shape = array.dtype, array.shape

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            assert self._make is not None
            made = _read_only(self._make(), owned=True)
            if (made.dtype, made.shape) != (self.dtype, self.shape):
                raise ValueError(f"deferred data made {made.dtype}{made.shape}, promised {self.dtype}{self.shape}")
            self._array, self._make = made, None
        return self._array

    @classmethod
    def computed(cls, array: np.ndarray, recipe: tuple) -> WeightData:
        """Data a deterministic computation made from other data (``recipe``: the computation and its inputs'
        `WeightData`), owned by the caller. Its digest is the recipe's: a search folds thousands of weights
        (NasRNN: 980 concatenated gate matrices, 2.9 GB to hash by content) and equal recipes give equal data."""
        data = cls(array, owned=True)
        data.__dict__["digest"] = _recipe_digest(data.dtype, data.shape, recipe)
        return data

    @classmethod
    def deferred(cls, dtype: str, shape: tuple[int, ...], make: Callable[[], np.ndarray], recipe: tuple) -> WeightData:
        """`computed` data of a known type whose array ``make`` computes when it is first read."""
        data = cls.__new__(cls)
        data._array, data._make = None, make
        data.dtype, data.shape = np.dtype(dtype), tuple(shape)
        data.__dict__["digest"] = _recipe_digest(data.dtype, data.shape, recipe)
        return data

    @cached_property
    def spelled(self) -> str | None:
        """The values where they say what a graph computes rather than hold learned numbers: small integer
        tensors (shapes, axes, split sizes). Unit costs (`taso.cost.unit_key`) and `Graph.form` include them;
        kept once read, as a search asks for it of every weight of every unit of every candidate."""
        if math.prod(self.shape) > 16 or self.dtype.kind not in "iu":
            return None
        return str(self.array.tolist())

    @cached_property
    def digest(self) -> str:
        h = hashlib.sha256(f"{self.array.dtype}{self.array.shape}".encode())
        h.update(np.ascontiguousarray(self.array).data)
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WeightData) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)


def _read_only(array: np.ndarray, owned: bool) -> np.ndarray:
    """``array`` frozen: in place when ``owned`` (nothing else holds it), else a frozen copy."""
    array = np.asarray(array)
    if array.flags.writeable:
        array = array if owned else array.copy()
        array.flags.writeable = False
    return array


def _recipe_digest(dtype: np.dtype, shape: tuple[int, ...], recipe: tuple) -> str:
    parts = [p.digest if isinstance(p, WeightData) else p for p in recipe]
    return hashlib.sha256(repr(("computed", str(dtype), shape, parts)).encode()).hexdigest()
