"""Exporter-style sequence models: TASO's NasRNN cell and a GPT-2 decoder stack."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from builders.net import Net, finish


def nasrnn(steps: int = 5, hidden: int = 512, batch: int | str = 1, seed: int = 0) -> onnx.ModelProto:
    """TASO's NasRNN benchmark cell, unrolled over ``steps`` inputs from the state ``h0``.

    Each step: eight (x @ Wx_i + h @ Wh_i), then the NAS-found tree of ReLU/Sigmoid/Tanh joined by Add and Mul.
    Unlike TASO's script (fresh weights every step) the steps share weights, as an exported unrolled RNN does;
    the eight MatMuls reading one x (or one h) are the merge TASO's rules find.
    """
    n = Net(seed)
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
    return finish(
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
    n = Net(seed)
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
    return finish(
        n,
        "gpt2_block",
        [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, [batch, seq, hidden])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])],
        {"layers": layers, "hidden": hidden, "heads": heads},
    )
