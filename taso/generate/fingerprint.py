"""Fingerprints: a graph evaluated exactly over Z_p on seeded random inputs, hashed.

Equal graphs give equal fingerprints with certainty (the arithmetic is exact); different ones collide with
negligible probability, because each fingerprint combines two independent evaluations (different inputs and
different random functions for the non-linear ops; see `taso.field`). A graph's fingerprint is the hash of the
*sorted* per-output digests, so it does not depend on the order of the outputs. Inputs are drawn from
(seed, name, shape), so two graphs over the same named inputs see the same values: that is what lets a rule's
two sides be compared.

Each op's finite-field semantics is its `OpDef.field` when it has one, else its numpy rule followed by ``% p``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from taso import ops
from taso.ir import Graph
from taso.ops import P, salt

EVALUATIONS = 2
"""Independent evaluations per fingerprint: a false match needs every one of them to collide."""


def field_apply(op: str, xs: Sequence[np.ndarray], attrs: Mapping, n_outputs: int, key: int) -> tuple[np.ndarray, ...]:
    """One op over Z_p: its `field` rule, or numpy followed by ``% P`` (refused when that gives fractions)."""
    d = ops.get(op)
    if d.field is not None:
        return d.field(xs, attrs, n_outputs, key)
    out = []
    for y in d.compute(xs, attrs, n_outputs):
        y = np.asarray(y)
        if y.dtype.kind == "f":
            if not np.all(np.isfinite(y)) or not np.array_equal(y, np.round(y)):
                raise ops.OpError(f"{op} has no finite-field semantics (its numpy rule gives fractions)")
            y = y.astype(np.int64)
        out.append(y.astype(np.int64) % P)
    return tuple(out)


def field_eval(graph: Graph, inputs: Mapping[str, np.ndarray], key: int) -> dict[str, np.ndarray]:
    """Every output of ``graph`` over Z_p; ``inputs`` gives activations and weights (weights with data default
    to their data, which must be integral). ``key`` picks the random functions that stand in for relu & co."""
    env: dict[str, np.ndarray] = {}
    for name in (*graph.inputs, *graph.weights):
        if name in inputs:
            env[name] = np.asarray(inputs[name]).astype(np.int64) % P
        elif name in graph.data:
            env[name] = _as_field(graph.data[name].array, name)
        else:
            raise ValueError(f"no value for input {name!r}")
    for n in graph.nodes:
        if n.is_opaque:
            raise ops.OpError(f"opaque node {n.op!r} has no finite-field semantics")
        outs = field_apply(n.op, [env[i] for i in n.inputs if i], n.attr, len(n.outputs), key)
        env.update((o, y) for o, y in zip(n.outputs, outs) if o)
    return {o: env[o] for o in graph.outputs}


def _as_field(array: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype.kind == "f" and not np.array_equal(a, np.round(a)):
        raise ValueError(f"weight {name!r} holds fractions: give it a field value in `inputs`")
    return a.astype(np.int64) % P


def input_values(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The random field value of input ``name``: a function of (seed, name, shape) only, so every graph that
    reads ``name`` sees the same value."""
    rng = np.random.default_rng(salt("input", seed, name, tuple(shape)))
    return rng.integers(0, P, size=shape, dtype=np.int64)


def random_field_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Random field values for the graph's activations and its weights that carry no data."""
    out = {}
    for name in (*graph.inputs, *graph.weights):
        if name in graph.data:
            continue
        t = graph.types.get(name)
        if t is None or not t.is_static:
            raise ValueError(f"input {name!r} needs a static shape to be fingerprinted (has {t})")
        out[name] = input_values(name, t.shape, seed)  # type: ignore[arg-type]
    return out


def evaluation_seeds(seed: int) -> list[tuple[int, int]]:
    """(input seed, function key) of each independent evaluation behind a fingerprint."""
    return [(salt("inputs", seed, i), salt("key", seed, i)) for i in range(EVALUATIONS)]


def value_digest(shape: Sequence[int], values: Iterable[np.ndarray]) -> int:
    """A 64-bit digest of one output: its shape and its value in every evaluation."""
    h = hashlib.blake2b(repr(tuple(shape)).encode(), digest_size=8)
    for v in values:
        h.update(np.ascontiguousarray(v, dtype=np.int64).data)
    return int.from_bytes(h.digest(), "little")


def combine(digests: Iterable[int]) -> int:
    """The fingerprint of a graph from its outputs' digests: their sorted multiset, so output order is moot."""
    h = hashlib.blake2b(digest_size=8)
    for d in sorted(digests):
        h.update(d.to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little")


def output_digests(graph: Graph, seed: int = 0) -> list[int]:
    """Each output's digest, by position (outputs of equal digest compute the same tensor)."""
    runs = []
    for input_seed, key in evaluation_seeds(seed):
        runs.append(field_eval(graph, random_field_inputs(graph, input_seed), key))
    return [value_digest(runs[0][o].shape, [r[o] for r in runs]) for o in graph.outputs]


def fingerprint(graph: Graph, seed: int = 0) -> str:
    """The graph's fingerprint as 16 hex digits: equal for graphs that compute the same outputs (in any order)
    from the same named inputs, different otherwise (up to a negligible chance)."""
    return f"{combine(output_digests(graph, seed)):016x}"
