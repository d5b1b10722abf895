"""Builders for the model zoo, written with onnx helpers so no torch is needed at test time.

    python models/build.py            # (re)writes the bundled models next to this file

Weights are seeded random tensors, never all-equal constants: equal weights make wrong rewrites look right.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_models() -> list[Path]:
    """The structure-only models that ship inside the onnx wheel."""
    return sorted(LIGHT_DIR.glob("light_*.onnx"))


def materialize(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace ConstantOfShape weight stand-ins (fed by constant shapes) with seeded random initializers.

    Scale is 1/sqrt(fan-in) so activations stay in range through 100+ layers; BatchNorm variances stay positive.
    """
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    keep, new_inits = [], []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            name = node.output[0]
            if "var" in name or "_s_" in name or "scale" in name or name.endswith("_s_0"):
                value = rng.uniform(0.5, 1.5, shape)
            else:
                value = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
            new_inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in g.node for i in n.input}
    kept_inits = [t for t in g.initializer if t.name in used] + new_inits
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


def write(model: onnx.ModelProto, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    onnx.save_model(model, str(tmp))
    os.replace(tmp, path)


def main() -> int:
    write(bert(), HERE / "bert_tiny.onnx")
    print(f"wrote {HERE / 'bert_tiny.onnx'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
