"""Builders for the model zoo, written with onnx helpers so no torch is needed at test time.

    python models/build.py            # (re)writes the bundled models next to this file

`ZOO` maps every zoo model's name to a zero-argument builder: the onnx wheel's light models with materialized
weights, and the structures TASO and PET were evaluated on (ResNeXt-50, NasNet-A, NasRNN, Inception-v3, BERT-base,
a GPT-2 decoder), named as their usual exporters name things. Large models are built on the fly, never committed.
The builders live in `builders/`, one family per module; this module gathers them, and is what the tests and
benches import.

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

from builders.bert import bert, bert_base
from builders.cnn import csrnet, inception_v3, nasnet_a, resnext50
from builders.light import LIGHT_DIR, light_models, materialize, weight_count
from builders.seq import gpt2_block, nasrnn

__all__ = [
    "LIGHT_DIR",
    "LIGHT_ZOO",
    "ZOO",
    "bert",
    "bert_base",
    "control_flow",
    "csrnet",
    "gpt2_block",
    "half",
    "inception_v3",
    "light_model",
    "light_models",
    "materialize",
    "nasnet_a",
    "nasrnn",
    "resnext50",
    "weight_count",
    "write",
    "zoo_files",
]

HERE = Path(__file__).resolve().parent


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
