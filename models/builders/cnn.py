"""Exporter-style CNNs: ResNeXt-50, Inception-v3, CSRNet, NasNet-A."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from builders.net import Net, classifier, finish, image_io


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
    n = Net(seed)
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
    classifier(n, x, cin, classes)
    return finish(
        n, "resnext50", *image_io(batch, 3, image, classes), {"groups": groups, "width_per_group": width_per_group}
    )


def _basic_conv(
    n: Net,
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


def _avg3(n: Net, x: str, scope: str) -> str:
    """F.avg_pool2d(x, 3, stride=1, padding=1): torch counts the padding (count_include_pad=1)."""
    return n.pool("AveragePool", x, scope, 3, 1, [1, 1, 1, 1], count_include_pad=1)


def _inception_a(n: Net, x: str, s: str, cin: int, pool_features: int) -> tuple[str, int]:
    b1 = _basic_conv(n, x, f"{s}/branch1x1", cin, 64, 1)
    b5 = _basic_conv(n, x, f"{s}/branch5x5_1", cin, 48, 1)
    b5 = _basic_conv(n, b5, f"{s}/branch5x5_2", 48, 64, 5, pad=2)
    b3 = _basic_conv(n, x, f"{s}/branch3x3dbl_1", cin, 64, 1)
    b3 = _basic_conv(n, b3, f"{s}/branch3x3dbl_2", 64, 96, 3, pad=1)
    b3 = _basic_conv(n, b3, f"{s}/branch3x3dbl_3", 96, 96, 3, pad=1)
    bp = _basic_conv(n, _avg3(n, x, s), f"{s}/branch_pool", cin, pool_features, 1)
    return n.one("Concat", [b1, b5, b3, bp], s, axis=1), 224 + pool_features


def _inception_b(n: Net, x: str, s: str, cin: int) -> tuple[str, int]:
    b3 = _basic_conv(n, x, f"{s}/branch3x3", cin, 384, 3, stride=2)
    bd = _basic_conv(n, x, f"{s}/branch3x3dbl_1", cin, 64, 1)
    bd = _basic_conv(n, bd, f"{s}/branch3x3dbl_2", 64, 96, 3, pad=1)
    bd = _basic_conv(n, bd, f"{s}/branch3x3dbl_3", 96, 96, 3, stride=2)
    bp = n.pool("MaxPool", x, s, 3, 2, [0, 0, 0, 0], dilations=[1, 1])
    return n.one("Concat", [b3, bd, bp], s, axis=1), 480 + cin


def _inception_c(n: Net, x: str, s: str, cin: int, c7: int) -> tuple[str, int]:
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


def _inception_d(n: Net, x: str, s: str, cin: int) -> tuple[str, int]:
    b3 = _basic_conv(n, x, f"{s}/branch3x3_1", cin, 192, 1)
    b3 = _basic_conv(n, b3, f"{s}/branch3x3_2", 192, 320, 3, stride=2)
    b7 = _basic_conv(n, x, f"{s}/branch7x7x3_1", cin, 192, 1)
    b7 = _basic_conv(n, b7, f"{s}/branch7x7x3_2", 192, 192, (1, 7), pad=(0, 3))
    b7 = _basic_conv(n, b7, f"{s}/branch7x7x3_3", 192, 192, (7, 1), pad=(3, 0))
    b7 = _basic_conv(n, b7, f"{s}/branch7x7x3_4", 192, 192, 3, stride=2)
    bp = n.pool("MaxPool", x, s, 3, 2, [0, 0, 0, 0], dilations=[1, 1])
    return n.one("Concat", [b3, b7, bp], s, axis=1), 512 + cin


def _inception_e(n: Net, x: str, s: str, cin: int) -> tuple[str, int]:
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
    n = Net(seed)
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
    classifier(n, x, c, classes)
    return finish(n, "inception_v3", *image_io(batch, 3, image, classes), {"image": image})


def csrnet(batch: int | str = 1, image: int = 256, seed: int = 0) -> onnx.ModelProto:
    """CSRNet (crowd counting, CVPR'18): VGG-16's first ten convs, then six 3x3 convs with dilation 2 at 1/8
    resolution and a 1x1 conv to a density map. The dilated back-end is where PET reported its largest gain."""
    n = Net(seed)
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
    return finish(
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


def _sep_conv(n: Net, x: str, scope: str, c: int, k: int, stride: int, size: int) -> str:
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


def _factorized_reduction(n: Net, x: str, scope: str, cin: int, cout: int) -> str:
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
    n: Net, scope: str, reduction: bool, cur: tuple[str, int, int], prev: tuple[str, int, int], f: int
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
    n = Net(seed, "tf")
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
    return finish(
        n,
        "nasnet_a",
        [helper.make_tensor_value_info("images:0", TensorProto.FLOAT, [batch, image, image, 3])],
        [helper.make_tensor_value_info("logits:0", TensorProto.FLOAT, [batch, classes])],
        {"cells": cells, "filters": filters},
    )
