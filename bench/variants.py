"""Hand-applied TASO-style variants of a model, for checking that the cost model ranks rewrites right.

`merge_sibling_convs` is the rewrite baselines.md measured: convolutions that read one tensor (same stride,
dilation, group 1, and pads that agree once smaller kernels are zero-padded to the largest) become one Conv
over concatenated, enlarged kernels, followed by Split. When every sibling feeds a single Relu, the Relu is
applied once before the Split (relu commutes with split). Weights are combined here, ahead of time.
With ``equal_only`` a group is cut into sub-groups of equal output channels first (onnxruntime's CUDA Split
takes a cheaper path when every part has one size). `fold_batchnorm` folds each inference BatchNormalization
into the Conv before it, as onnxruntime does itself, so that the merge sees the convs BN hid.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from taso import ops
from taso.ir import Graph, Node, TensorType, WeightData, eliminate_dead, make_attrs
from taso.verify import per_channel


def _enlarged(w: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    ph, pw = (size[0] - w.shape[2]) // 2, (size[1] - w.shape[3]) // 2
    return np.pad(w, ((0, 0), (0, 0), (ph, size[0] - w.shape[2] - ph), (pw, size[1] - w.shape[3] - pw)))


def _mergeable(g: Graph, convs: list[Node]) -> tuple[int, int] | None:
    """The common kernel size when all ``convs`` can be merged, else None."""
    attrs = [c.attr for c in convs]
    if any(a["group"] != 1 or a["strides"] != attrs[0]["strides"] or a["dilations"] != (1, 1) for a in attrs):
        return None
    if any(c.inputs[1] not in g.data or (len(c.inputs) > 2 and c.inputs[2] not in g.data) for c in convs):
        return None
    kh = max(a["kernel_shape"][0] for a in attrs)
    kw = max(a["kernel_shape"][1] for a in attrs)
    effective = set()
    for a in attrs:
        dh, dw = kh - a["kernel_shape"][0], kw - a["kernel_shape"][1]
        if dh % 2 or dw % 2:
            return None
        p = a["pads"]
        effective.add((p[0] + dh // 2, p[1] + dw // 2, p[2] + dh // 2, p[3] + dw // 2))
    return (kh, kw) if len(effective) == 1 else None


def fold_batchnorm(g: Graph) -> tuple[Graph, int]:
    """``g`` with each BatchNormalization whose input is a Conv's only use folded into that Conv's weights."""
    nodes = list(g.nodes)
    types, data, weights = dict(g.types), dict(g.data), list(g.weights)
    folded = 0
    for bn in g.nodes:
        conv = g.producers.get(bn.inputs[0]) if bn.op == "BatchNormalization" else None
        if conv is None or conv.op != "Conv":
            continue
        if len(g.consumers[conv.outputs[0]]) != 1 or conv.outputs[0] in g.outputs:
            continue
        if any(v not in g.data for v in (*bn.inputs[1:], *conv.inputs[1:])):
            continue
        scale, beta, mean, var = (g.data[v].array.astype(np.float64) for v in bn.inputs[1:])
        w = g.data[conv.inputs[1]].array
        b = g.data[conv.inputs[2]].array.astype(np.float64) if len(conv.inputs) > 2 else np.zeros(w.shape[0])
        s = scale / np.sqrt(var + float(bn.attr.get("epsilon", 1e-5)))
        tag = f"bnfold{folded}"
        new_w = (w.astype(np.float64) * s.reshape(-1, 1, 1, 1)).astype(w.dtype)
        new_b = ((b - mean) * s + beta).astype(w.dtype)
        for name, arr in ((f"{tag}.w", new_w), (f"{tag}.b", new_b)):
            data[name] = WeightData(arr)
            types[name] = TensorType(str(arr.dtype), arr.shape)
            weights.append(name)
        j = nodes.index(conv)
        nodes[j] = Node("Conv", (conv.inputs[0], f"{tag}.w", f"{tag}.b"), bn.outputs, conv.attrs, name=f"{tag}.conv")
        nodes.remove(bn)
        folded += 1
    if not folded:
        return g, 0
    return eliminate_dead(replace(g, nodes=tuple(nodes), types=types, data=data, weights=tuple(weights))), folded


def merge_sibling_convs(g: Graph, equal_only: bool = False) -> tuple[Graph, int]:
    """``g`` with every mergeable group of sibling convs merged; returns the graph and how many groups."""
    groups: dict[tuple, list[Node]] = {}
    for n in g.nodes:
        if n.op == "Conv" and not n.is_opaque:
            channels = g.types[n.outputs[0]].shape[1] if equal_only else None
            groups.setdefault((n.inputs[0], channels), []).append(n)
    nodes = list(g.nodes)
    types, data, weights = dict(g.types), dict(g.data), list(g.weights)
    merged = 0
    for (x, _), convs in groups.items():
        if len(convs) < 2 or (size := _mergeable(g, convs)) is None:
            continue
        relus = [g.consumers.get(c.outputs[0], ()) for c in convs]
        fuse_relu = all(
            len(r) == 1 and r[0].op == "Relu" and c.outputs[0] not in g.outputs for r, c in zip(relus, convs)
        )
        tag = f"merged{merged}"
        w = np.concatenate([_enlarged(g.data[c.inputs[1]].array, size) for c in convs])
        b = np.concatenate(
            [
                g.data[c.inputs[2]].array
                if len(c.inputs) > 2
                else np.zeros(g.data[c.inputs[1]].array.shape[0], w.dtype)
                for c in convs
            ]
        )
        a0 = convs[0].attr
        dh, dw = size[0] - a0["kernel_shape"][0], size[1] - a0["kernel_shape"][1]
        p = a0["pads"]
        pads = (p[0] + dh // 2, p[1] + dw // 2, p[2] + dh // 2, p[3] + dw // 2)
        attrs = {**a0, "kernel_shape": size, "pads": pads}
        sizes = np.array([g.types[c.outputs[0]].shape[1] for c in convs], np.int64)
        out_t = g.types[convs[0].outputs[0]]
        merged_t = TensorType(out_t.dtype, (out_t.shape[0], int(sizes.sum()), *out_t.shape[2:]))
        for name, arr in ((f"{tag}.w", w), (f"{tag}.b", b), (f"{tag}.sizes", sizes)):
            data[name] = WeightData(arr)
            types[name] = TensorType(str(arr.dtype), arr.shape)
            weights.append(name)
        new = [Node("Conv", (x, f"{tag}.w", f"{tag}.b"), (f"{tag}.y",), make_attrs(attrs), name=f"{tag}.conv")]
        types[f"{tag}.y"] = merged_t
        split_in = f"{tag}.y"
        finals = [c.outputs[0] for c in convs]
        if fuse_relu:
            new.append(Node("Relu", (split_in,), (f"{tag}.r",), name=f"{tag}.relu"))
            types[f"{tag}.r"] = merged_t
            split_in = f"{tag}.r"
            finals = [r[0].outputs[0] for r in relus]
        new.append(
            Node("Split", (split_in, f"{tag}.sizes"), tuple(finals), make_attrs({"axis": 1}), name=f"{tag}.split")
        )
        dropped = {id(c) for c in convs} | ({id(r[0]) for r in relus} if fuse_relu else set())
        first = min(nodes.index(c) for c in convs)
        nodes = (
            [n for n in nodes[:first] if id(n) not in dropped]
            + new
            + [n for n in nodes[first:] if id(n) not in dropped]
        )
        merged += 1
    if not merged:
        return g, 0
    return eliminate_dead(replace(g, nodes=tuple(nodes), types=types, data=data, weights=tuple(weights))), merged


def densify_groups(g: Graph, depthwise: bool = False) -> tuple[Graph, int]:
    """``g`` with each grouped Conv made a plain one over a block-diagonal kernel (zeros between the groups).

    The dense conv does ``group`` times the arithmetic, but cuDNN may run it faster than the grouped kernel at
    batch 1. Depthwise convs (one channel per group) are left alone unless ``depthwise``.
    """
    nodes = list(g.nodes)
    types, data, weights = dict(g.types), dict(g.data), list(g.weights)
    done = 0
    for i, n in enumerate(g.nodes):
        if n.op != "Conv" or n.attr.get("group", 1) == 1 or n.inputs[1] not in g.data:
            continue
        w = g.data[n.inputs[1]].array
        groups, per = n.attr["group"], w.shape[1]
        if per == 1 and not depthwise:
            continue
        (dense,) = ops.get("BlockDiagonal").run([w], {"group": groups})
        name = f"dense{done}.w"
        data[name] = WeightData(dense)
        types[name] = TensorType(str(dense.dtype), dense.shape)
        weights.append(name)
        attrs = make_attrs({**n.attr, "group": 1})
        nodes[i] = Node("Conv", (n.inputs[0], name, *n.inputs[2:]), n.outputs, attrs, name=f"dense{done}.conv")
        done += 1
    if not done:
        return g, 0
    return eliminate_dead(replace(g, nodes=tuple(nodes), types=types, data=data, weights=tuple(weights))), done


def _per_channel(g: Graph, value: str, over: str) -> np.ndarray | None:
    """The weight ``value`` as one number per channel, when it broadcasts that way over ``over``."""
    if value not in g.data or not per_channel(g.types[over], g.types[value]):
        return None
    return g.data[value].array.reshape(-1).astype(np.float64)


def fold_affine_into_batchnorm(g: Graph) -> tuple[Graph, int]:
    """``g`` with each per-channel Mul and Add of constants after a BatchNormalization folded into its scale and
    bias (Caffe2's exporters put an affine Mul/Add after every BN; onnxruntime folds them only after a Conv)."""
    nodes = list(g.nodes)
    types, data, weights = dict(g.types), dict(g.data), list(g.weights)
    done = 0
    for bn in g.nodes:
        if bn.op != "BatchNormalization" or any(v not in g.data for v in bn.inputs[1:]):
            continue
        scale, beta = (g.data[v].array.astype(np.float64) for v in bn.inputs[1:3])
        last, eaten = bn, []
        while True:
            uses = g.consumers.get(last.outputs[0], ())
            if len(uses) != 1 or last.outputs[0] in g.outputs or uses[0].op not in ("Mul", "Add"):
                break
            nxt = uses[0]
            other = nxt.inputs[1] if nxt.inputs[0] == last.outputs[0] else nxt.inputs[0]
            c = _per_channel(g, other, bn.outputs[0])
            if c is None or g.types[nxt.outputs[0]].shape != g.types[bn.outputs[0]].shape:
                break
            if nxt.op == "Mul":
                scale, beta = scale * c, beta * c
            else:
                beta = beta + c
            last, eaten = nxt, [*eaten, nxt]
        if not eaten:
            continue
        dtype = g.data[bn.inputs[1]].array.dtype
        names = []
        for part, arr in (("scale", scale), ("bias", beta)):
            name = f"bnaffine{done}.{part}"
            data[name] = WeightData(arr.astype(dtype))
            types[name] = TensorType(str(dtype), arr.shape)
            weights.append(name)
            names.append(name)
        j = nodes.index(bn)
        nodes[j] = Node(bn.op, (bn.inputs[0], *names, *bn.inputs[3:]), last.outputs, bn.attrs, name=f"bnaffine{done}")
        nodes = [n for n in nodes if all(n is not e for e in eaten)]
        done += 1
    if not done:
        return g, 0
    return eliminate_dead(replace(g, nodes=tuple(nodes), types=types, data=data, weights=tuple(weights))), done
