"""Fingerprints: exact evaluation over Z_p agrees for graphs equal by construction and tells others apart."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taso import ops
from taso.generate import field_eval, random_field_inputs
from taso.generate.fingerprint import fingerprint
from taso.ir import Graph, Node, TensorType, make_attrs, parse_graph
from taso.ops import field

F = "float32"


def test_the_prime_is_prime_and_sums_cannot_overflow() -> None:
    p = field.P
    assert p < 2**25 and all(p % d for d in range(2, int(p**0.5) + 1))
    assert (p - 1) ** 2 * 8192 < 2**63  # the docstring's claim: 8192 products fit in int64


def test_modinv_inverts() -> None:
    for a in (1, 2, 9, 12345, field.P - 1):
        assert a * field.modinv(a) % field.P == 1
    with pytest.raises(ZeroDivisionError):
        field.modinv(field.P)


# ---- a tiny expression language over named 2x2 inputs, turned into IR graphs -------------------------------

LEAVES = ("a", "b", "c")
Expr = tuple


def exprs() -> st.SearchStrategy[Expr]:
    leaf = st.sampled_from(LEAVES).map(lambda n: ("in", n))
    return st.recursive(
        leaf,
        lambda sub: st.one_of(
            st.tuples(st.sampled_from(["Add", "Mul", "MatMul"]), sub, sub),
            st.tuples(st.sampled_from(["Relu", "Transpose", "Tanh"]), sub),
        ),
        max_leaves=5,
    )


class _Builder:
    def __init__(self, prefix: str = "t") -> None:
        self.nodes: list[Node] = []
        self.types: dict[str, TensorType] = {n: TensorType(F, (2, 2)) for n in LEAVES}
        self.prefix = prefix

    def emit(self, e: Expr) -> str:
        if e[0] == "in":
            return e[1]
        args = [self.emit(x) for x in e[1:]]
        out = f"{self.prefix}{len(self.nodes)}"
        attrs = {"perm": (1, 0)} if e[0] == "Transpose" else {}
        self.nodes.append(Node(e[0], tuple(args), (out,), make_attrs(attrs)))
        self.types[out] = TensorType(F, (2, 2))
        return out

    def graph(self, outputs: list[str], inputs: tuple[str, ...] = LEAVES) -> Graph:
        return Graph(tuple(self.nodes), inputs, tuple(outputs), self.types)


def build(*es: Expr, prefix: str = "t", inputs: tuple[str, ...] = LEAVES) -> Graph:
    b = _Builder(prefix)
    return b.graph([b.emit(e) for e in es], inputs)


def commute(e: Expr) -> Expr:
    """Swap the arguments of every Add and Mul: the same function."""
    if e[0] == "in":
        return e
    args = [commute(x) for x in e[1:]]
    return (e[0], *reversed(args)) if e[0] in ("Add", "Mul") else (e[0], *args)


@settings(max_examples=60, deadline=None)
@given(exprs(), exprs())
def test_equal_by_construction_agree(e1: Expr, e2: Expr) -> None:
    g = build(e1, e2)
    assert fingerprint(build(commute(e1), commute(e2))) == fingerprint(g)  # commuted add and mul
    assert fingerprint(build(e2, e1)) == fingerprint(g)  # outputs permuted
    assert fingerprint(build(e1, e2, prefix="other_")) == fingerprint(g)  # internal values renamed
    assert fingerprint(build(e1, e2, inputs=tuple(reversed(LEAVES)))) == fingerprint(g)  # inputs declared reordered


@settings(max_examples=60, deadline=None)
@given(exprs())
def test_different_functions_differ(e: Expr) -> None:
    g = build(e)
    assert fingerprint(build(("Relu", e))) != fingerprint(g)  # a random function of f is not f
    assert fingerprint(build(("Add", e, ("in", "c")))) != fingerprint(build(("Add", e, ("in", "b"))))
    assert fingerprint(build(e, e)) != fingerprint(g)  # two outputs are not one


@settings(max_examples=30, deadline=None)
@given(exprs(), exprs(), exprs())
def test_matmul_reassociates_and_distributes(x: Expr, y: Expr, z: Expr) -> None:
    left = build(("MatMul", ("MatMul", x, y), z))
    right = build(("MatMul", x, ("MatMul", y, z)))
    assert fingerprint(left) == fingerprint(right)
    dist = build(("Add", ("MatMul", x, y), ("MatMul", x, z)))
    assert fingerprint(dist) == fingerprint(build(("MatMul", x, ("Add", y, z))))
    transposed = build(("Transpose", ("MatMul", x, y)))
    assert fingerprint(transposed) == fingerprint(build(("MatMul", ("Transpose", y), ("Transpose", x))))


def test_relu_is_not_linear_and_not_idempotent() -> None:
    # identities of the real relu that hold for *some* functions only must not survive
    relu_sum = build(("Relu", ("Add", ("in", "a"), ("in", "b"))))
    sum_relu = build(("Add", ("Relu", ("in", "a")), ("Relu", ("in", "b"))))
    assert fingerprint(relu_sum) != fingerprint(sum_relu)
    assert fingerprint(build(("Relu", ("Relu", ("in", "a"))))) != fingerprint(build(("Relu", ("in", "a"))))
    # but relu commutes with transpose, as every element-wise function does
    rt = build(("Relu", ("Transpose", ("in", "a"))))
    assert fingerprint(rt) == fingerprint(build(("Transpose", ("Relu", ("in", "a")))))


def test_renaming_an_input_changes_the_function_unless_symmetric() -> None:
    ab = build(("MatMul", ("in", "a"), ("in", "b")))
    ba = build(("MatMul", ("in", "b"), ("in", "a")))
    assert fingerprint(ab) != fingerprint(ba)
    assert fingerprint(build(("Add", ("in", "a"), ("in", "b")))) == fingerprint(
        build(("Add", ("in", "b"), ("in", "a")))
    )


CONV = "{dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]}"
DEPTHWISE = CONV.replace("group=1", "group=4")


def test_average_pool_is_a_depthwise_conv_with_the_pool_kernel() -> None:
    pool = parse_graph(
        """graph(%x: float32[1,4,5,5]):
  %y = AveragePool(%x) {count_include_pad=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[1,4,5,5]
  return %y"""
    )
    conv = parse_graph(
        f"""graph(%x: float32[1,4,5,5]):
  %k = PoolKernel() {{dtype="float32", shape=[4, 1, 3, 3]}} : float32[4,1,3,3]
  %y = Conv(%x, %k) {DEPTHWISE} : float32[1,4,5,5]
  return %y"""
    )
    assert fingerprint(pool) == fingerprint(conv)
    # not counting the padding divides border windows by fewer: a different function
    uncounted = parse_graph(str(pool).replace("count_include_pad=1", "count_include_pad=0"))
    assert fingerprint(uncounted) != fingerprint(pool)


def test_max_pool_is_a_symmetric_random_function_of_each_window() -> None:
    src = """graph(%x: float32[1,4,5,5], %y: float32[1,4,5,5]):
  %c = Concat(%x, %y) {axis=1} : float32[1,8,5,5]
  %m = MaxPool(%c) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[1,8,5,5]
  return %m"""
    dst = """graph(%x: float32[1,4,5,5], %y: float32[1,4,5,5]):
  %a = MaxPool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[1,4,5,5]
  %b = MaxPool(%y) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} : float32[1,4,5,5]
  %m = Concat(%a, %b) {axis=1} : float32[1,8,5,5]
  return %m"""
    assert fingerprint(parse_graph(src)) == fingerprint(parse_graph(dst))
    g = parse_graph(dst)
    inputs = random_field_inputs(g, 3)
    flipped = {k: v[..., ::-1, :].copy() for k, v in inputs.items()}  # a window's multiset is flip-invariant
    out, out_flipped = field_eval(g, inputs, 5)["m"], field_eval(g, flipped, 5)["m"]
    assert np.array_equal(out[..., ::-1, :], out_flipped)
    assert not np.array_equal(field_eval(g, inputs, 5)["m"], field_eval(g, inputs, 6)["m"])  # key picks the function


def test_conv_identity_and_enlarge() -> None:
    ident = parse_graph(
        f"""graph(%x: float32[2,4,5,5]):
  %k = ConvIdentity() {{dtype="float32", shape=[4, 1, 3, 3]}} : float32[4,1,3,3]
  %y = Conv(%x, %k) {DEPTHWISE} : float32[2,4,5,5]
  return %y"""
    )
    x_only = Graph((), ("x",), ("x",), {"x": TensorType(F, (2, 4, 5, 5))})
    assert fingerprint(ident) == fingerprint(x_only)
    small = parse_graph(
        """graph(%x: float32[2,4,5,5], %w: float32[4,4,1,1] weight):
  %y = Conv(%x, %w) {dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1]} : float32[2,4,5,5]
  return %y"""
    )
    big = parse_graph(
        f"""graph(%x: float32[2,4,5,5], %w: float32[4,4,1,1] weight):
  %e = Enlarge(%w) {{kernel_shape=[3, 3]}} : float32[4,4,3,3]
  %y = Conv(%x, %e) {CONV} : float32[2,4,5,5]
  return %y"""
    )
    assert fingerprint(small) == fingerprint(big)


def test_field_eval_matches_numpy_on_integer_linear_graphs() -> None:
    g = build(("Add", ("MatMul", ("in", "a"), ("in", "b")), ("Transpose", ("in", "c"))))
    rng = np.random.default_rng(0)
    ins = {n: rng.integers(0, 50, (2, 2)) for n in LEAVES}
    want = ins["a"] @ ins["b"] + ins["c"].T
    assert np.array_equal(field_eval(g, ins, 0)[g.outputs[0]], want % field.P)


def test_ops_without_field_semantics_are_refused() -> None:
    g = parse_graph(
        """graph(%x: float32[2,4], %s: float32[4] weight, %b: float32[4] weight, %m: float32[4] weight, %v: float32[4] weight):
  %y = BatchNormalization(%x, %s, %b, %m, %v) {epsilon=0.001} : float32[2,4]
  return %y"""
    )
    with pytest.raises(ops.OpError, match="no finite-field semantics"):
        fingerprint(g)


def test_nonlinear_ops_have_field_rules() -> None:
    for name in ("Relu", "Sigmoid", "Tanh", "MaxPool", "AveragePool", "PoolKernel"):
        assert ops.get(name).field is not None, name
    assert ops.get("MatMul").field is None  # numpy then % p is exact for it


def test_inputs_depend_on_name_shape_and_seed_only() -> None:
    g1 = build(("Add", ("in", "a"), ("in", "b")))
    g2 = replace(g1, inputs=("b", "a", "c"))
    assert all(np.array_equal(random_field_inputs(g1, 1)[k], random_field_inputs(g2, 1)[k]) for k in LEAVES)
    assert not np.array_equal(random_field_inputs(g1, 1)["a"], random_field_inputs(g1, 2)["a"])
