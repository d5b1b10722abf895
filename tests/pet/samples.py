"""The smallest models the mutants apply to, run in float64 with numpy, and one sample per mutant kind."""

from __future__ import annotations

import numpy as np

from taso import ops, pet
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs

CONV = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}


def graph(x: tuple[int, ...], layers: list[tuple[str, dict[str, tuple[int, ...]], dict]], seed: int = 0) -> Graph:
    """Sibling ops all reading input ``x``, each ``(op, weight shapes by role, attrs)`` with random float weights
    (as data): the smallest models the mutants apply to. Roles: ``w`` and ``b`` for Conv, ``w`` for MatMul."""
    rng = np.random.default_rng(seed)
    types = {"x": TensorType("float32", x)}
    nodes, data = [], {}
    for i, (op, shapes, attrs) in enumerate(layers):
        names = ["x"]
        for role, shape in shapes.items():
            names.append(f"{role}{i}")
            types[names[-1]] = TensorType("float32", shape)
            data[names[-1]] = WeightData(rng.standard_normal(shape).astype(np.float32))
        full = {**CONV, "kernel_shape": shapes["w"][2:], **attrs} if op == "Conv" else attrs
        types[f"y{i}"] = ops.infer(op, [types[v] for v in names], full)[0]
        nodes.append(Node(op, tuple(names), (f"y{i}",), make_attrs(full), name=f"{op.lower()}{i}"))
    return Graph(tuple(nodes), ("x",), tuple(n.outputs[0] for n in nodes), types, tuple(data), data)


def conv_graph(x: tuple[int, ...], w: tuple[int, ...], bias: bool, **attrs: object) -> Graph:
    return graph(x, [("Conv", {"w": w, **({"b": (w[0],)} if bias else {})}, attrs)])


def run(g: Graph, x: np.ndarray) -> list[np.ndarray]:
    """``g``'s outputs in float64 with numpy (the catalogue's reference semantics)."""
    env = {
        "x": x,
        **{w: d.array.astype(np.float64) if d.array.dtype.kind == "f" else d.array for w, d in g.data.items()},
    }
    for n in g.nodes:
        env.update(zip(n.outputs, ops.get(n.op).run([env[v] for v in n.inputs], n.attr, len(n.outputs))))
    return [env[o] for o in g.outputs]


def mutated(g: Graph, kind: str) -> tuple[Graph, pet.Plan] | None:
    """``kind``'s corrected mutant of ``g``'s nodes (all of them: one node, or siblings) and its plan."""
    found = [h for name, h in pet.mutations(g) if name.startswith(f"{pet.PREFIX}{kind} ")]
    if not found:
        return None
    fix = pet.plan(kind, g.nodes, g.types)
    assert fix is not None
    return found[0], fix


def assert_equal_on_random_inputs(g: Graph, h: Graph, seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal(g.types["x"].shape)
    for got, want in zip(run(h, x), run(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


SAMPLES = {
    "batch-to-height": conv_graph((3, 4, 8, 10), (5, 4, 3, 3), True, pads=(1, 1, 1, 1)),
    "batch-to-width": conv_graph((3, 4, 8, 10), (5, 4, 3, 3), True),  # 'valid': through pad-conv-slice
    "dilation-to-batch": conv_graph((3, 4, 8, 10), (5, 4, 3, 3), True, dilations=(2, 2), pads=(2, 2, 2, 2)),
    "stride-to-channels": conv_graph((2, 3, 12, 12), (4, 3, 7, 7), True, strides=(2, 2), pads=(3, 3, 3, 3)),
    "merge-convs": graph(
        (2, 4, 8, 8),
        [
            ("Conv", {"w": (3, 4, 1, 3)}, {"pads": (0, 1, 0, 1)}),
            ("Conv", {"w": (5, 4, 3, 1)}, {"pads": (1, 0, 1, 0)}),
            ("Conv", {"w": (2, 4, 1, 1)}, {}),
        ],
    ),
    "batch-to-rows": graph((2, 6, 8), [("MatMul", {"w": (8, 5)}, {})]),
    "merge-matmuls": graph((2, 6, 8), [("MatMul", {"w": (8, 5)}, {}), ("MatMul", {"w": (8, 3)}, {})]),
}
