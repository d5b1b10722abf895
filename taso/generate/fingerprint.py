"""Fingerprints: a graph evaluated exactly over Z_p x Z_q on seeded random inputs, its Z_p component hashed.

Equal graphs give equal fingerprints with certainty (the arithmetic is exact); different ones collide with
negligible probability, because each fingerprint combines two independent evaluations (different inputs and
different random functions for the non-linear ops; see `taso.ops.field`, whose docstring tables which identities
each op's rule lets a fingerprint see). A graph's fingerprint is the hash of the
*sorted* per-output digests, so it does not depend on the order of the outputs. Inputs are drawn from
(seed, name, shape), so two graphs over the same named inputs see the same values: that is what lets a rule's
two sides be compared.

Each op's finite-field semantics is its `OpDef.field` when it has one, else its numpy rule followed by ``% m``,
run once per component: a value is packed (`taso.ops.field.pack`), and `field_apply` unpacks it for the rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from taso import ops
from taso.ir import Graph
from taso.ops import field as ff
from taso.ops import salt

EVALUATIONS = 2
"""Independent evaluations per fingerprint: a false match needs every one of them to collide."""


def needs_exponents(op_names: Iterable[str]) -> bool:
    """Whether an evaluation over these ops needs the Z_q components (an `ops.EXPONENTIAL` op reads them);
    without one, values are plain Z_p residues and each op runs once, as fast as before there was a Z_q."""
    return any(ops.EXPONENTIAL in ops.traits_of(op) for op in op_names)


def field_apply(
    op: str, xs: Sequence[np.ndarray], attrs: Mapping, n_outputs: int, key: int, wide: bool = True
) -> tuple[np.ndarray, ...]:
    """One op over Z_p x Z_q on packed values: its rule run once per component (the Z_q call first, then the
    Z_p call, which may read the inputs' Z_q components: Exp does), outputs packed again. An input that sizes
    the result (`OpDef.static_inputs`: a Split's sizes, a Reshape's shape) is no field value: it comes as its
    plain integers and goes to both as it is. Not ``wide``: ``xs`` are Z_p residues and so are the outputs."""
    if not wide:
        return _component(op, xs, attrs, n_outputs, ff.Ring(key, ff.P))
    sizes = ops.get(op).static_inputs
    low = [x if i in sizes else ff.residues(x) for i, x in enumerate(xs)]
    high = [x if i in sizes else ff.exponents(x) for i, x in enumerate(xs)]
    q_out = _component(op, high, attrs, n_outputs, ff.Ring(key, ff.Q))
    p_out = _component(op, low, attrs, n_outputs, ff.Ring(key, ff.P, tuple(high)))
    return tuple(ff.pack(a, b) for a, b in zip(p_out, q_out))


def _component(op: str, xs: Sequence[np.ndarray], attrs: Mapping, n_outputs: int, ring: ff.Ring) -> tuple:
    """One component of ``op``: its `field` rule, or numpy followed by ``% m`` (refused when that gives
    fractions). Z_q outputs are reduced mod q: a rule written for Z_p alone (``% ff.P``) stays a fixed function
    there, not an exact one (so identities through it into an Exp are lost, never invented)."""
    d = ops.get(op)
    if d.field is not None:
        out = d.field(xs, attrs, n_outputs, ring)
        return out if ring.m == ff.P else tuple(np.asarray(y, dtype=np.int64) % ring.m for y in out)
    out = []
    for y in d.compute(xs, attrs, n_outputs):
        y = np.asarray(y)
        if y.dtype.kind == "f":
            if not np.all(np.isfinite(y)) or not np.array_equal(y, np.round(y)):
                raise ops.OpError(f"{op} has no finite-field semantics (its numpy rule gives fractions)")
            y = y.astype(np.int64)
        out.append(y.astype(np.int64) % ring.m)
    return tuple(out)


def field_eval(graph: Graph, inputs: Mapping[str, np.ndarray], key: int) -> dict[str, np.ndarray]:
    """Every output of ``graph`` over Z_p (its residues; the Z_q components stay inside). ``inputs`` gives
    activations and weights as packed values (`input_values`; `taso.ops.field.lift` packs plain numbers);
    weights with data default to their data, mapped exactly (`taso.ops.field.constant`). ``key`` picks the
    random functions that stand in for relu & co."""
    env: dict[str, np.ndarray] = {}
    both = needs_exponents(n.op for n in graph.nodes)
    for name in (*graph.inputs, *graph.weights):
        if name in inputs:
            env[name] = np.asarray(inputs[name]).astype(np.int64)
        elif name in graph.data:
            env[name] = _as_field(graph.data[name].array, name)
        else:
            raise ValueError(f"no value for input {name!r}")
        if not both:
            env[name] = ff.residues(env[name])
    for n in graph.nodes:
        if n.is_opaque:
            raise ops.OpError(f"opaque node {n.op!r} has no finite-field semantics")
        sizes = ops.get(n.op).static_inputs  # plain integers, not field values (`field_apply`)
        args = [_size(graph, i) if k in sizes else env[i] for k, i in enumerate(n.inputs) if i]
        outs = field_apply(n.op, args, n.attr, len(n.outputs), key, both)
        env.update((o, y) for o, y in zip(n.outputs, outs) if o)
    return {o: ff.residues(env[o]) for o in graph.outputs}


def _size(graph: Graph, name: str) -> np.ndarray:
    """An input that sizes a result, as its integers: it must be data (a generated graph's sizes are)."""
    if name not in graph.data:
        raise ops.OpError(f"{name!r} sizes a result but holds no data: it has no field value")
    return np.asarray(graph.data[name].array).astype(np.int64)


def _as_field(array: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise ValueError(f"weight {name!r} holds a nan or an infinity: give it a field value in `inputs`")
    return ff.lift(a)


def input_values(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The random field value of input ``name``, packed (independent components in Z_p and Z_q): a function of
    (seed, name, shape) only, so every graph that reads ``name`` sees the same value."""
    rng = np.random.default_rng(salt("input", seed, name, tuple(shape)))
    low = rng.integers(0, ff.P, size=shape, dtype=np.int64)
    return ff.pack(low, rng.integers(0, ff.Q, size=shape, dtype=np.int64))


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
    """A 64-bit digest of one output: its shape and its Z_p residues in every evaluation (a Z_q component may be
    a keyed stand-in, as after an Exp, so equal functions need not agree there)."""
    h = hashlib.blake2b(repr(tuple(shape)).encode(), digest_size=8)
    for v in values:
        h.update(np.ascontiguousarray(ff.residues(v)).data)
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
