"""The verifier's fast refutation: both sides of a rule run on the same random inputs before z3 is asked.

Real semantics first (the catalogue's numpy code in float64: relu as relu, pooling as pooling), on small
integers (a readable counterexample, exact for everything but pooling's division) and then on normal floats.
A rule whose sides differ there is false, whatever the axioms say. Fingerprints that replaced relu or pooling
by stand-ins are exactly the candidates this catches.

Then exactly over the prime field of `taso.fingerprint`, with fresh inputs and a fresh key. Only rules made of
`FIELD_EXACT` ops are refuted there: their field semantics is the real one mod p (polynomials with rational
coefficients), so sides that differ mod p differ over the reals. Relu and max pooling are keyed random
functions in the field, so a field mismatch says nothing about them (relu(maxpool(x)) = maxpool(relu(x)) is
true yet differs there).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from taso import ops
from taso.generate import field_eval, random_field_inputs
from taso.ir import Graph
from taso.ops import OPS, OpError, P
from taso.rules import Rule
from taso.verify.spec import Unsupported

TRIALS = ((0, "small integers"), (1, "normal floats"))
RTOL = ATOL = 1e-6
FIELD_SEED = 7919
"""Seed of the field check's inputs and key: not the generator's, so it is a fresh evaluation."""
FIELD_EXACT = ops.having(ops.FIELD_EXACT)
"""Ops whose field semantics is their real one mod p (see the module docstring)."""


def run_graph(g: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``g``'s outputs for ``feeds`` (inline weight data is used where the graph has it). Refuses (OpError) a
    graph whose declared shapes are not what its ops compute: z3 sees the declared ones."""
    values = {**feeds, **{k: d.array for k, d in g.data.items()}}
    for n in g.nodes:
        outs = OPS[n.op].run([values[v] for v in n.inputs if v], n.attr, len(n.outputs))
        for o, y in zip(n.outputs, outs):
            declared = g.types.get(o)
            if declared is not None and declared.is_static and tuple(declared.shape) != np.shape(y):  # type: ignore[arg-type]
                raise OpError(f"{n.op} gives {o!r} shape {np.shape(y)}, the graph says {declared}")
        values.update(zip(n.outputs, outs))
    return [np.asarray(values[o]) for o in g.outputs]


def draw_inputs(rule: Rule, seed: int, integers: bool) -> dict[str, np.ndarray]:
    """One float64 value per input and symbolic weight of either side, shared by both sides."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for g in (rule.src, rule.dst):
        for name in (*g.inputs, *g.weights):
            if name in feeds or name in g.data:
                continue
            t = g.types.get(name)
            if t is None or not t.is_static:
                raise Unsupported(f"input {name!r} has no static shape")
            shape = tuple(int(d) for d in t.shape)  # type: ignore[arg-type, union-attr]
            feeds[name] = rng.integers(-3, 4, shape).astype(np.float64) if integers else rng.standard_normal(shape)
    return feeds


def refute(rule: Rule) -> dict | None:
    """A counterexample to ``rule`` under real semantics or over the field, or None if every trial agreed.
    Random inputs can fall outside an op's domain (a BatchNorm variance below zero): both sides then give NaN
    there, which counts as agreeing, and the rest of the output is still compared."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return _refute(rule)


def _refute(rule: Rule) -> dict | None:
    for seed, kind in TRIALS:
        feeds = draw_inputs(rule, seed, kind == "small integers")
        try:
            src = run_graph(rule.src, feeds)
        except (OpError, ValueError) as e:
            raise Unsupported(f"the source side does not evaluate: {e}") from None
        try:
            dst = run_graph(rule.dst, feeds)
        except (OpError, ValueError) as e:
            raise Unsupported(f"the target side does not evaluate: {e}") from None
        for i, (a, b) in enumerate(zip(src, dst)):
            found = _difference(a, b)
            if found is not None:
                return {
                    "by": f"real semantics, {kind} (seed {seed})",
                    "output": i,
                    **found,
                    "inputs": {k: v.tolist() for k, v in feeds.items()},
                }
    if set(rule.ops) <= FIELD_EXACT:
        return _refute_in_field(rule)
    return None


def _refute_in_field(rule: Rule) -> dict | None:
    feeds = {**random_field_inputs(rule.dst, FIELD_SEED), **random_field_inputs(rule.src, FIELD_SEED)}
    try:
        src_values = field_eval(rule.src, feeds, FIELD_SEED)
        dst_values = field_eval(rule.dst, feeds, FIELD_SEED)
    except (OpError, ValueError):
        return None  # e.g. a weight holding fractions: the real-semantics trials stand alone
    src = [src_values[o] for o in rule.src.outputs]  # by position: a graph may return one value twice
    dst = [dst_values[o] for o in rule.dst.outputs]
    for i, (a, b) in enumerate(zip(src, dst)):
        if a.shape != b.shape or not np.array_equal(a, b):
            found = _difference(a.astype(np.float64), b.astype(np.float64)) or {}
            return {
                "by": f"exact arithmetic mod {P} (seed {FIELD_SEED})",
                "output": i,
                **found,
                "inputs": {k: v.tolist() for k, v in feeds.items()},
            }
    return None


def _difference(a: np.ndarray, b: np.ndarray) -> dict | None:
    if a.shape != b.shape:
        return {"src_shape": list(a.shape), "dst_shape": list(b.shape)}
    close = np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
    if close.all():
        return None
    at = tuple(int(i) for i in np.argwhere(~close)[0])
    return {"at": list(at), "src_value": float(a[at]), "dst_value": float(b[at])}
