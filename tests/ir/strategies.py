"""Random well-typed catalogue graphs: the IR's property tests draw from them."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from taso import ops
from taso.ir import Graph, Node, TensorType, WeightData, lint, make_attrs

_FORMS = [
    ("Relu", 1, {}),
    ("Tanh", 1, {}),
    ("Add", 2, {}),
    ("Mul", 2, {}),
    ("MatMul", 2, {}),
    ("Transpose", 1, {"perm": (1, 0)}),
    ("Concat", 2, {"axis": 1}),
    ("Concat", 2, {"axis": 0}),
    ("Gemm", 2, {"alpha": 0.5, "beta": 1.0, "transA": 0, "transB": 1}),
]


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    """Random well-typed catalogue graphs over 2-D inputs, including odd value names and a Split."""
    n_in = draw(st.integers(1, 3))
    dims = draw(st.lists(st.sampled_from([2, 3, 4]), min_size=2, max_size=2))
    names = [draw(st.sampled_from(["x", "w", "in/0", "a b", "t.1", "é"])) + str(i) for i in range(n_in)]
    types = {n: TensorType("float32", (dims[0], dims[0]) if i else tuple(dims)) for i, n in enumerate(names)}
    weight = draw(st.booleans()) and n_in > 1
    weights = (names[-1],) if weight else ()
    inputs = tuple(n for n in names if n not in weights)
    values, nodes = list(names), []
    for k in range(draw(st.integers(1, 6))):
        op, arity, attrs = draw(st.sampled_from(_FORMS))
        args = [draw(st.sampled_from(values)) for _ in range(arity)]
        try:
            (out_t,) = ops.infer(op, [types[a] for a in args], attrs)
        except ops.OpError:
            continue
        out = f"v{k}"
        types[out] = out_t
        nodes.append(Node(op, tuple(args), (out,), make_attrs(attrs)))
        values.append(out)
    data = {}
    if draw(st.booleans()):  # a split with inline sizes, as generated rules carry them
        src = values[-1]
        size = types[src].shape[1]
        if isinstance(size, int) and size >= 2:
            sizes = np.array([1, size - 1], np.int64)
            types["sizes"] = TensorType("int64", (2,))
            data["sizes"] = WeightData(sizes)
            weights = (*weights, "sizes")
            outs = ("s0", "s1")
            for o, t in zip(outs, ops.infer("Split", [types[src], types["sizes"]], {"axis": 1}, [None, sizes], 2)):
                types[o] = t
            nodes.append(Node("Split", (src, "sizes"), outs, make_attrs({"axis": 1})))
            values += outs
    outputs = tuple(dict.fromkeys(draw(st.lists(st.sampled_from(values[n_in:] or values), min_size=1, max_size=2))))
    return lint(Graph(tuple(nodes), inputs, outputs, types, weights, data))
