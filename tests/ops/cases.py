"""The cases the catalogue's tests run each op on, and the one check every op passes against onnxruntime: numpy
semantics, shape rule and ONNX mapping must all agree. Each family's test module (tests/ops/test_<family>.py) runs
the cases of the ops its module (taso/ops/<family>.py) registers."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np

from taso import onnx as onnx_io
from taso import ops
from taso.execute import Runner
from taso.ir import Graph, ModelMeta, Node, TensorType, WeightData, make_attrs
from taso.ops import OpDef

# op -> (input shapes, attrs, constant inputs by position, number of outputs)
CASES: dict[str, list[tuple]] = {
    "Add": [([(2, 3, 4), (3, 4)], {}, {}, 1), ([(2, 4), ()], {}, {}, 1)],
    "Mul": [([(2, 3), (2, 3)], {}, {}, 1), ([(2, 1, 4), (3, 1)], {}, {}, 1)],
    "Div": [([(2, 3), (2, 3)], {}, {}, 1), ([(2, 3, 4), (2, 3, 1)], {}, {}, 1)],
    "Reciprocal": [([(3, 4)], {}, {}, 1)],
    "Relu": [([(2, 5)], {}, {}, 1)],
    "Sigmoid": [([(3, 4)], {}, {}, 1)],
    "Tanh": [([(3, 4)], {}, {}, 1)],
    "MatMul": [([(2, 4), (4, 3)], {}, {}, 1), ([(2, 3, 5, 4), (3, 4, 6)], {}, {}, 1), ([(2, 3, 4), (4, 5)], {}, {}, 1)],
    "Gemm": [
        ([(3, 4), (5, 4), (5,)], {"alpha": 0.5, "beta": 2.0, "transA": 0, "transB": 1}, {}, 1),
        ([(4, 3), (4, 5)], {"alpha": 1.0, "beta": 1.0, "transA": 1, "transB": 0}, {}, 1),
        ([(3, 4), (4, 5), (3, 1)], {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}, {}, 1),
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
        ([(2, 3, 8), (8,), (8,)], {"axis": 2, "epsilon": 1e-5}, {}, 1),
        ([(2, 3, 4), (3, 4)], {"axis": 1, "epsilon": 1e-5}, {}, 1),
    ],
    "Softmax": [([(2, 7)], {"axis": 1}, {}, 1), ([(2, 3, 4)], {"axis": 1}, {}, 1)],
    "Enlarge": [([(4, 2, 1, 3)], {"kernel_shape": (3, 3)}, {}, 1)],
    "Ones": [([], {"shape": (2, 3), "dtype": "float32"}, {}, 1)],
    "Eye": [([], {"shape": (4, 4), "dtype": "float32"}, {}, 1)],
    "ConvIdentity": [([], {"shape": (3, 1, 3, 3), "dtype": "float32"}, {}, 1)],
    "PoolKernel": [([], {"shape": (3, 1, 3, 3), "dtype": "float32"}, {}, 1)],
    "ReduceSum": [
        ([(2, 3, 4)], {"axes": (0, 2), "keepdims": 0}, {}, 1),
        ([(3, 4)], {"axes": (1,), "keepdims": 1}, {}, 1),
    ],
    "ReduceMean": [
        ([(2, 3, 4, 5)], {"axes": (2, 3), "keepdims": 1}, {}, 1),
        ([(2, 3, 4)], {"axes": (0, 1, 2), "keepdims": 0}, {}, 1),
        ([(3, 4)], {"axes": (1,), "keepdims": 1}, {}, 1),  # LayerNorm's mean over the hidden axis
    ],
    "GlobalAveragePool": [([(2, 3, 4, 5)], {}, {}, 1), ([(1, 2, 3, 4, 2)], {}, {}, 1)],
    "Exp": [([(3, 4)], {}, {}, 1)],
    "Sqrt": [([(3, 4)], {}, {}, 1)],
    "Pow": [
        ([(3, 4), ()], {}, {1: np.array(3.0, np.float32)}, 1),
        ([(2, 3), (1,)], {}, {1: np.array([-2.0], np.float32)}, 1),
        ([(2, 3), ()], {}, {1: np.array(0.5, np.float32)}, 1),
    ],
    "Sub": [([(2, 3, 4), (3, 4)], {}, {}, 1), ([(2, 3), (2, 3)], {}, {}, 1)],
    "Neg": [([(3, 4)], {}, {}, 1)],
    "Erf": [([(3, 4)], {}, {}, 1)],
    "Gelu": [([(3, 4)], {"approximate": "none"}, {}, 1), ([(4, 5)], {"approximate": "tanh"}, {}, 1)],
    "Clip": [
        ([(3, 4)], {"min": 0.0, "max": 6.0}, {}, 1),
        ([(2, 5)], {"min": -0.5, "max": 3.4028234663852886e38}, {}, 1),
        ([(2, 5)], {"min": -3.4028234663852886e38, "max": 0.25}, {}, 1),
    ],
    "HardSigmoid": [([(3, 4)], {"alpha": 0.2, "beta": 0.5}, {}, 1), ([(3, 4)], {"alpha": 1 / 6, "beta": 0.5}, {}, 1)],
    "HardSwish": [([(3, 4)], {}, {}, 1), ([(2, 3, 4)], {}, {}, 1)],
    # onnxruntime's fused kernels (taso/ops/fused.py), run by its CPU provider, which has them all
    "FastGelu": [([(2, 3, 4), (4,)], {}, {}, 1), ([(3, 4)], {}, {}, 1)],
    "BiasGelu": [([(2, 3, 4), (4,)], {}, {}, 1), ([(3, 4), (4,)], {}, {}, 1)],
    "QuickGelu": [([(3, 4)], {"alpha": 1.702}, {}, 1), ([(2, 3, 4)], {"alpha": 1.0}, {}, 1)],
    "SkipLayerNormalization": [
        ([(2, 3, 8), (2, 3, 8), (8,), (8,), (8,)], {"epsilon": 1e-5}, {}, 1),
        ([(3, 8), (3, 8), (8,)], {"epsilon": 1e-12}, {}, 1),
    ],
    "SimplifiedLayerNormalization": [
        ([(2, 3, 8), (8,)], {"axis": 2, "epsilon": 1e-5}, {}, 1),
        ([(2, 3, 4), (3, 4)], {"axis": 1, "epsilon": 1e-6}, {}, 1),
    ],
    "SkipSimplifiedLayerNormalization": [([(2, 3, 8), (2, 3, 8), (8,)], {"epsilon": 1e-6}, {}, 1)],
    "FusedMatMul": [
        ([(3, 4), (5, 4)], {"alpha": 0.5, "transA": 0, "transB": 1}, {}, 1),
        ([(2, 4, 3), (4, 5)], {"alpha": 1.0, "transA": 1, "transB": 0}, {}, 1),
        ([(2, 3, 4), (4, 5)], {"alpha": -2.0, "transA": 0, "transB": 0}, {}, 1),
    ],
    # onnxruntime's MultiHeadAttention (taso/ops/attention.py): key and value as (B, L, N*H) and as split heads,
    # with an attention bias broadcast over the batch or the heads (its input 5)
    "MultiHeadAttention": [
        ([(2, 3, 8), (2, 5, 8), (2, 5, 12)], {"num_heads": 2, "scale": 0.0}, {}, 1),
        ([(2, 3, 8), (2, 4, 5, 2), (2, 4, 5, 2)], {"num_heads": 0, "scale": 0.25}, {}, 1),
        ([(2, 3, 8), (2, 4, 5, 2), (2, 4, 5, 2), (1, 4, 3, 5)], {"num_heads": 0, "scale": 1.0}, {}, 1),
        ([(2, 3, 8), (2, 5, 8), (2, 5, 8), (2, 1, 3, 5)], {"num_heads": 2, "scale": 0.0}, {}, 1),
    ],
    "Unsqueeze": [([(3, 4)], {"axes": (0, 3)}, {}, 1), ([(2, 3)], {"axes": (1,)}, {}, 1)],
    "Squeeze": [([(1, 3, 1, 4)], {"axes": (0, 2)}, {}, 1), ([(3, 1)], {"axes": (1,)}, {}, 1)],
    "Expand": [
        ([(3, 1), (3,)], {}, {1: np.array([2, 3, 4], np.int64)}, 1),
        ([(2, 1, 4), (3,)], {}, {1: np.array([1, 3, 1], np.int64)}, 1),
    ],
    "Shape": [([(2, 3, 4)], {"start": 0, "end": 3}, {}, 1), ([(2, 3, 4, 5)], {"start": 1, "end": 3}, {}, 1)],
    "Slice": [
        ([(2, 6, 4)], {"starts": (1,), "ends": (5,), "axes": (1,), "steps": (1,)}, {}, 1),
        ([(3, 5)], {"starts": (0, 1), "ends": (2, 5), "axes": (0, 1), "steps": (1, 2)}, {}, 1),
        ([(3, 5)], {"starts": (4,), "ends": (-9223372036854775808,), "axes": (1,), "steps": (-2,)}, {}, 1),
    ],
    "Gather": [
        ([(2, 5, 3)], {"axis": 1, "indices": 0}, {}, 1),
        ([(6, 4)], {"axis": 0, "indices": (4, 1, 1)}, {}, 1),
    ],
    "Where": [
        ([(2, 3), (2, 3), (3,)], {}, {0: np.array([[True, False, True], [False, False, True]])}, 1),
        ([(1, 4), (3, 1), ()], {}, {0: np.array([[True, False, False, True]])}, 1),
    ],
}


FOLDS = frozenset({"BnKernel", "BnBias", "BlockDiagonal", "ChannelVector"})
"""Weight-only ops with no ONNX form: checked against what they fold (BatchNormalization, a grouped Conv, a
per-channel Mul and Add), as onnxruntime runs it."""
FOLD_CASES: dict[str, list[tuple]] = {
    "BnKernel": [([(4, 2, 3, 3), (4,), (4,)], {"epsilon": 1e-5}, {}, 1)],
    "BnBias": [([(4,), (4,), (4,), (4,)], {"epsilon": 1e-5}, {}, 1)],
    "BlockDiagonal": [([(4, 2, 1, 3)], {"group": 2}, {}, 1)],
    "ChannelVector": [([(3, 1, 1)], {}, {}, 1)],
}
"""Cases for the fold ops' own semantics (the field and trait checks), which onnxruntime cannot run."""
ALL_CASES = {**CASES, **FOLD_CASES}


def family(module: ModuleType) -> list[str]:
    """The ops a family module of taso/ops registers, in registration order."""
    return [v.name for v in vars(module).values() if isinstance(v, OpDef)]


def onnxruntime_cases(module: ModuleType) -> list[tuple[str, tuple]]:
    """(op, case) for each case of each op of ``module`` onnxruntime runs: what `agree` checks."""
    return [(op, c) for op in family(module) for c in CASES.get(op, [])]


def single_op_graph(op: str, shapes: list, attrs: dict, consts: dict, n_out: int, rng) -> tuple[Graph, dict]:
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
    meta = ModelMeta(opsets=(("", max(17, ops.get(op).min_opset)),))  # Gelu is ONNX's from opset 20
    g = Graph((node, *extra), inputs, tuple(out_names), types, weights, data, meta)
    return g, feeds


def agree(op: str, shapes: list, attrs: dict, consts: dict, n_out: int, tmp: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    g, feeds = single_op_graph(op, shapes, attrs, consts, n_out, rng)
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


def run_graph(nodes: tuple, x: np.ndarray, params: dict, out: str, tmp: Path) -> np.ndarray:
    """``nodes`` over input ``x`` and weights ``params`` run by onnxruntime; the output ``out``."""
    types = {k: TensorType(str(v.dtype), v.shape) for k, v in params.items()} | {"x": TensorType("float32", x.shape)}
    for n in nodes:
        types |= dict(zip(n.outputs, ops.infer(n.op, [types[v] for v in n.inputs], n.attr)))
    g = Graph(nodes, ("x",), (out,), types, tuple(params), {k: WeightData(v) for k, v in params.items()})
    return Runner(onnx_io.save_model(g, tmp / "g.onnx"))({"x": x})[out]
