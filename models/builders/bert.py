"""A BERT-style encoder, named as the torch exporter names things."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


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

        def add_norm(y: str, residual: str, name: str, p: str = p) -> str:
            """The residual sum and the LayerNorm after it (BERT is post-norm)."""
            added = b.one("Add", [y, residual], f"{p}.{name}.residual")
            w, bias = b.weight(f"{p}.{name}.ln.w", (hidden,), 0.1), b.weight(f"{p}.{name}.ln.b", (hidden,), 0.1)
            return b.one("LayerNormalization", [added, w, bias], f"{p}.{name}.ln", axis=-1, epsilon=1e-12)

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
        x = add_norm(a, x, "attn")
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
        x = add_norm(f, x, "ffn")
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


def bert_base(layers: int = 12, seq: int | str = 128, batch: int | str = 1, seed: int = 0) -> onnx.ModelProto:
    """`bert` at BERT-base sizes: hidden 768, 12 heads, FFN 3072, vocabulary 30522, 512 positions."""
    return bert(layers, 768, 12, 3072, vocab=30522, max_len=512, seq=seq, batch=batch, seed=seed)
