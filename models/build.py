"""Builders for the model zoo, written with onnx helpers so no torch is needed at test time.

    python models/build.py            # (re)writes the bundled models next to this file

`ZOO` maps every zoo model's name to a zero-argument builder: the onnx wheel's light models with materialized
weights, and the structures TASO and PET were evaluated on (ResNeXt-50, NasNet-A, NasRNN, Inception-v3, BERT-base,
a GPT-2 decoder), named as their usual exporters name things. Large models are built on the fly, never committed.

Weights are seeded random tensors, never all-equal constants: equal weights make wrong rewrites look right.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_models() -> list[Path]:
    """The structure-only models that ship inside the onnx wheel."""
    return sorted(LIGHT_DIR.glob("light_*.onnx"))


def _random_weight(
    rng: np.random.Generator, name: str, shape: tuple[int, ...], span: tuple[float, float] | None
) -> onnx.TensorProto:
    """Uniform over ``span`` (BatchNorm scales and variances), else normal with std 1/sqrt(fan-in) so activations
    stay in range through 100+ layers. Drawn in float32: VGG-19's 143M weights in float64 cost seconds and a
    1 GB temporary."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    if span is not None:
        value = rng.random(shape, dtype=np.float32) * np.float32(span[1] - span[0]) + np.float32(span[0])
    else:
        value = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(max(fan_in, 1)))
    return numpy_helper.from_array(value, name)


def materialize(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace weight stand-ins with seeded random initializers: ConstantOfShape nodes fed by constant shapes,
    and float initializers holding one repeated value (some light models ship BatchNorm scales and biases so).

    BatchNorm scales and variances are found by where they are used, not by name: Caffe2's models call the
    variance ``_riv_``, and a negative one made every output NaN, which any equivalence check passes. A BatchNorm
    that feeds a residual sum gets a small scale, as trained networks have, or the logits of ResNet-50 and
    ShuffleNet reach the hundreds and their softmax saturates (a saturated output hides wrong rewrites too).
    """
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    merged = {i for n in g.node if n.op_type in ("Add", "Sum") for i in n.input}
    spans: dict[str, tuple[float, float]] = {}
    for n in g.node:
        if n.op_type == "BatchNormalization":
            spans[n.input[1]] = (0.1, 0.3) if n.output[0] in merged else (0.5, 1.5)
            spans[n.input[4]] = (0.5, 1.5)

    def span(name: str) -> tuple[float, float] | None:
        return spans.get(name, (0.5, 1.5) if "var" in name or "scale" in name else None)

    inits = {t.name: t for t in g.initializer}
    keep, new_inits = [], []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            new_inits.append(_random_weight(rng, node.output[0], shape, span(node.output[0])))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in g.node for i in n.input}
    kept_inits = []
    for t in g.initializer:
        if t.name in used:
            a = numpy_helper.to_array(t)
            constant = a.dtype.kind == "f" and a.size > 1 and np.all(a == a.flat[0])
            kept_inits.append(_random_weight(rng, t.name, a.shape, span(t.name)) if constant else t)
    kept_inits += new_inits
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    names = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in names and (i.name in used or i.name in {o.name for o in g.output})]
    del g.input[:]
    g.input.extend(inputs)
    if m.ir_version < 4:
        m.ir_version = 4
    return m


# ---- BERT-style encoder -------------------------------------------------------------------------------------


class _Builder:
    """Accumulates nodes and seeded initializers; names follow the exporter convention ``layer.N.attn.q``."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = shape[0] if len(shape) > 1 else 1
        s = scale if scale is not None else 1 / np.sqrt(fan_in)
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, **attrs: object) -> list[str]:
        outs = [f"{name}_out{i}" if outputs > 1 else f"{name}_out" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def one(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        return self.op(op_type, inputs, name, **attrs)[0]


def bert(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    ffn: int = 128,
    vocab: int = 100,
    max_len: int = 32,
    seq: int | str = "seq",
    batch: int | str = "batch",
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT-base-shaped encoder (embeddings, attention with mask, GELU FFN, LayerNorm, pooler), opset 17.

    Laid out as common exporters write it: separate Q/K/V MatMuls reading one tensor (TASO's merge target),
    Reshape/Transpose head splitting with a 0-copy shape constant, erf GELU.
    """
    b = _Builder(seed)
    dh = hidden // heads
    ids, mask = "input_ids", "attention_mask"
    word = b.weight("embeddings.word", (vocab, hidden), 0.1)
    pos = b.weight("embeddings.position", (max_len, hidden), 0.1)
    x = b.one("Gather", [word, ids], "embeddings.gather")
    seq_len = b.one("Shape", [ids], "embeddings.shape", start=1, end=2)
    positions = b.one(
        "Range",
        [
            b.const("zero", np.array(0, np.int64)),
            b.one("Squeeze", [seq_len, b.const("axis0", np.array([0], np.int64))], "embeddings.seq"),
            b.const("one", np.array(1, np.int64)),
        ],
        "embeddings.range",
    )
    x = b.one("Add", [x, b.one("Gather", [pos, positions], "embeddings.pos_gather")], "embeddings.add")
    x = b.one(
        "LayerNormalization",
        [x, b.weight("embeddings.ln.w", (hidden,), 0.1), b.weight("embeddings.ln.b", (hidden,), 0.1)],
        "embeddings.ln",
        axis=-1,
        epsilon=1e-12,
    )
    m = b.one("Unsqueeze", [mask, b.const("mask_axes", np.array([1, 2], np.int64))], "mask.unsqueeze")
    m = b.one("Cast", [m], "mask.cast", to=TensorProto.FLOAT)
    m = b.one("Sub", [b.const("mask_one", np.array(1.0, np.float32)), m], "mask.invert")
    m = b.one("Mul", [m, b.const("mask_min", np.array(-10000.0, np.float32))], "mask.scale")
    heads_shape = b.const("heads_shape", np.array([0, 0, heads, dh], np.int64))
    merge_shape = b.const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = b.const("attn_scale", np.array(1 / np.sqrt(dh), np.float32))
    for i in range(layers):
        p = f"layer.{i}"

        def dense(inp: str, name: str, n_in: int, n_out: int, p: str = p) -> str:
            y = b.one("MatMul", [inp, b.weight(f"{p}.{name}.w", (n_in, n_out))], f"{p}.{name}.matmul")
            return b.one("Add", [y, b.weight(f"{p}.{name}.b", (n_out,), 0.1)], f"{p}.{name}.bias")

        def split_heads(t: str, name: str, perm: list[int], p: str = p) -> str:
            r = b.one("Reshape", [t, heads_shape], f"{p}.{name}.reshape")
            return b.one("Transpose", [r], f"{p}.{name}.transpose", perm=perm)

        q = split_heads(dense(x, "attn.q", hidden, hidden), "attn.q", [0, 2, 1, 3])
        k = split_heads(dense(x, "attn.k", hidden, hidden), "attn.k", [0, 2, 3, 1])
        v = split_heads(dense(x, "attn.v", hidden, hidden), "attn.v", [0, 2, 1, 3])
        s = b.one("MatMul", [q, k], f"{p}.attn.scores")
        s = b.one("Mul", [s, scale], f"{p}.attn.scale")
        s = b.one("Add", [s, m], f"{p}.attn.mask")
        s = b.one("Softmax", [s], f"{p}.attn.softmax", axis=-1)
        ctx = b.one("MatMul", [s, v], f"{p}.attn.context")
        ctx = b.one("Transpose", [ctx], f"{p}.attn.merge_transpose", perm=[0, 2, 1, 3])
        ctx = b.one("Reshape", [ctx, merge_shape], f"{p}.attn.merge_reshape")
        a = dense(ctx, "attn.out", hidden, hidden)
        x = b.one(
            "LayerNormalization",
            [
                b.one("Add", [a, x], f"{p}.attn.residual"),
                b.weight(f"{p}.attn.ln.w", (hidden,), 0.1),
                b.weight(f"{p}.attn.ln.b", (hidden,), 0.1),
            ],
            f"{p}.attn.ln",
            axis=-1,
            epsilon=1e-12,
        )
        h = dense(x, "ffn.in", hidden, ffn)
        e = b.one(
            "Erf",
            [b.one("Div", [h, b.const(f"{p}.sqrt2", np.array(np.sqrt(2), np.float32))], f"{p}.gelu.div")],
            f"{p}.gelu.erf",
        )
        e = b.one("Add", [e, b.const(f"{p}.gelu.one", np.array(1.0, np.float32))], f"{p}.gelu.add")
        h = b.one(
            "Mul",
            [b.one("Mul", [h, e], f"{p}.gelu.mul"), b.const(f"{p}.gelu.half", np.array(0.5, np.float32))],
            f"{p}.gelu.half",
        )
        f = dense(h, "ffn.out", ffn, hidden)
        x = b.one(
            "LayerNormalization",
            [
                b.one("Add", [f, x], f"{p}.ffn.residual"),
                b.weight(f"{p}.ffn.ln.w", (hidden,), 0.1),
                b.weight(f"{p}.ffn.ln.b", (hidden,), 0.1),
            ],
            f"{p}.ffn.ln",
            axis=-1,
            epsilon=1e-12,
        )
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output.hidden"))
    cls = b.one("Gather", [x, b.const("cls_index", np.array(0, np.int64))], "pooler.cls", axis=1)
    pooled = b.one(
        "Gemm", [cls, b.weight("pooler.w", (hidden, hidden)), b.weight("pooler.b", (hidden,), 0.1)], "pooler.dense"
    )
    b.nodes.append(helper.make_node("Tanh", [pooled], ["pooler_output"], name="pooler.tanh"))
    graph = helper.make_graph(
        b.nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, seq]),
            helper.make_tensor_value_info(mask, TensorProto.INT64, [batch, seq]),
        ],
        [
            helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [batch, hidden]),
        ],
        initializer=b.inits,
        doc_string="BERT-style encoder built by models/build.py",
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="subst-models")
    model.ir_version = 8
    helper.set_model_props(model, {"builder": "models/build.py:bert", "layers": str(layers), "hidden": str(hidden)})
    onnx.checker.check_model(model, full_check=True)
    return model


# ---- small models for pass-through tests ----------------------------------------------------------------------


def control_flow(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu feeding an If (branches read an outer-scope weight) and a Loop; catalogue ops around them."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w")
    bias = numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float32), "scale")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["relu_out", "scale_b"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["relu_out"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "if_out"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None),
        ],
    )
    nodes = [
        helper.make_node("Conv", ["x", "conv.w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv_out"], ["relu_out"], name="relu"),
        helper.make_node("Reshape", ["scale", "scale_shape"], ["scale_b"], name="scale_reshape"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"], name="greater"),
        helper.make_node("If", ["positive"], ["if_out"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "relu_out"], ["loop_out"], name="loop", body=body),
        helper.make_node("Sigmoid", ["loop_out"], ["y"], name="sigmoid", doc_string="squash"),
    ]
    graph = helper.make_graph(
        nodes,
        "control_flow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        initializer=[
            w,
            bias,
            numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "scale_shape"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="subst-models")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


# ---- exporter-style graphs: ResNeXt, Inception-v3, NasNet-A, NasRNN, GPT-2 ----------------------------------

_LEAVES = {
    "torch": {
        "w": "weight",
        "b": "bias",
        "scale": "weight",
        "shift": "bias",
        "mean": "running_mean",
        "var": "running_var",
    },
    "tf": {
        "w": "weights",
        "b": "biases",
        "scale": "gamma",
        "shift": "beta",
        "mean": "moving_mean",
        "var": "moving_variance",
    },
}
_TF_LABELS = {
    "Conv": "Conv2D",
    "BatchNormalization": "FusedBatchNormV3",
    "Add": "add",
    "Concat": "concat",
    "AveragePool": "AvgPool",
    "Slice": "strided_slice",
    "ReduceMean": "Mean",
    "Transpose": "transpose",
}


class _Net:
    """Nodes, seeded weights and exporter-style names for one graph under construction.

    Names matter: rewrites must keep them, and reports show them. ``style="torch"`` names things as torch.onnx
    does (scope ``/layer1/layer1.0/conv1`` gives node ``/layer1/layer1.0/conv1/Conv``, output
    ``/layer1/layer1.0/conv1/Conv_output_0``, parameter ``layer1.0.conv1.weight``, folded constants
    ``onnx::Div_3``); ``style="tf"`` as tf2onnx does (node ``cell_0/1x1/Conv2D``, output ``cell_0/1x1/Conv2D:0``,
    parameter ``cell_0/1x1/weights``, folded constants ``const_fold_opt__3``).
    """

    def __init__(self, seed: int, style: str = "torch") -> None:
        self.rng = np.random.default_rng(seed)
        self.style = style
        self.leaf = _LEAVES[style]
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: set[str] = set()
        self.consts: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def op(
        self, op_type: str, inputs: list[str], scope: str, outputs: int = 1, label: str | None = None, **attrs: object
    ) -> list[str]:
        """Append a node named ``scope/label`` (made unique with ``_1``, ``_2`` as exporters do)."""
        default = _TF_LABELS.get(op_type, op_type) if self.style == "tf" else op_type
        base = f"{scope}/{label or default}"
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        outs = [f"{name}:{i}" if self.style == "tf" else f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def one(self, op_type: str, inputs: list[str], scope: str, label: str | None = None, **attrs: object) -> str:
        return self.op(op_type, inputs, scope, 1, label, **attrs)[0]

    def rename(self, value: str, name: str) -> str:
        """Give a node's output the graph-output name exporters give it (no consumer may read it yet)."""
        assert not any(value in n.input for n in self.nodes), value
        for node in self.nodes:
            node.output[:] = [name if o == value else o for o in node.output]
        return name

    def param_name(self, scope: str, leaf: str) -> str:
        if self.style == "tf":
            return f"{scope}/{leaf}"
        parts: list[str] = []
        for level in scope.strip("/").split("/"):
            if parts and level.startswith(parts[-1] + "."):  # `layer1` then `layer1.0`: one module, `layer1.0`
                parts[-1] = level
            else:
                parts.append(level)
        return ".".join([*parts, leaf])

    def tensor(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, value: np.ndarray, hint: str) -> str:
        """A folded constant, shared by every node that needs the same value (as exporters dedupe them)."""
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self.consts:
            k = len(self.consts)
            name = f"const_fold_opt__{k}" if self.style == "tf" else f"onnx::{hint}_{k}"
            self.consts[key] = self.tensor(name, value)
        return self.consts[key]

    def randn(self, scope: str, leaf: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        value = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)
        return self.tensor(self.param_name(scope, leaf), value)

    def conv(
        self,
        x: str,
        scope: str,
        cin: int,
        cout: int,
        kernel: int | tuple[int, int],
        stride: int = 1,
        pads: list[int] | None = None,
        group: int = 1,
        bias: bool = False,
        leaf: str | None = None,
        label: str | None = None,
        dilation: int = 1,
    ) -> str:
        """Conv with He-scaled weights (std sqrt(2/fan_in)): a ReLU follows, so activations keep their scale."""
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        if pads is None:
            pads = [dilation * (kh // 2), dilation * (kw // 2)] * 2
        fan_in = cin // group * kh * kw
        w = self.randn(scope, leaf or self.leaf["w"], (cout, cin // group, kh, kw), np.sqrt(2 / fan_in))
        inputs = [x, w] + ([self.randn(scope, self.leaf["b"], (cout,), 0.1)] if bias else [])
        return self.one(
            "Conv",
            inputs,
            scope,
            label,
            dilations=[dilation, dilation],
            group=group,
            kernel_shape=[kh, kw],
            pads=pads,
            strides=[stride, stride],
        )

    def bn(self, x: str, scope: str, channels: int, eps: float = 1e-5, gamma: float = 1.0) -> str:
        """Inference BatchNorm with running statistics near what training leaves (variances positive).

        ``gamma`` < 1 on a residual branch's last BN keeps a deep residual stack's activations from doubling
        in variance at every block, as trained networks' small final gammas do.
        """
        leaf = self.leaf
        inputs = [
            x,
            self.randn(scope, leaf["scale"], (channels,), 0.1 * gamma, gamma),
            self.randn(scope, leaf["shift"], (channels,), 0.1),
            self.randn(scope, leaf["mean"], (channels,), 0.1),
            self.tensor(self.param_name(scope, leaf["var"]), self.rng.uniform(0.5, 1.5, channels).astype(np.float32)),
        ]
        return self.one("BatchNormalization", inputs, scope, epsilon=eps, momentum=0.9)

    def linear(self, x: str, scope: str, n_in: int, n_out: int) -> str:
        """torch ``nn.Linear`` on a 2-D input: Gemm with the (out, in) weight and transB=1."""
        w = self.randn(scope, "weight", (n_out, n_in), 1 / np.sqrt(n_in))
        b = self.randn(scope, "bias", (n_out,), 0.1)
        return self.one("Gemm", [x, w, b], scope, alpha=1.0, beta=1.0, transB=1)

    def pool(self, op_type: str, x: str, scope: str, k: int, stride: int, pads: list[int], **attrs: object) -> str:
        return self.one(
            op_type, [x], scope, ceil_mode=0, kernel_shape=[k, k], pads=pads, strides=[stride, stride], **attrs
        )


def _finish(
    n: _Net,
    builder: str,
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    props: dict[str, object],
) -> onnx.ModelProto:
    """Opset 17, IR 8 (onnxruntime 1.31 reads IR <= 10), checked with full shape inference."""
    graph = helper.make_graph(
        n.nodes, builder, inputs, outputs, initializer=n.inits, doc_string=f"{builder} built by models/build.py"
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="subst-models")
    model.ir_version = 8
    helper.set_model_props(model, {"builder": f"models/build.py:{builder}", **{k: str(v) for k, v in props.items()}})
    onnx.checker.check_model(model, full_check=True)
    return model


def _image_io(batch: int | str, channels: int, size: int, classes: int) -> tuple[list, list]:
    return (
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, channels, size, size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])],
    )


def _classifier(n: _Net, x: str, channels: int, classes: int) -> str:
    """torchvision's head: global average pool, flatten, fc."""
    x = n.one("GlobalAveragePool", [x], "/avgpool")
    x = n.one("Flatten", [x], "", axis=1)
    return n.rename(n.linear(x, "/fc", channels, classes), "output")


def resnext50(
    batch: int | str = 1,
    groups: int = 32,
    width_per_group: int = 4,
    blocks: tuple[int, ...] = (3, 4, 6, 3),
    image: int = 224,
    classes: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's ResNeXt-50 32x4d: bottlenecks whose 3x3 conv is grouped (group=32) and carries the stride.

    BatchNormalization is kept as its own node (a training-mode-preserving export), so conv+BN fusion is
    something the optimizer has to find.
    """
    n = _Net(seed)
    x = n.conv("input", "/conv1", 3, 64, 7, stride=2)
    x = n.one("Relu", [n.bn(x, "/bn1", 64)], "/relu")
    x = n.pool("MaxPool", x, "/maxpool", 3, 2, [1, 1, 1, 1], dilations=[1, 1])
    cin = 64
    for i, count in enumerate(blocks):
        planes = 64 * 2**i
        width, cout = planes * width_per_group // 64 * groups, planes * 4
        for j in range(count):
            s, stride = f"/layer{i + 1}/layer{i + 1}.{j}", 2 if i > 0 and j == 0 else 1
            y = n.one("Relu", [n.bn(n.conv(x, f"{s}/conv1", cin, width, 1), f"{s}/bn1", width)], f"{s}/relu")
            y = n.conv(y, f"{s}/conv2", width, width, 3, stride, group=groups)
            y = n.one("Relu", [n.bn(y, f"{s}/bn2", width)], f"{s}/relu")
            y = n.bn(n.conv(y, f"{s}/conv3", width, cout, 1), f"{s}/bn3", cout, gamma=0.2)
            if j == 0:
                x = n.conv(x, f"{s}/downsample/downsample.0", cin, cout, 1, stride)
                x = n.bn(x, f"{s}/downsample/downsample.1", cout)
            x = n.one("Relu", [n.one("Add", [y, x], s)], f"{s}/relu")
            cin = cout
    _classifier(n, x, cin, classes)
    return _finish(
        n, "resnext50", *_image_io(batch, 3, image, classes), {"groups": groups, "width_per_group": width_per_group}
    )


def _basic_conv(
    n: _Net,
    x: str,
    scope: str,
    cin: int,
    cout: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    pad: int | tuple[int, int] = 0,
) -> str:
    """torchvision Inception's BasicConv2d: conv (no bias), BN (eps 1e-3), ReLU."""
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    y = n.conv(x, f"{scope}/conv", cin, cout, kernel, stride, [ph, pw, ph, pw])
    return n.one("Relu", [n.bn(y, f"{scope}/bn", cout, 1e-3)], scope)


def _avg3(n: _Net, x: str, scope: str) -> str:
    """F.avg_pool2d(x, 3, stride=1, padding=1): torch counts the padding (count_include_pad=1)."""
    return n.pool("AveragePool", x, scope, 3, 1, [1, 1, 1, 1], count_include_pad=1)


def _inception_a(n: _Net, x: str, s: str, cin: int, pool_features: int) -> tuple[str, int]:
    b1 = _basic_conv(n, x, f"{s}/branch1x1", cin, 64, 1)
    b5 = _basic_conv(n, x, f"{s}/branch5x5_1", cin, 48, 1)
    b5 = _basic_conv(n, b5, f"{s}/branch5x5_2", 48, 64, 5, pad=2)
    b3 = _basic_conv(n, x, f"{s}/branch3x3dbl_1", cin, 64, 1)
    b3 = _basic_conv(n, b3, f"{s}/branch3x3dbl_2", 64, 96, 3, pad=1)
    b3 = _basic_conv(n, b3, f"{s}/branch3x3dbl_3", 96, 96, 3, pad=1)
    bp = _basic_conv(n, _avg3(n, x, s), f"{s}/branch_pool", cin, pool_features, 1)
    return n.one("Concat", [b1, b5, b3, bp], s, axis=1), 224 + pool_features


def _inception_b(n: _Net, x: str, s: str, cin: int) -> tuple[str, int]:
    b3 = _basic_conv(n, x, f"{s}/branch3x3", cin, 384, 3, stride=2)
    bd = _basic_conv(n, x, f"{s}/branch3x3dbl_1", cin, 64, 1)
    bd = _basic_conv(n, bd, f"{s}/branch3x3dbl_2", 64, 96, 3, pad=1)
    bd = _basic_conv(n, bd, f"{s}/branch3x3dbl_3", 96, 96, 3, stride=2)
    bp = n.pool("MaxPool", x, s, 3, 2, [0, 0, 0, 0], dilations=[1, 1])
    return n.one("Concat", [b3, bd, bp], s, axis=1), 480 + cin


def _inception_c(n: _Net, x: str, s: str, cin: int, c7: int) -> tuple[str, int]:
    """The factorised 7x7: 1x7 and 7x1 convs in sequence."""
    b1 = _basic_conv(n, x, f"{s}/branch1x1", cin, 192, 1)
    b7 = _basic_conv(n, x, f"{s}/branch7x7_1", cin, c7, 1)
    b7 = _basic_conv(n, b7, f"{s}/branch7x7_2", c7, c7, (1, 7), pad=(0, 3))
    b7 = _basic_conv(n, b7, f"{s}/branch7x7_3", c7, 192, (7, 1), pad=(3, 0))
    bd = _basic_conv(n, x, f"{s}/branch7x7dbl_1", cin, c7, 1)
    bd = _basic_conv(n, bd, f"{s}/branch7x7dbl_2", c7, c7, (7, 1), pad=(3, 0))
    bd = _basic_conv(n, bd, f"{s}/branch7x7dbl_3", c7, c7, (1, 7), pad=(0, 3))
    bd = _basic_conv(n, bd, f"{s}/branch7x7dbl_4", c7, c7, (7, 1), pad=(3, 0))
    bd = _basic_conv(n, bd, f"{s}/branch7x7dbl_5", c7, 192, (1, 7), pad=(0, 3))
    bp = _basic_conv(n, _avg3(n, x, s), f"{s}/branch_pool", cin, 192, 1)
    return n.one("Concat", [b1, b7, bd, bp], s, axis=1), 768


def _inception_d(n: _Net, x: str, s: str, cin: int) -> tuple[str, int]:
    b3 = _basic_conv(n, x, f"{s}/branch3x3_1", cin, 192, 1)
    b3 = _basic_conv(n, b3, f"{s}/branch3x3_2", 192, 320, 3, stride=2)
    b7 = _basic_conv(n, x, f"{s}/branch7x7x3_1", cin, 192, 1)
    b7 = _basic_conv(n, b7, f"{s}/branch7x7x3_2", 192, 192, (1, 7), pad=(0, 3))
    b7 = _basic_conv(n, b7, f"{s}/branch7x7x3_3", 192, 192, (7, 1), pad=(3, 0))
    b7 = _basic_conv(n, b7, f"{s}/branch7x7x3_4", 192, 192, 3, stride=2)
    bp = n.pool("MaxPool", x, s, 3, 2, [0, 0, 0, 0], dilations=[1, 1])
    return n.one("Concat", [b3, b7, bp], s, axis=1), 512 + cin


def _inception_e(n: _Net, x: str, s: str, cin: int) -> tuple[str, int]:
    """Two 1x3/3x1 pairs reading one tensor each, concatenated: sibling convs TASO can merge."""
    b1 = _basic_conv(n, x, f"{s}/branch1x1", cin, 320, 1)
    b3 = _basic_conv(n, x, f"{s}/branch3x3_1", cin, 384, 1)
    b3 = n.one(
        "Concat",
        [
            _basic_conv(n, b3, f"{s}/branch3x3_2a", 384, 384, (1, 3), pad=(0, 1)),
            _basic_conv(n, b3, f"{s}/branch3x3_2b", 384, 384, (3, 1), pad=(1, 0)),
        ],
        s,
        axis=1,
    )
    bd = _basic_conv(n, x, f"{s}/branch3x3dbl_1", cin, 448, 1)
    bd = _basic_conv(n, bd, f"{s}/branch3x3dbl_2", 448, 384, 3, pad=1)
    bd = n.one(
        "Concat",
        [
            _basic_conv(n, bd, f"{s}/branch3x3dbl_3a", 384, 384, (1, 3), pad=(0, 1)),
            _basic_conv(n, bd, f"{s}/branch3x3dbl_3b", 384, 384, (3, 1), pad=(1, 0)),
        ],
        s,
        axis=1,
    )
    bp = _basic_conv(n, _avg3(n, x, s), f"{s}/branch_pool", cin, 192, 1)
    return n.one("Concat", [b1, b3, bd, bp], s, axis=1), 2048


def inception_v3(batch: int | str = 1, image: int = 299, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision's Inception-v3 in eval mode (no aux head, transform_input off), 299x299.

    Mixed_5b..7c as torchvision lays them out: 1x7/7x1 factorised convs in Mixed_6b-6e and 7a, 1x3/3x1 pairs in
    7b/7c, average-pool branches that count padding, max-pool reductions, channel Concats.
    """
    n = _Net(seed)
    x = _basic_conv(n, "input", "/Conv2d_1a_3x3", 3, 32, 3, stride=2)
    x = _basic_conv(n, x, "/Conv2d_2a_3x3", 32, 32, 3)
    x = _basic_conv(n, x, "/Conv2d_2b_3x3", 32, 64, 3, pad=1)
    x = n.pool("MaxPool", x, "/maxpool1", 3, 2, [0, 0, 0, 0], dilations=[1, 1])
    x = _basic_conv(n, x, "/Conv2d_3b_1x1", 64, 80, 1)
    x = _basic_conv(n, x, "/Conv2d_4a_3x3", 80, 192, 3)
    x = n.pool("MaxPool", x, "/maxpool2", 3, 2, [0, 0, 0, 0], dilations=[1, 1])
    c = 192
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x, c = _inception_a(n, x, f"/{name}", c, pool_features)
    x, c = _inception_b(n, x, "/Mixed_6a", c)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x, c = _inception_c(n, x, f"/{name}", c, c7)
    x, c = _inception_d(n, x, "/Mixed_7a", c)
    for name in ("Mixed_7b", "Mixed_7c"):
        x, c = _inception_e(n, x, f"/{name}", c)
    _classifier(n, x, c, classes)
    return _finish(n, "inception_v3", *_image_io(batch, 3, image, classes), {"image": image})


def csrnet(batch: int | str = 1, image: int = 256, seed: int = 0) -> onnx.ModelProto:
    """CSRNet (crowd counting, CVPR'18): VGG-16's first ten convs, then six 3x3 convs with dilation 2 at 1/8
    resolution and a 1x1 conv to a density map. The dilated back-end is where PET reported its largest gain."""
    n = _Net(seed)
    x, cin = "input", 3
    for i, c in enumerate((64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512)):
        if c == "M":
            x = n.pool("MaxPool", x, f"/frontend/pool{i}", 2, 2, [0, 0, 0, 0])
            continue
        x = n.one("Relu", [n.conv(x, f"/frontend/{i}", cin, int(c), 3, bias=True)], f"/frontend/relu{i}")
        cin = int(c)
    for i, c in enumerate((512, 512, 512, 256, 128, 64)):
        x = n.one("Relu", [n.conv(x, f"/backend/{i}", cin, c, 3, bias=True, dilation=2)], f"/backend/relu{i}")
        cin = c
    n.rename(n.conv(x, "/output_layer", cin, 1, 1, bias=True), "output")
    size = image // 8
    return _finish(
        n,
        "csrnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, image, image])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 1, size, size])],
        {"image": image},
    )


def _same_pads(size: int, k: int, stride: int) -> list[int]:
    """TensorFlow's SAME padding made explicit (the extra row/column goes at the end), as tf2onnx writes it."""
    total = max((-(-size // stride) - 1) * stride + k - size, 0)
    return [total // 2, total // 2, total - total // 2, total - total // 2]


def _sep_conv(n: _Net, x: str, scope: str, c: int, k: int, stride: int, size: int) -> str:
    """NasNet's separable_KxK_2: (ReLU, depthwise KxK, pointwise 1x1, BN) twice; only the first strides."""
    for layer in (1, 2):
        s = stride if layer == 1 else 1
        sep = f"{scope}/separable_{k}x{k}_{layer}"
        x = n.one("Relu", [x], sep)
        x = n.conv(
            x,
            sep,
            c,
            c,
            k,
            s,
            _same_pads(size, k, s),
            group=c,
            leaf="depthwise_weights",
            label="separable_conv2d/depthwise",
        )
        x = n.conv(x, sep, c, c, 1, leaf="pointwise_weights", label="separable_conv2d")
        x = n.bn(x, f"{scope}/bn_sep_{k}x{k}_{layer}", c, 1e-3)
        size = -(-size // s)
    return x


def _factorized_reduction(n: _Net, x: str, scope: str, cin: int, cout: int) -> str:
    """NasNet's stride-2 skip: two 1x1 convs on the input and on it shifted by one pixel, concatenated."""
    p1 = n.pool("AveragePool", x, f"{scope}/path1", 1, 2, [0, 0, 0, 0])
    p1 = n.conv(p1, f"{scope}/path1_conv", cin, cout // 2, 1)
    p2 = n.one("Pad", [x, n.const(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "Pad")], f"{scope}/path2")
    big = np.iinfo(np.int64).max
    p2 = n.one(
        "Slice",
        [
            p2,
            n.const(np.array([1, 1], np.int64), "Slice"),
            n.const(np.array([big, big], np.int64), "Slice"),
            n.const(np.array([2, 3], np.int64), "Slice"),
        ],
        f"{scope}/path2",
    )
    p2 = n.pool("AveragePool", p2, f"{scope}/path2", 1, 2, [0, 0, 0, 0])
    p2 = n.conv(p2, f"{scope}/path2_conv", cin, cout - cout // 2, 1)
    return n.bn(n.one("Concat", [p1, p2], scope, axis=1), f"{scope}/final_path_bn", cout, 1e-3)


_NORMAL_CELL = (
    ("sep5", 0, "sep3", 1),
    ("sep5", 1, "sep3", 1),
    ("avg", 0, "none", 1),
    ("avg", 1, "avg", 1),
    ("sep3", 0, "none", 0),
)
_REDUCTION_CELL = (
    ("sep5", 0, "sep7", 1),
    ("max", 0, "sep7", 1),
    ("avg", 0, "sep5", 1),
    ("none", 3, "avg", 2),
    ("sep3", 4, "max", 0),
)
"""TF-slim's NasNet-A cells: per block (left op, left state, right op, right state); states 0 and 1 are the
cell's current and previous inputs, 2.. the blocks' outputs."""


def _nasnet_cell(
    n: _Net, scope: str, reduction: bool, cur: tuple[str, int, int], prev: tuple[str, int, int], f: int
) -> tuple[str, int, int]:
    """One NasNet-A cell on (value, channels, size) inputs; returns the same triple for its output."""
    (x, xc, size), (p, pc, psize) = cur, prev
    if psize != size:
        p = _factorized_reduction(n, n.one("Relu", [p], scope), scope, pc, f)
    elif pc != f:
        p = n.bn(n.conv(n.one("Relu", [p], scope), f"{scope}/prev_1x1", pc, f, 1), f"{scope}/prev_bn", f, 1e-3)
    x = n.bn(n.conv(n.one("Relu", [x], scope), f"{scope}/1x1", xc, f, 1), f"{scope}/beginning_bn", f, 1e-3)
    states, out_size = [x, p], -(-size // 2) if reduction else size
    for i, block in enumerate(_REDUCTION_CELL if reduction else _NORMAL_CELL):
        pair = []
        for side, op, idx in (("left", *block[:2]), ("right", *block[2:])):
            s, h = f"{scope}/comb_iter_{i}/{side}", states[idx]
            stride, in_size = (2, size) if reduction and idx < 2 else (1, out_size)
            if op.startswith("sep"):
                h = _sep_conv(n, h, s, f, int(op[3]), stride, in_size)
            elif op in ("avg", "max"):
                pads = _same_pads(in_size, 3, stride)
                if op == "avg":
                    h = n.pool("AveragePool", h, s, 3, stride, pads, count_include_pad=0)
                else:
                    h = n.pool("MaxPool", h, s, 3, stride, pads)
            elif stride > 1:
                h = n.bn(n.conv(n.one("Relu", [h], s), f"{s}/1x1", f, f, 1, stride), f"{s}/bn_1", f, 1e-3)
            pair.append(h)
        states.append(n.one("Add", pair, f"{scope}/comb_iter_{i}/combine"))
    kept = states[3:] if reduction else states[1:]
    return n.one("Concat", kept, f"{scope}/cell_output", axis=1), f * len(kept), out_size


def nasnet_a(
    cells: str = "NNRN", filters: int = 32, image: int = 32, batch: int | str = 1, classes: int = 10, seed: int = 0
) -> onnx.ModelProto:
    """NasNet-A (TF-slim's CIFAR layout) as tf2onnx exports it: NHWC input transposed to NCHW, explicit SAME pads.

    ``cells`` is the stack, N for a normal cell and R for a reduction cell (which doubles the filters). Normal
    cells mix separable 3x3/5x5 convs (depthwise + pointwise), 3x3 average pools and identities; reduction cells
    add 7x7 separable convs and max pools; a cell after a reduction meets its previous input through the
    factorised reduction (Pad + Slice shift, strided 1x1 average pools).
    """
    n = _Net(seed, "tf")
    x = n.one("Transpose", ["images:0"], "images", perm=[0, 3, 1, 2])
    stem = 3 * filters
    x = n.bn(n.conv(x, "conv0", 3, stem, 3), "conv0_bn", stem, 1e-3)
    cur = prev = (x, stem, image)
    f, counts = filters, {"N": 0, "R": 0}
    for kind in cells:
        if kind == "R":
            f *= 2
        scope = f"cell_{counts['N']}" if kind == "N" else f"reduction_cell_{counts['R']}"
        counts[kind] += 1
        prev, cur = cur, _nasnet_cell(n, scope, kind == "R", cur, prev, f)
    x, c, _ = cur
    x = n.one("ReduceMean", [n.one("Relu", [x], "final_layer")], "final_layer", axes=[2, 3], keepdims=0)
    w = n.randn("final_layer/FC", "weights", (c, classes), 1 / np.sqrt(c))
    x = n.one("MatMul", [x, w], "final_layer/FC")
    x = n.one("Add", [x, n.randn("final_layer/FC", "biases", (classes,), 0.1)], "final_layer/FC", label="BiasAdd")
    n.rename(x, "logits:0")
    return _finish(
        n,
        "nasnet_a",
        [helper.make_tensor_value_info("images:0", TensorProto.FLOAT, [batch, image, image, 3])],
        [helper.make_tensor_value_info("logits:0", TensorProto.FLOAT, [batch, classes])],
        {"cells": cells, "filters": filters},
    )


def nasrnn(steps: int = 5, hidden: int = 512, batch: int | str = 1, seed: int = 0) -> onnx.ModelProto:
    """TASO's NasRNN benchmark cell, unrolled over ``steps`` inputs from the state ``h0``.

    Each step: eight (x @ Wx_i + h @ Wh_i), then the NAS-found tree of ReLU/Sigmoid/Tanh joined by Add and Mul.
    Unlike TASO's script (fresh weights every step) the steps share weights, as an exported unrolled RNN does;
    the eight MatMuls reading one x (or one h) are the merge TASO's rules find.
    """
    n = _Net(seed)
    std = 1 / np.sqrt(hidden)
    wx = [n.randn(f"/cell/x2h.{i}", "weight", (hidden, hidden), std) for i in range(8)]
    wh = [n.randn(f"/cell/h2h.{i}", "weight", (hidden, hidden), std) for i in range(8)]
    h = "h0"
    for t in range(steps):
        s = "/cell" if t == 0 else f"/cell_{t}"
        x = f"x{t}"
        v = [n.one("Add", [n.one("MatMul", [x, wx[i]], s), n.one("MatMul", [h, wh[i]], s)], s) for i in range(8)]

        def f(op: str, a: str, s: str = s) -> str:
            return n.one(op, [a], s)

        m0 = n.one("Add", [f("Relu", v[0]), f("Sigmoid", v[3])], s)
        m1 = n.one("Add", [f("Sigmoid", v[1]), f("Tanh", v[2])], s)
        m2 = n.one("Mul", [f("Sigmoid", v[4]), f("Tanh", v[5])], s)
        m3 = n.one("Mul", [f("Sigmoid", v[6]), f("Relu", v[7])], s)
        m4 = n.one("Add", [f("Sigmoid", m1), f("Tanh", m2)], s)
        m5 = n.one("Mul", [f("Tanh", m0), f("Tanh", m3)], s)
        h = f("Tanh", n.one("Mul", [f("Tanh", m4), f("Tanh", m5)], s))
    n.rename(h, "output")
    inputs = [helper.make_tensor_value_info(f"x{t}", TensorProto.FLOAT, [batch, hidden]) for t in range(steps)]
    inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [batch, hidden]))
    return _finish(
        n,
        "nasrnn",
        inputs,
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, hidden])],
        {"steps": steps, "hidden": hidden},
    )


def gpt2_block(
    layers: int = 2,
    hidden: int = 768,
    heads: int = 12,
    seq: int | str = 128,
    batch: int | str = 1,
    positions: int = 1024,
    seed: int = 0,
) -> onnx.ModelProto:
    """HF GPT2Model's decoder stack on ``inputs_embeds`` (position embeddings, ``layers`` blocks, final LayerNorm).

    Laid out as HF's GPT-2 exports: c_attn is one fused QKV Conv1D over a (hidden, 3*hidden) weight, then a
    Split into Q/K/V (not three projections). Conv1D is addmm on the flattened input, which exports as Reshape,
    Gemm, Reshape; it is written here as MatMul + Add on the 3-D input, the form left once those reshapes fold.
    Scores are divided by sqrt(head_dim); the causal mask is applied with Where against float32's minimum (the
    slice of the ``attn.bias`` buffer folds into a constant when shapes are static and stays a Slice when they
    are not); GELU is the tanh form (gelu_new) spelt out as Pow/Mul/Add/Tanh; residuals are pre-LN.
    """
    n = _Net(seed)
    dh, static = hidden // heads, isinstance(seq, int) and isinstance(batch, int)
    x = "inputs_embeds"
    seq_len = n.one("Shape", [x], "", start=1, end=2)
    pos = n.one(
        "Range",
        [
            n.const(np.array(0, np.int64), "Range"),
            n.one("Squeeze", [seq_len], ""),
            n.const(np.array(1, np.int64), "Range"),
        ],
        "",
    )
    wpe = n.randn("/wpe", "weight", (positions, hidden), 0.1)
    x = n.one("Add", [x, n.one("Gather", [wpe, pos], "/wpe")], "")
    if static:
        mask = n.const(np.tril(np.ones((seq, seq), bool))[None, None], "Where")
        heads_shape = n.const(np.array([batch, seq, heads, dh], np.int64), "Reshape")
        merge_shape = n.const(np.array([batch, seq, hidden], np.int64), "Reshape")
    else:
        heads_shape = n.const(np.array([0, 0, heads, dh], np.int64), "Reshape")
        merge_shape = n.const(np.array([0, 0, hidden], np.int64), "Reshape")
        ends = n.one("Concat", [seq_len, seq_len], "", axis=0)
    mask_value = n.const(np.array(np.finfo(np.float32).min, np.float32), "Where")
    scale = n.const(np.array(np.sqrt(dh), np.float32), "Div")

    def ln(x: str, scope: str) -> str:
        w, b = n.randn(scope, "weight", (hidden,), 0.1, 1.0), n.randn(scope, "bias", (hidden,), 0.1)
        return n.one("LayerNormalization", [x, w, b], scope, axis=-1, epsilon=1e-5)

    def conv1d(x: str, scope: str, n_in: int, n_out: int) -> str:
        w, b = n.randn(scope, "weight", (n_in, n_out), 1 / np.sqrt(n_in)), n.randn(scope, "bias", (n_out,), 0.1)
        return n.one("Add", [n.one("MatMul", [x, w], scope), b], scope)

    for i in range(layers):
        s, a = f"/h.{i}", f"/h.{i}/attn"
        if not static:
            bias = n.tensor(f"h.{i}.attn.bias", np.tril(np.ones((positions, positions), bool))[None, None])
            starts, axes = n.const(np.array([0, 0], np.int64), "Slice"), n.const(np.array([2, 3], np.int64), "Slice")
            mask = n.one("Slice", [bias, starts, ends, axes], a)
        qkv = conv1d(ln(x, f"{s}/ln_1"), f"{a}/c_attn", hidden, 3 * hidden)
        q, k, v = n.op("Split", [qkv, n.const(np.array([hidden] * 3, np.int64), "Split")], a, 3, axis=2)
        q, k, v = (n.one("Reshape", [t, heads_shape], a) for t in (q, k, v))
        q = n.one("Transpose", [q], a, perm=[0, 2, 1, 3])
        k = n.one("Transpose", [k], a, perm=[0, 2, 3, 1])
        v = n.one("Transpose", [v], a, perm=[0, 2, 1, 3])
        w = n.one("Div", [n.one("MatMul", [q, k], a), scale], a)
        w = n.one("Softmax", [n.one("Where", [mask, w, mask_value], a)], a, axis=-1)
        ctx = n.one("Transpose", [n.one("MatMul", [w, v], a)], a, perm=[0, 2, 1, 3])
        ctx = conv1d(n.one("Reshape", [ctx, merge_shape], a), f"{a}/c_proj", hidden, hidden)
        x = n.one("Add", [ctx, x], s)
        m, act = f"{s}/mlp", f"{s}/mlp/act"
        h = conv1d(ln(x, f"{s}/ln_2"), f"{m}/c_fc", hidden, 4 * hidden)
        half = n.one("Mul", [h, n.const(np.array(0.5, np.float32), "Mul")], act)
        cube = n.one("Pow", [h, n.const(np.array(3.0, np.float32), "Pow")], act)
        inner = n.one("Add", [h, n.one("Mul", [cube, n.const(np.array(0.044715, np.float32), "Mul")], act)], act)
        inner = n.one("Mul", [inner, n.const(np.array(np.sqrt(2 / np.pi), np.float32), "Mul")], act)
        t = n.one("Add", [n.one("Tanh", [inner], act), n.const(np.array(1.0, np.float32), "Add")], act)
        h = conv1d(n.one("Mul", [half, t], act), f"{m}/c_proj", 4 * hidden, hidden)
        x = n.one("Add", [x, h], s)
    n.rename(ln(x, "/ln_f"), "last_hidden_state")
    return _finish(
        n,
        "gpt2_block",
        [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, [batch, seq, hidden])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])],
        {"layers": layers, "hidden": hidden, "heads": heads},
    )


def bert_base(layers: int = 12, seq: int | str = 128, batch: int | str = 1, seed: int = 0) -> onnx.ModelProto:
    """`bert` at BERT-base sizes: hidden 768, 12 heads, FFN 3072, vocabulary 30522, 512 positions."""
    return bert(layers, 768, 12, 3072, vocab=30522, max_len=512, seq=seq, batch=batch, seed=seed)


def half(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` in float16, as models are commonly deployed on GPUs: float initializers, inputs, outputs,
    value infos, Constant tensors and Casts to float become float16 (attributes such as LayerNorm's epsilon
    stay float, as ONNX has them)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    return m


# ---- the zoo ------------------------------------------------------------------------------------------------

LIGHT_ZOO = ("resnet50", "inception_v1", "inception_v2", "squeezenet", "densenet121", "shufflenet", "vgg19")
"""The onnx wheel's light models the zoo takes (AlexNet and ZFNet-512 add only 240-350 MB of dense layers)."""


def light_model(name: str, seed: int = 7) -> onnx.ModelProto:
    """One of the onnx wheel's light models with seeded random weights."""
    return materialize(onnx.load(str(LIGHT_DIR / f"light_{name}.onnx")), seed)


ZOO: dict[str, Callable[[], onnx.ModelProto]] = {
    **{name: partial(light_model, name) for name in LIGHT_ZOO},
    "resnext50": resnext50,
    "resnext50_dyn": partial(resnext50, batch="batch"),
    "inception_v3": inception_v3,
    "nasnet_a": nasnet_a,
    "nasnet_a_dyn": partial(nasnet_a, batch="batch"),
    "csrnet": csrnet,
    "nasrnn": nasrnn,
    "nasrnn_dyn": partial(nasrnn, batch="batch"),
    "gpt2": partial(gpt2_block, layers=2, seq=128),
    "gpt2_dyn": partial(gpt2_block, layers=2, seq="seq", batch="batch"),
    "bert_base": partial(bert_base, layers=4, seq=128),
    "bert_base_dyn": partial(bert_base, layers=4, seq="seq", batch="batch"),
    "squeezenet_fp16": lambda: half(light_model("squeezenet")),
    "bert_base_fp16": lambda: half(bert_base(layers=4, seq=128)),
}
"""Every zoo model by name: a zero-argument builder of its ModelProto (large ones are built on the fly)."""


def write(model: onnx.ModelProto, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    onnx.save_model(model, str(tmp))
    os.replace(tmp, path)


def zoo_files(names: str, folder: Path) -> Iterator[tuple[str, Path]]:
    """Each zoo model of the comma-separated ``names``, built and saved as ``folder/NAME.onnx`` just before it is
    yielded: the benches' inputs, one model on disk at a time."""
    for name in [n for n in names.split(",") if n]:
        path = folder / f"{name}.onnx"
        onnx.save_model(ZOO[name](), str(path))
        yield name, path


def main() -> int:
    write(bert(), HERE / "bert_tiny.onnx")
    print(f"wrote {HERE / 'bert_tiny.onnx'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
