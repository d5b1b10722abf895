"""What the exporter-style builders share: a graph under construction with seeded weights and exporter-style
names (torch.onnx or tf2onnx), and the model around it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LEAVES = {
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
TF_LABELS = {
    "Conv": "Conv2D",
    "BatchNormalization": "FusedBatchNormV3",
    "Add": "add",
    "Concat": "concat",
    "AveragePool": "AvgPool",
    "Slice": "strided_slice",
    "ReduceMean": "Mean",
    "Transpose": "transpose",
}


class Net:
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
        self.leaf = LEAVES[style]
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: set[str] = set()
        self.consts: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def op(
        self, op_type: str, inputs: list[str], scope: str, outputs: int = 1, label: str | None = None, **attrs: object
    ) -> list[str]:
        """Append a node named ``scope/label`` (made unique with ``_1``, ``_2`` as exporters do)."""
        default = TF_LABELS.get(op_type, op_type) if self.style == "tf" else op_type
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


def finish(
    n: Net,
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


def image_io(batch: int | str, channels: int, size: int, classes: int) -> tuple[list, list]:
    return (
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, channels, size, size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])],
    )


def classifier(n: Net, x: str, channels: int, classes: int) -> str:
    """torchvision's head: global average pool, flatten, fc."""
    x = n.one("GlobalAveragePool", [x], "/avgpool")
    x = n.one("Flatten", [x], "", axis=1)
    return n.rename(n.linear(x, "/fc", channels, classes), "output")
