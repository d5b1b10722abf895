"""Each trait an op claims is true of its semantics (`taso.ops.traits`): field-exact ops compute over Z_p what
they compute over the reals, mod p; batch-polymorphic ops lifted to a stack compute each matrix of it."""

from __future__ import annotations

import numpy as np
import pytest

from taso import ops
from taso.generate import field_apply
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs
from taso.ops import P
from taso.ops.field import lift, residues
from taso.rules import Rule, lifted
from taso.verify import precheck

from .cases import ALL_CASES, CASES

DENOMINATOR = 2520
"""Every fraction a field-exact op makes on these cases (window counts up to 9) is a multiple of 1/2520."""


def _integer_inputs(shapes: list, consts: dict, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [consts[i] if i in consts else rng.integers(-3, 4, s).astype(np.float64) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_an_op_is_field_exact_exactly_when_its_field_semantics_is_its_real_one_mod_p(op: str) -> None:
    """The pre-check refutes a rule of field-exact ops over Z_p, so the trait must hold wherever it is claimed;
    and an op whose field semantics is exact must claim it, or the pre-check loses refutations."""
    agreed, checked = True, 0
    for shapes, attrs, consts, n in ALL_CASES[op]:
        for seed in range(3):
            xs = _integer_inputs(shapes, consts, seed)
            with np.errstate(invalid="ignore", divide="ignore"):
                real = ops.get(op).run(xs, attrs, n)
            try:
                field = [
                    residues(y)
                    for y in field_apply(op, [x if x.dtype.kind == "i" else lift(x) for x in xs], attrs, n, 5)
                ]
            except ops.OpError:
                continue  # no field semantics here (fractions, or division by computed values): nothing to refute
            checked += 1
            for r, f in zip(real, field):
                with np.errstate(invalid="ignore"):  # a division by zero's inf is no field element
                    scaled = np.round(np.asarray(r, np.float64) * DENOMINATOR).astype(np.int64) % P
                agreed &= bool(np.array_equal(scaled, f.astype(np.int64) * DENOMINATOR % P))
    assert (checked > 0 and agreed) == (op in precheck.FIELD_EXACT), (op, checked, agreed)


@pytest.mark.parametrize("op", sorted(ops.having(ops.BATCH_POLYMORPHIC)))
def test_a_batch_polymorphic_op_lifted_computes_each_matrix_of_the_stack(op: str) -> None:
    """`taso.rules.lifted` lifts a rule over these ops to stacks of matrices: the lifted op on a stack must equal
    the op on each matrix (activations stacked, weights broadcast), or a lifted rule rewrites wrongly."""
    lifted_any = False
    for shapes, attrs, consts, n in CASES[op]:
        for activations in range(1, len(shapes) - len(consts) + 1):  # the first k inputs stacked, the rest weights
            if any(len(s) != 2 for s in shapes[:activations]):
                continue
            rng = np.random.default_rng(activations)
            g, feeds = _lifting_graph(op, shapes, attrs, consts, n, activations, rng)
            up = lifted(Rule(g, g), 1)
            if up is None:
                continue
            lifted_any = True
            size = up.src.types[g.inputs[0]].shape[0]
            stacks = {k: rng.standard_normal((size, *v.shape)) for k, v in feeds.items()}
            whole = precheck.run_graph(up.src, stacks)
            for i in range(size):
                each = precheck.run_graph(g, {k: v[i] for k, v in stacks.items()})
                for w, e in zip(whole, each):
                    np.testing.assert_allclose(w[i], e, rtol=1e-9, err_msg=f"{op} {attrs}")
    assert lifted_any, f"{op}: no 2-D case lifts (add one to CASES)"


def _lifting_graph(
    op: str, shapes: list, attrs: dict, consts: dict, n: int, activations: int, rng: np.random.Generator
) -> tuple[Graph, dict]:
    names = [f"in{i}" for i in range(len(shapes))]
    types, data, feeds = {}, {}, {}
    for i, (name, s) in enumerate(zip(names, shapes)):
        if i in consts:
            data[name] = WeightData(consts[i])
        elif i < activations:
            feeds[name] = rng.standard_normal(s)
        else:
            data[name] = WeightData(rng.standard_normal(s).astype(np.float32))
        types[name] = TensorType(str(consts[i].dtype) if i in consts else "float32", tuple(s))
    outs = ops.infer(op, [types[v] for v in names], attrs, [data[v].array if v in data else None for v in names], n)
    out_names = tuple(f"out{i}" for i in range(len(outs)))
    types.update(zip(out_names, outs))
    node = Node(op, tuple(names), out_names, make_attrs(attrs))
    return Graph((node,), tuple(feeds), out_names, types, tuple(data), data), feeds
