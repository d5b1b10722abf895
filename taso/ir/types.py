"""Values' types and attributes: what a node's inputs, outputs and attributes may be, all hashable."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

import numpy as np

Dim = int | str | None
"""A dimension: a static size, a symbolic name (``"batch"``) or unknown (``None``)."""

AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...]


@dataclass(frozen=True, slots=True)
class TensorType:
    """Element type and shape of a value; ``shape is None`` means even the rank is unknown."""

    dtype: str
    shape: tuple[Dim, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def with_dims(self, dims: Mapping[str, int]) -> TensorType:
        """This type with named symbolic dims replaced by sizes (for costing a dynamic model at one size)."""
        if self.shape is None or not any(isinstance(d, str) and d in dims for d in self.shape):
            return self
        return TensorType(self.dtype, tuple(dims.get(d, d) if isinstance(d, str) else d for d in self.shape))

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[*]"
        dims = ",".join("?" if d is None else str(d) if isinstance(d, int) else quote_name(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


def all_static(types: Mapping[str, TensorType], values: Iterable[str]) -> bool:
    """Whether every one of ``values`` has a type of static shape. A value with no type at all is unknown, not
    static: the output of a custom-domain op that neither onnx nor onnxruntime could type."""
    return all((t := types.get(v)) is not None and t.is_static for v in values)


class Kind(Enum):
    """Where a value comes from, which decides what may be precomputed before inference."""

    ACTIVATION = "activation"  # depends on a graph input: computed at every inference
    WEIGHT = "weight"  # an initializer
    CONSTANT = "constant"  # computed from weights and constants only: foldable ahead of time


def canonical_attr(v: AttrValue | list) -> AttrValue:
    """Lists become tuples and floats are rounded to float32, as ONNX stores them, so values read back from a
    model compare equal to the ones written."""
    if isinstance(v, list | tuple):
        return tuple(canonical_attr(x) for x in v)  # type: ignore[return-value]
    if isinstance(v, float):
        return float(np.float32(v))
    return v


def make_attrs(attrs: Mapping[str, AttrValue]) -> tuple[tuple[str, AttrValue], ...]:
    """The canonical (sorted, hashable) form of an attribute dict."""
    return tuple(sorted((k, canonical_attr(v)) for k, v in attrs.items()))


_SIMPLE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")


def quote_name(name: str) -> str:
    """A value or dim name as the text form writes it: bare when simple, else a JSON string."""
    return name if _SIMPLE.fullmatch(name) else json.dumps(name)
