"""Every catalogue op against onnxruntime: numpy semantics, shape rule and ONNX mapping must all agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taso import cost, generate, ops
from taso import onnx as onnx_io
from taso.execute import Runner
from taso.generate import field_apply
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs
from taso.ops import P
from taso.rules import SPECS_DIR, Rule, lifted
from taso.verify import load_specs, precheck

# op -> (input shapes, attrs, constant inputs by position, number of outputs)
CASES: dict[str, list[tuple]] = {
    "Add": [([(2, 3, 4), (3, 4)], {}, {}, 1), ([(2, 4), ()], {}, {}, 1)],
    "Mul": [([(2, 3), (2, 3)], {}, {}, 1), ([(2, 1, 4), (3, 1)], {}, {}, 1)],
    "Relu": [([(2, 5)], {}, {}, 1)],
    "Sigmoid": [([(3, 4)], {}, {}, 1)],
    "Tanh": [([(3, 4)], {}, {}, 1)],
    "MatMul": [([(2, 4), (4, 3)], {}, {}, 1), ([(2, 3, 5, 4), (3, 4, 6)], {}, {}, 1)],
    "Gemm": [
        ([(3, 4), (5, 4), (5,)], {"alpha": 0.5, "beta": 2.0, "transA": 0, "transB": 1}, {}, 1),
        ([(4, 3), (4, 5)], {"alpha": 1.0, "beta": 1.0, "transA": 1, "transB": 0}, {}, 1),
    ],
    "Conv": [
        (
            [(2, 4, 7, 6), (6, 2, 3, 1), (6,)],
            {"kernel_shape": (3, 1), "strides": (2, 1), "pads": (1, 0, 0, 0), "dilations": (1, 1), "group": 2},
            {},
            1,
        )
    ],
    "AveragePool": [
        (
            [(1, 3, 6, 6)],
            {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "count_include_pad": 0},
            {},
            1,
        )
    ],
    "MaxPool": [([(1, 3, 6, 5)], {"kernel_shape": (3, 2), "strides": (2, 1), "pads": (1, 0, 1, 1)}, {}, 1)],
    "Concat": [([(2, 3), (2, 5), (2, 1)], {"axis": 1}, {}, 1), ([(2, 3), (4, 3)], {"axis": -2}, {}, 1)],
    "Split": [([(2, 6), (2,)], {"axis": 1}, {1: np.array([2, 4], np.int64)}, 2), ([(6, 3)], {"axis": 0}, {}, 3)],
    "Transpose": [([(2, 3, 4)], {"perm": (2, 0, 1)}, {}, 1), ([(3, 4)], {"perm": (1, 0)}, {}, 1)],
    "Reshape": [([(2, 3, 4), (3,)], {"allowzero": 0}, {1: np.array([0, -1, 2], np.int64)}, 1)],
    "BatchNormalization": [([(2, 3, 4, 4), (3,), (3,), (3,), (3,)], {"epsilon": 1e-3}, {}, 1)],
    "LayerNormalization": [
        ([(2, 3, 8), (8,), (8,)], {"axis": -1, "epsilon": 1e-5}, {}, 1),
        ([(2, 3, 4), (3, 4)], {"axis": 1, "epsilon": 1e-5}, {}, 1),
    ],
    "Softmax": [([(2, 7)], {"axis": -1}, {}, 1), ([(2, 3, 4)], {"axis": 1}, {}, 1)],
    "Enlarge": [([(4, 2, 1, 3)], {"kernel_shape": (3, 3)}, {}, 1)],
    "Ones": [([], {"shape": (2, 3), "dtype": "float32"}, {}, 1)],
    "Eye": [([], {"shape": (4, 4), "dtype": "float32"}, {}, 1)],
    "ConvIdentity": [([], {"shape": (3, 1, 3, 3), "dtype": "float32"}, {}, 1)],
    "PoolKernel": [([], {"shape": (3, 1, 3, 3), "dtype": "float32"}, {}, 1)],
}


FOLDS = frozenset({"BnKernel", "BnBias", "BlockDiagonal", "ChannelVector"})
"""Weight-only ops with no ONNX form: checked against what they fold (BatchNormalization, a grouped Conv, a
per-channel Mul and Add), as onnxruntime runs it."""


def test_every_op_is_fully_described_and_tested() -> None:
    assert set(CASES) | FOLDS == set(ops.OPS), "add a case here for every catalogue op"
    assert not any(ops.get(op).exportable for op in FOLDS)
    for name, d in ops.OPS.items():
        assert d.doc and d.infer and d.compute, name
        assert d.arity[0] <= d.arity[1]


def _single_op_graph(op: str, shapes: list, attrs: dict, consts: dict, n_out: int, rng) -> tuple[Graph, dict]:
    names = [f"in{i}" for i in range(len(shapes))]
    types = {n: TensorType("float32", tuple(s)) for n, s in zip(names, shapes)}
    data, feeds = {}, {}
    for i, (n, s) in enumerate(zip(names, shapes)):
        if i in consts:
            types[n] = TensorType(str(consts[i].dtype), consts[i].shape)
            data[n] = WeightData(consts[i])
        elif op == "BatchNormalization" and i == 4:
            data[n] = WeightData(rng.uniform(0.5, 2.0, s).astype(np.float32))
        elif i > 0 or op in ("Enlarge",):
            data[n] = WeightData(rng.standard_normal(s).astype(np.float32))
        else:
            feeds[n] = rng.standard_normal(s).astype(np.float32)
    consts_in = [data[n].array if n in data else None for n in names]
    outs = ops.infer(op, [types[n] for n in names], attrs, consts_in, n_out)
    out_names = [f"out{i}" for i in range(len(outs))]
    types.update(zip(out_names, outs))
    inputs = tuple(n for n in names if n not in data)
    weights = tuple(n for n in names if n in data)
    if not inputs:  # ORT needs at least one input: add x -> Relu -> extra output
        types["x"] = TensorType("float32", (1,))
        types["x_out"] = TensorType("float32", (1,))
        feeds["x"] = rng.standard_normal((1,)).astype(np.float32)
        extra = (Node("Relu", ("x",), ("x_out",)),)
        inputs, out_names = ("x",), [*out_names, "x_out"]
    else:
        extra = ()
    node = Node(op, tuple(names), tuple(out_names[: len(outs)]), make_attrs(attrs), name="node")
    attrs = node.attr
    g = Graph((node, *extra), inputs, tuple(out_names), types, weights, data)
    return g, feeds


def _agree(op: str, shapes: list, attrs: dict, consts: dict, n_out: int, tmp: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    g, feeds = _single_op_graph(op, shapes, attrs, consts, n_out, rng)
    path = onnx_io.save_model(g, tmp / f"{op}.onnx")
    got = Runner(path)(feeds)
    values = {**feeds, **{k: v.array for k, v in g.data.items()}}
    node = g.nodes[0]
    want = ops.get(op).run([values[i] for i in node.inputs], node.attr, len(node.outputs))
    for name, w in zip(node.outputs, want):
        assert got[name].shape == w.shape == g.types[name].shape, (op, name)
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=op)
    reimported = onnx_io.load_model(path)
    onnx_op = [n for n in reimported.nodes if n.name == "node"][0]
    if ops.get(op).onnx:  # ONNX ops import back to the same IR node; ONNX shape inference agrees with ours
        assert not onnx_op.is_opaque and onnx_op.attrs == node.attrs
        for name in node.outputs:
            assert reimported.types[name] == g.types[name]


@pytest.mark.parametrize(("op", "case"), [(op, c) for op, cs in CASES.items() for c in cs], ids=str)
def test_op_agrees_with_onnxruntime(op: str, case: tuple, tmp_path: Path) -> None:
    _agree(op, *case, tmp_path)


_conv = st.fixed_dictionaries(
    {
        "kh": st.sampled_from([1, 3]),
        "kw": st.sampled_from([1, 3]),
        "sh": st.integers(1, 2),
        "sw": st.integers(1, 2),
        "pads": st.tuples(*[st.integers(0, 1)] * 4),
        "dil": st.integers(1, 2),
        "group": st.sampled_from([1, 2]),
        "bias": st.booleans(),
        "h": st.integers(5, 7),
        "w": st.integers(5, 7),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=_conv)
def test_conv_semantics_match_onnxruntime(c: dict, tmp_path: Path) -> None:
    shapes = [(2, 4, c["h"], c["w"]), (6, 4 // c["group"], c["kh"], c["kw"])] + ([(6,)] if c["bias"] else [])
    attrs = {
        "kernel_shape": (c["kh"], c["kw"]),
        "strides": (c["sh"], c["sw"]),
        "pads": c["pads"],
        "dilations": (c["dil"], c["dil"]),
        "group": c["group"],
    }
    _agree("Conv", shapes, attrs, {}, 1, tmp_path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    k=st.integers(1, 3),
    s=st.integers(1, 2),
    pads=st.tuples(*[st.integers(0, 1)] * 4),
    avg=st.booleans(),
    include=st.integers(0, 1),
)
def test_pool_semantics_match_onnxruntime(k: int, s: int, pads: tuple, avg: bool, include: int, tmp_path: Path) -> None:
    if max(pads) >= k:
        return  # ONNX requires pads smaller than the kernel
    attrs = {"kernel_shape": (k, k), "strides": (s, s), "pads": pads}
    if avg:
        attrs["count_include_pad"] = include
    _agree("AveragePool" if avg else "MaxPool", [(1, 2, 6, 5)], attrs, {}, 1, tmp_path)


def test_auto_pad_is_resolved_to_explicit_pads(tmp_path: Path) -> None:
    d = ops.get("Conv")
    x, w = TensorType("float32", (1, 2, 7, 7)), TensorType("float32", (3, 2, 3, 3))
    attrs = d.from_onnx({"auto_pad": "SAME_UPPER", "strides": (2, 2)}, [x, w], 2, 17)
    assert attrs["pads"] == (1, 1, 1, 1) and "auto_pad" not in attrs
    dyn = TensorType("float32", ("n", 2, "h", "w"))
    assert "dynamic" in d.from_onnx({"auto_pad": "SAME_LOWER"}, [dyn, w], 2, 17)


def test_shape_rules_refuse_bad_inputs() -> None:
    f32 = lambda *s: TensorType("float32", s)  # noqa: E731
    with pytest.raises(ops.OpError, match="inner dimensions"):
        ops.infer("MatMul", [f32(2, 3), f32(4, 5)], {})
    with pytest.raises(ops.OpError, match="channels"):
        ops.infer(
            "Conv",
            [f32(1, 3, 5, 5), f32(4, 2, 3, 3)],
            ops.get("Conv").from_onnx({}, [f32(1, 3, 5, 5), f32(4, 2, 3, 3)], 2, 17),
        )
    with pytest.raises(ops.OpError, match="add up"):
        ops.infer("Split", [f32(2, 6), TensorType("int64", (2,))], {"axis": 1}, [None, np.array([2, 3])], 2)
    with pytest.raises(ops.OpError, match="do not split into 4 groups"):
        ops.infer("BlockDiagonal", [f32(6, 2, 3, 3)], {"group": 4})
    with pytest.raises(ops.OpError, match="of at least 2"):  # plain already: a rewrite would change nothing
        ops.infer("BlockDiagonal", [f32(6, 2, 3, 3)], {"group": 1})
    with pytest.raises(ops.OpError, match="per-channel tensor"):
        ops.infer("ChannelVector", [f32(4, 1, 3)], {})
    with pytest.raises(ops.OpError, match="unknown operator"):
        ops.get("Frobnicate")


@settings(max_examples=10, deadline=None)
@given(
    group=st.sampled_from([1, 2]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 1),
    bias=st.booleans(),
    eps=st.sampled_from([1e-5, 1e-3]),
)
def test_folded_batchnorm_weights_compute_what_onnxruntime_computes_unfolded(
    group: int, stride: int, pad: int, bias: bool, eps: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Conv(x, BnKernel(w, scale, var), BnBias(scale, bias, mean, var[, b])) against Conv then
    BatchNormalization in onnxruntime, for grouped, strided, padded, biased convs."""
    rng = np.random.default_rng(group * 100 + stride * 10 + pad + bias)
    c, m = 4, 6
    x = rng.standard_normal((1, c, 7, 7)).astype(np.float32)
    w = rng.standard_normal((m, c // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    scale, shift, mean = (rng.standard_normal(m).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.1, 2.0, m).astype(np.float32)
    attrs = {"kernel_shape": (3, 3), "strides": (stride,) * 2, "pads": (pad,) * 4, "dilations": (1, 1), "group": group}
    conv_in = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = (
        Node("Conv", tuple(conv_in), ("y",), make_attrs(attrs)),
        Node("BatchNormalization", ("y", "s", "t", "mu", "v"), ("z",), make_attrs({"epsilon": eps})),
    )
    params = {"w": w, "b": b, "s": scale, "t": shift, "mu": mean, "v": var}
    names = tuple(k for k in params if k != "b" or bias)
    types = {k: TensorType("float32", params[k].shape) for k in names}
    types |= {"x": TensorType("float32", x.shape)}
    out = ops.infer("Conv", [types[v] for v in conv_in], attrs)[0]
    types |= {"y": out, "z": out}
    g = Graph(nodes, ("x",), ("z",), types, names, {k: WeightData(params[k]) for k in names})
    path = onnx_io.save_model(g, tmp_path_factory.mktemp("bn") / "bn.onnx")
    want = Runner(path)({"x": x})["z"]
    kernel = ops.get("BnKernel").run([w, scale, var], {"epsilon": eps})[0]
    folded_bias = ops.get("BnBias").run([scale, shift, mean, var, *([b] if bias else [])], {"epsilon": eps})[0]
    got = ops.get("Conv").run([x, kernel, folded_bias], attrs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _run_graph(nodes: tuple, x: np.ndarray, params: dict, out: str, tmp: Path) -> np.ndarray:
    """``nodes`` over input ``x`` and weights ``params`` run by onnxruntime; the output ``out``."""
    types = {k: TensorType(str(v.dtype), v.shape) for k, v in params.items()} | {"x": TensorType("float32", x.shape)}
    for n in nodes:
        types |= dict(zip(n.outputs, ops.infer(n.op, [types[v] for v in n.inputs], n.attr)))
    g = Graph(nodes, ("x",), (out,), types, tuple(params), {k: WeightData(v) for k, v in params.items()})
    return Runner(onnx_io.save_model(g, tmp / "g.onnx"))({"x": x})[out]


@settings(max_examples=10, deadline=None)
@given(
    group=st.sampled_from([2, 3, 6]),
    per=st.integers(1, 2),
    kernel=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    bias=st.booleans(),
)
def test_a_block_diagonal_kernel_makes_a_plain_conv_compute_the_grouped_one(
    group: int, per: int, kernel: int, stride: int, bias: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Conv(x, BlockDiagonal(w){group}) with group 1, by the catalogue, against the grouped Conv in onnxruntime."""
    rng = np.random.default_rng(group * 100 + per * 10 + kernel + stride)
    x = rng.standard_normal((1, per * group, 6, 5)).astype(np.float32)
    w = rng.standard_normal((2 * group, per, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(2 * group).astype(np.float32)
    pad = kernel // 2
    attrs = {"kernel_shape": (kernel,) * 2, "strides": (stride,) * 2, "pads": (pad,) * 4, "dilations": (1, 1)}
    params = {"w": w, "b": b} if bias else {"w": w}
    conv = Node("Conv", ("x", *params), ("y",), make_attrs({**attrs, "group": group}))
    want = _run_graph((conv,), x, params, "y", tmp_path_factory.mktemp("dense"))
    dense = ops.get("BlockDiagonal").run([w], {"group": group})[0]
    assert dense.shape == (2 * group, per * group, kernel, kernel)
    got = ops.get("Conv").run([x, dense, *([b] if bias else [])], {**attrs, "group": 1})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=8, deadline=None)
@given(mul=st.booleans(), add=st.booleans(), eps=st.sampled_from([1e-5, 1e-3]))
def test_a_per_channel_mul_and_add_fold_into_the_batchnorm_before_them(
    mul: bool, add: bool, eps: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """BatchNormalization then Mul and/or Add by (C, 1, 1) weights in onnxruntime, against one BatchNormalization
    whose scale and bias the catalogue's ChannelVector, Mul and Add computed (what the always rules fold)."""
    rng = np.random.default_rng(mul * 2 + add)
    c = 5
    x = rng.standard_normal((2, c, 4, 3)).astype(np.float32)
    scale, shift, mean, k, t = (rng.standard_normal(c).astype(np.float32) for _ in range(5))
    var = rng.uniform(0.1, 2.0, c).astype(np.float32)
    params = {"s": scale, "t": shift, "mu": mean, "v": var, "k": k.reshape(c, 1, 1), "a": t.reshape(c, 1, 1)}
    nodes = [Node("BatchNormalization", ("x", "s", "t", "mu", "v"), ("z0",), make_attrs({"epsilon": eps}))]
    if mul:
        nodes.append(Node("Mul", (nodes[-1].outputs[0], "k"), ("z1",)))
    if add:
        nodes.append(Node("Add", ("a", nodes[-1].outputs[0]), ("z2",)))
    used = {v for n in nodes for v in n.inputs}
    want = _run_graph(
        tuple(nodes),
        x,
        {n: v for n, v in params.items() if n in used},
        nodes[-1].outputs[0],
        tmp_path_factory.mktemp("affine"),
    )
    vector = ops.get("ChannelVector")
    if mul:
        kv = vector.run([params["k"]], {})[0]
        scale, shift = (ops.get("Mul").run([p, kv], {})[0] for p in (scale, shift))
    if add:
        shift = ops.get("Add").run([shift, vector.run([params["a"]], {})[0]], {})[0]
    got = ops.get("BatchNormalization").run([x, scale, shift, mean, var], {"epsilon": eps})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- traits: each stage's view of an op, derived from its entry, and each trait true of the op's semantics ---

FOLD_CASES: dict[str, list[tuple]] = {
    "BnKernel": [([(4, 2, 3, 3), (4,), (4,)], {"epsilon": 1e-5}, {}, 1)],
    "BnBias": [([(4,), (4,), (4,), (4,)], {"epsilon": 1e-5}, {}, 1)],
    "BlockDiagonal": [([(4, 2, 1, 3)], {"group": 2}, {}, 1)],
    "ChannelVector": [([(3, 1, 1)], {}, {}, 1)],
}
ALL_CASES = {**CASES, **FOLD_CASES}
DENOMINATOR = 2520
"""Every fraction a field-exact op makes on these cases (window counts up to 9) is a multiple of 1/2520."""


def _integer_inputs(shapes: list, consts: dict, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [consts[i] if i in consts else rng.integers(-3, 4, s).astype(np.float64) for i, s in enumerate(shapes)]


def test_every_op_has_a_spec_or_a_reasoned_opt_out_and_every_stage_sees_it() -> None:
    """The catalogue entry is the one place an op is described: it is modelled by a spec under specs/ or says
    why not (never both), and the generator, the pre-check, the lifting and the cost model read its traits."""
    specs = load_specs(SPECS_DIR)
    assert set(ALL_CASES) == set(ops.OPS)
    for name, op in ops.OPS.items():
        specified = name in specs.by_op or name in specs.lowerings
        assert specified != bool(op.no_spec), f"{name}: a spec under specs/ or a no_spec reason, not both"
        views = {
            "generated": any(f.op == name for f in generate.FORMS.values()),
            "field-exact": name in precheck.FIELD_EXACT,
            "lifted": name in ops.having(ops.BATCH_POLYMORPHIC),
            "epilogue": name in cost.ELEMENTWISE,
            "head": name in cost.EPILOGUES,
            "view": name in cost.VIEWS,
        }
        if op.elementwise and op.arity == (1, 1):
            assert views["generated"] and name.lower() in generate.FORMS, name
        if views["generated"] and not op.tags & {ops.TASO}:
            assert not any(generate.FORMS[f].op == name for f in generate.TASO_FORMS), name
        assert views["head"] == bool(op.fuses), name
        assert all(f.op in ops.OPS for f in generate.FORMS.values())
    assert not set(ops.ONNX_TRAITS) & set(ops.OPS), "a modelled op keeps its traits on its catalogue entry"


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
                field = field_apply(op, [x if x.dtype.kind == "i" else x.astype(np.int64) % P for x in xs], attrs, n, 5)
            except ops.OpError:
                continue  # no field semantics here (fractions, or division by computed values): nothing to refute
            checked += 1
            for r, f in zip(real, field):
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
