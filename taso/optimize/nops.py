"""Nodes that hand on their input unchanged, dropped; views of views made one view.

Exporters write padding and cropping for every input size: Swin's window attention pads H and W up to a
multiple of the window and crops the result back (``F.pad(x, (0, 0, 0, pad_r, 0, pad_b))``, ``x[:, :H, :W]``).
Once `taso.shapefold` has folded the pad arithmetic over the static H and W, each Pad pads by zeros and each
crop takes whole axes, yet each still runs as a copy kernel (Swin-T: 15 Pads and 24 Slices; onnxruntime drops
neither). Its last stage's windows are 1 x 1, and there a window Transpose only moves axes of size 1: the
memory order is unchanged, so it is a Reshape, which onnxruntime runs as a view, and the Reshapes on either
side of it make one Reshape, or none where its output has its input's shape.

Every test reads sizes from the IR's types and only trusts an int, never a dim param: a node is dropped only
where it hands on its input at every size of the dynamic dims (a crop to 56 of a dynamic axis is a crop).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from taso import onnx as onnx_io
from taso.ir import Dim, Graph, Node, TensorType, WeightData, eliminate_dead, fresh_names, lint, make_attrs
from taso.ops.select import slice_ranges

WHOLE = 2**62
"""A Slice end at least this large takes the rest of any axis (torch writes INT64_MAX): no tensor is longer."""


def drop_nops(g: Graph) -> Graph:
    """``g`` with its identity nodes dropped (readers read the input instead), each Transpose that only moves
    size-1 axes made a Reshape, and each Reshape of a Reshape reading the first one's input; ``g`` itself where
    nothing applies."""
    keep = set(g.outputs) | set(g.inputs) | {v for n in g.nodes for v in n.implicit}
    fresh = fresh_names(g.values(), "nop_")
    data, types, weights = dict(g.data), dict(g.types), list(g.weights)
    alias: dict[str, str] = {}
    made: dict[str, Node] = {}  # value -> the node (as rewritten here) that makes it
    nodes: list[Node] = []
    for n in g.nodes:
        if any(i in alias for i in n.inputs):
            n = replace(n, inputs=tuple(alias.get(i, i) for i in n.inputs))
        if n.domain or n.implicit or len(n.outputs) != 1 or n.outputs[0] in keep or not n.inputs:
            nodes.append(n)
            continue
        if n.op == "Transpose":
            target = _transpose_as_reshape(n, types)
            if target is not None:
                name = next(fresh)
                data[name] = WeightData(np.array(target, np.int64))
                types[name] = TensorType("int64", (len(target),))
                weights.append(name)
                n = Node("Reshape", (n.inputs[0], name), n.outputs, (("allowzero", 0),), name=n.name)
        if n.op == "Reshape":
            n = _skip_reshape(n, made, data, types)
        if n.op == "Slice":
            merged = _merged_slice(n, made, g, keep, data, types)
            if merged is not None and not n.is_opaque:
                ranges = sorted(zip(merged[2], merged[0], merged[1], merged[3]))
                attrs = {k: tuple(r[i] for r in ranges) for i, k in enumerate(("axes", "starts", "ends", "steps"))}
                n = replace(n, inputs=(made[n.inputs[0]].inputs[0],), attrs=make_attrs(attrs))
            elif merged is not None:
                names = [next(fresh) for _ in merged]
                for name, values in zip(names, merged):
                    data[name] = WeightData(np.array(values, np.int64))
                    types[name] = TensorType("int64", (len(values),))
                weights += names
                n = replace(n, inputs=(made[n.inputs[0]].inputs[0], *names))
        handed = _handed_on(n, data, types)
        if handed is not None:
            alias[n.outputs[0]] = handed
            continue
        made[n.outputs[0]] = n
        nodes.append(n)
    if not alias and all(a is b for a, b in zip(nodes, g.nodes)):
        return g
    return lint(eliminate_dead(replace(g, nodes=tuple(nodes), weights=tuple(weights), data=data, types=types)))


def _shape(types: Mapping[str, TensorType], value: str) -> tuple[Dim, ...] | None:
    t = types.get(value)
    return None if t is None else t.shape


def _constant(data: Mapping[str, WeightData], n: Node, i: int) -> list[int] | None:
    """Input ``i`` of ``n`` as a list of ints, if it is an integer initializer."""
    if i >= len(n.inputs) or n.inputs[i] not in data:
        return None
    array = data[n.inputs[i]].array
    return [int(v) for v in array.ravel()] if array.dtype.kind in "iu" else None


def _handed_on(n: Node, data: Mapping[str, WeightData], types: Mapping[str, TensorType]) -> str | None:
    """The input ``n`` outputs unchanged at every size, if there is one."""
    if n.op in ("Mul", "Div") and len(n.inputs) == 2:
        for k in (0, 1) if n.op == "Mul" else (0,):
            if _unit_factor(data, n.inputs[1 - k], _shape(types, n.inputs[k])):
                return n.inputs[k]
        return None
    return n.inputs[0] if _hands_on(n, data, types) else None


def _unit_factor(data: Mapping[str, WeightData], value: str, shape: tuple[Dim, ...] | None) -> bool:
    """Whether ``value`` is a constant 1 that broadcasts to no wider than ``shape``: a product with it, or a
    quotient by it, is the other operand bit for bit (IEEE multiplication and division by one are exact; a NaN
    stays a NaN, -0 stays -0). torch's exporters scale both query and key by the square root of an attention
    scale of 1 (T5, TorchScript)."""
    if value not in data or shape is None:
        return False
    array = data[value].array
    return array.ndim <= len(shape) and array.size == 1 and array.dtype.kind in "fiu" and bool(array.ravel()[0] == 1)


def _hands_on(n: Node, data: Mapping[str, WeightData], types: Mapping[str, TensorType]) -> bool:
    """Whether ``n``'s output is its first input at every size."""
    if n.op == "Identity":
        return True
    if n.op == "Transpose":
        perm = onnx_io.int_attrs(n).get("perm")
        return perm is not None and list(perm) == sorted(perm)  # type: ignore[arg-type]
    if n.op == "Pad":  # zero pads, whatever the mode; the pads attribute of opsets before 11 is not read
        pads = _constant(data, n, 1)
        return pads is not None and not any(pads)
    if n.op == "Slice":
        return _whole_slice(n, data, _shape(types, n.inputs[0]))
    if n.op == "Reshape":
        return _same_shape(n, data, _shape(types, n.inputs[0]))
    return False


def _whole_slice(n: Node, data: Mapping[str, WeightData], shape: tuple[Dim, ...] | None) -> bool:
    """A Slice that takes every element of each axis it names: step 1 from the start to past the end, where
    the end is read against a static size (or is past any size)."""
    params = _slice_axes(n, data, len(shape)) if shape is not None else None
    if params is None:
        return False
    for start, end, axis, step in zip(*params):
        size = shape[axis]  # type: ignore[index]
        if step != 1:
            return False
        if isinstance(size, int):
            start, end = (start + size if start < 0 else start), (end + size if end < 0 else end)
            if min(max(start, 0), size) != 0 or min(max(end, 0), size) != size:
                return False
        elif start != 0 or end < WHOLE:  # a dim param: only the whole range is whole at every size
            return False
    return True


def _slice_axes(n: Node, data: Mapping[str, WeightData], rank: int) -> list[list[int]] | None:
    """Slice ``n``'s starts, ends, axes (as non-negative axes) and steps, where all are integer initializers (a
    catalogue Slice holds them as attributes)."""
    if not n.is_opaque:
        return slice_ranges(n.attr)
    starts, ends = _constant(data, n, 1), _constant(data, n, 2)
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = _constant(data, n, 3) if len(n.inputs) > 3 and n.inputs[3] else list(range(len(starts)))
    steps = _constant(data, n, 4) if len(n.inputs) > 4 and n.inputs[4] else [1] * len(starts)
    if axes is None or steps is None or len(axes) != len(starts) or len(steps) != len(starts):
        return None
    if not all(-rank <= a < rank for a in axes):
        return None
    return [starts, ends, [a % rank for a in axes], steps]


def _merged_slice(
    n: Node,
    made: Mapping[str, Node],
    g: Graph,
    keep: set[str],
    data: Mapping[str, WeightData],
    types: Mapping[str, TensorType],
) -> list[list[int]] | None:
    """The starts, ends, axes and steps of one Slice that does what Slice ``n`` of a Slice's output does, where
    they cut different axes (each axis is clamped against its own size, which the other Slice leaves alone)
    and every reader of the first Slice is such a Slice, so the first one goes (Swin's patch merging,
    ``x[:, 0::2, 1::2]``: two Slices each)."""
    first = made.get(n.inputs[0])
    shape = _shape(types, first.inputs[0]) if first is not None else None
    if first is None or first.op != "Slice" or first.domain or shape is None or first.outputs[0] in keep:
        return None
    if first.is_opaque and not n.is_opaque:  # the catalogue form would claim what import refused (an empty range)
        return None
    outer = _slice_axes(first, data, len(shape))
    if outer is None:
        return None
    for reader in g.consumers.get(first.outputs[0], ()):
        inner = _slice_axes(reader, data, len(shape)) if reader.op == "Slice" and not reader.domain else None
        if inner is None or reader.inputs[0] != first.outputs[0] or set(inner[2]) & set(outer[2]):
            return None
    inner = _slice_axes(n, data, len(shape))
    return None if inner is None else [a + b for a, b in zip(outer, inner)]


def _target(n: Node, data: Mapping[str, WeightData]) -> list[Dim | None] | None:
    """Reshape ``n``'s constant target with each copied entry (0 without allowzero) as None."""
    target = _constant(data, n, 1)
    if target is None:
        return None
    return [None if d == 0 and not onnx_io.int_attrs(n).get("allowzero") else d for d in target]


def _same_shape(n: Node, data: Mapping[str, WeightData], shape: tuple[Dim, ...] | None) -> bool:
    """A Reshape whose output has its input's shape at every size: each entry copies the input's dim (0) or
    names its static size, and one -1 at most stands for the one dim left."""
    target = _target(n, data)
    if target is None or shape is None or len(target) != len(shape):
        return False
    rest = [k for k, (d, s) in enumerate(zip(target, shape)) if d is not None and d != s]
    return not rest or (len(rest) == 1 and target[rest[0]] == -1 and 0 not in shape)


def _skip_reshape(
    n: Node, made: Mapping[str, Node], data: Mapping[str, WeightData], types: Mapping[str, TensorType]
) -> Node:
    """Reshape ``n`` of a Reshape's output as a Reshape of that Reshape's input, where ``n``'s target says the
    same of both: an entry that copies a dim (0) copies one that the first Reshape copied from its input, or
    names a static size both share; other entries are sizes or -1, read from the element count, which a
    Reshape keeps."""
    first = made.get(n.inputs[0])
    if first is None or first.op != "Reshape" or first.domain:
        return n
    target, before = _target(n, data), _target(first, data)
    inner = _shape(types, first.inputs[0])
    if target is None or before is None or inner is None:
        return n
    for k, d in enumerate(target):
        if d is None and not (
            k < len(before) and k < len(inner) and (before[k] is None or (before[k] == inner[k] and before[k] != -1))
        ):
            return n
    return replace(n, inputs=(first.inputs[0], n.inputs[1]))


def _transpose_as_reshape(n: Node, types: Mapping[str, TensorType]) -> list[int] | None:
    """The Reshape target that does what Transpose ``n`` does, where it moves only axes of static size 1 (the
    others keep their order, so the memory order is unchanged): each dynamic dim copied at its own index (0),
    or one dynamic dim that moves as -1 where nothing is copied (beside a 0, -1 cannot be inferred on an empty
    tensor, which the Transpose runs on)."""
    perm = onnx_io.int_attrs(n).get("perm")
    shape = _shape(types, n.inputs[0])
    if not isinstance(perm, tuple | list) or shape is None or len(perm) != len(shape) or list(perm) == sorted(perm):
        return None
    moved = [p for p in perm if shape[p] != 1]
    if moved != sorted(moved) or 0 in shape:
        return None
    target = [shape[p] if isinstance(shape[p], int) else (0 if p == k else -1) for k, p in enumerate(perm)]
    if target.count(-1) > 1 or (-1 in target and 0 in target):
        return None
    return target  # type: ignore[return-value]
