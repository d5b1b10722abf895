"""Chains of axis moves composed (taso.optimize.views): the composition moves every element where the chain did,
at every size of the dynamic dims, checked against onnxruntime at sizes the composition never saw."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import write_graph
from hypothesis import event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.ir import parse_graph
from taso.optimize.views import compose_views

Step = tuple[str, dict]
"""An op and what it is given: ``perm``, ``axis``, ``allowzero`` (attributes), ``target``, ``axes`` (int64
inputs) or ``computed``, a target computed at run time as the dynamo exporter writes it: each entry an int or the
name of a dim param of x, read from ``Shape(x)``."""


def _computed(k: int, entries: list[int | str], dims: list[int | str]) -> tuple[list, list]:
    """The nodes and initializers computing ``entries`` from x's shape into the value ``computed{k}``."""
    nodes, inits, parts = [helper.make_node("Shape", ["x"], [f"shape{k}"])], [], []
    for j, e in enumerate(entries):
        part = f"part{k}_{j}"
        if isinstance(e, str):
            inits.append(numpy_helper.from_array(np.array([dims.index(e)], np.int64), f"at{k}_{j}"))
            nodes.append(helper.make_node("Gather", [f"shape{k}", f"at{k}_{j}"], [part], axis=0))
        else:
            inits.append(numpy_helper.from_array(np.array([e], np.int64), part))
        parts.append(part)
    nodes.append(helper.make_node("Concat", parts, [f"computed{k}"], axis=0))
    return nodes, inits


def _model(tmp: Path, dims: list[int | str], steps: list[Step], name: str = "chain") -> Path:
    """x of ``dims`` (``"n"`` a dim param) through ``steps`` in turn, the last writing y."""
    nodes, inits = [], []
    value, rank = "x", len(dims)
    for k, (op, given_) in enumerate(steps):
        rank = {"Reshape": len(given_.get("target", given_.get("computed", ()))), "Flatten": 2}.get(op, rank)
        rank += {"Squeeze": -1, "Unsqueeze": 1}.get(op, 0) * len(given_.get("axes", ()))
        out = "y" if k == len(steps) - 1 else f"v{k}"
        inputs = [value]
        for key in ("target", "axes"):
            if key in given_:
                inits.append(numpy_helper.from_array(np.array(given_[key], np.int64), f"{key}{k}"))
                inputs.append(f"{key}{k}")
        if "computed" in given_:
            more_nodes, more_inits = _computed(k, given_["computed"], dims)
            nodes += more_nodes
            inits += more_inits
            inputs.append(f"computed{k}")
        attrs = {key: given_[key] for key in ("perm", "axis", "allowzero") if key in given_}
        nodes.append(helper.make_node(op, inputs, [out], name=f"{op}{k}", **attrs))
        value = out
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{i}" for i in range(rank)])],
        initializer=inits,
    )
    return write_graph(graph, tmp / f"{name}.onnx", opset=18)


def _composed(tmp: Path, src: Path) -> tuple[Path, int, int]:
    """The model with its chains composed, and its node count before and after."""
    g = onnx_io.load_model(src)
    out, removed = compose_views(g)
    assert len(out.nodes) == len(g.nodes) - removed
    return onnx_io.save_model(out, tmp / f"{src.stem}.composed.onnx"), len(g.nodes), len(out.nodes)


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    """``path`` as written (onnxruntime's own optimizations off) on ``x``."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _same_at(src: Path, out: Path, dims: list[int | str]) -> None:
    """Both give the same y, shape and every element, for x = 0, 1, 2, ... at three sizes of the dim params: a
    chain only moves elements, so equal results on distinct elements mean each element lands in the same place."""
    for n, m in ((1, 2), (2, 3), (3, 1)):
        shape = tuple({"n": n, "m": m}.get(d, d) if isinstance(d, str) else d for d in dims)
        x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        want, got = _run(src, x), _run(out, x)
        assert want.shape == got.shape and np.array_equal(want, got), (n, want.shape, got.shape)


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[int | str], list[Step]]:
    """An input of up to four axes (up to two of them the dim params n and m) and two to five moves, each valid
    at every size of n and m, none leaving a scalar (an empty target is not spelt by a Concat, nor a perm by
    make_node): a Reshape keeps a leading run of axes as they are (0, as BERT's ``[0, 0, 12, 64]``)
    and regroups the static factors of the rest freely (aligned with the axes or not), the dim params left
    there merged into one axis written -1; or its target is computed from x's shape, a lone dim param's axis
    read from it, with or without ``allowzero``."""
    sizes = st.sampled_from([1, 2, 3, 4, 6])
    dims: list[int | str] = [draw(sizes) for _ in range(draw(st.integers(1, 4)))]
    for param in draw(st.sampled_from([(), ("n",), ("n", "m")]))[: len(dims)]:
        dims[draw(st.sampled_from([k for k, d in enumerate(dims) if isinstance(d, int)]))] = param
    Axis = tuple[int, tuple[str, ...]]  # static factor, dim params multiplied in
    shape: list[Axis] = [(1, (d,)) if isinstance(d, str) else (d, ()) for d in dims]
    steps: list[Step] = []
    count = draw(st.integers(2, 5))
    while len(steps) < count:
        op = draw(st.sampled_from(["Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten"]))
        rank = len(shape)
        if op == "Transpose":
            perm = list(draw(st.permutations(range(rank))))
            shape = [shape[p] for p in perm]
            steps.append((op, {"perm": perm} if draw(st.booleans()) or perm != perm[::-1] else {}))
        elif op == "Reshape":
            kept, rest = shape[: (keep := draw(st.integers(0, rank)))], shape[keep:]
            left, params = math.prod(s for s, _ in rest), tuple(sorted(p for _, ps in rest for p in ps))
            new: list[Axis] = []
            for _ in range(draw(st.integers(0, 3)) if rest else 0):
                factor = draw(st.sampled_from([f for f in range(1, left + 1) if left % f == 0]))
                new.append((factor, ()))
                left //= factor
            if rest:
                new.append((left, ()))
            if params:
                k = draw(st.integers(0, len(new) - 1))
                new[k] = (new[k][0], params)
            new = draw(st.permutations(new))
            shape = [*kept, *new]
            if draw(st.booleans()):
                steps.append((op, {"target": [0] * keep + [-1 if ps else f for f, ps in new]}))
            else:
                entries = [p[0] if f == 1 and len(p) == 1 else 0 for f, p in kept]
                entries += [p[0] if f == 1 and len(p) == 1 else -1 if p else f for f, p in new]
                allowzero = {"allowzero": 1} if 0 not in entries and draw(st.booleans()) else {}
                steps.append((op, {"computed": entries, **allowzero}))
        elif op == "Squeeze" and rank > 1 and (ones := [k for k, d in enumerate(shape) if d == (1, ())]):
            k = draw(st.sampled_from(ones))
            shape = shape[:k] + shape[k + 1 :]
            steps.append((op, {"axes": [k - rank if draw(st.booleans()) else k]}))
        elif op == "Unsqueeze":
            k = draw(st.integers(0, rank))
            shape = [*shape[:k], (1, ()), *shape[k:]]
            steps.append((op, {"axes": [k - rank - 1 if draw(st.booleans()) else k]}))
        elif op == "Flatten":
            k = draw(st.integers(-rank, rank))
            cut = k + rank if k < 0 else k
            shape = [
                (math.prod(s for s, _ in p), tuple(sorted(x for _, ps in p for x in ps)))
                for p in (shape[:cut], shape[cut:])
            ]
            steps.append((op, {"axis": k}))
    return dims, steps


@settings(max_examples=60, deadline=None)
@given(chains())
def test_a_composed_chain_moves_every_element_where_the_chain_did(tmp_path_factory, chain) -> None:
    dims, steps = chain
    tmp = tmp_path_factory.mktemp("chain")
    src = _model(tmp, dims, steps)
    out, before, after = _composed(tmp, src)
    assert after <= before
    computed = any("computed" in given_ for _, given_ in steps)
    event(("composed" if after < before else "left as written") + (", a target computed" if computed else ""))
    _same_at(src, out, dims)


def test_vit_dynamo_attention_chains_take_two_nodes_where_they_took_four(tmp_path: Path) -> None:
    """ViT-B/16 as the dynamo exporter writes its attention (sequence first, batch the dim param n): the fused
    QKV projection split by Reshape, Unsqueeze, Transpose, Squeeze, and a key head by Reshape, Transpose,
    Transpose, Reshape; each composes to a Reshape to the atoms and one Transpose."""
    qkv = [
        ("Reshape", {"target": [197, -1, 3, 768]}),
        ("Unsqueeze", {"axes": [0]}),
        ("Transpose", {"perm": [3, 1, 2, 0, 4]}),
        ("Squeeze", {"axes": [-2]}),
    ]
    key = [
        ("Reshape", {"target": [197, -1, 64]}),
        ("Transpose", {"perm": [1, 0, 2]}),
        ("Transpose", {"perm": [0, 2, 1]}),
        ("Reshape", {"target": [-1, 12, 64, 197]}),
    ]
    for name, dims, steps in (("qkv", [197, "n", 2304], qkv), ("key", [197, "n", 768], key)):
        src = _model(tmp_path, dims, steps, name)
        out, before, after = _composed(tmp_path, src)
        assert (before, after) == (4, 2), name
        assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Reshape", "Transpose"]
        _same_at(src, out, dims)


def test_a_merged_dim_param_split_another_way_is_left_as_written(tmp_path: Path) -> None:
    """x (n, 6) as (2n, 3), transposed to (3, 2n), then read as (3, 2, n): the (n, 2) merged by the first
    Reshape is split as (2, n), which no permutation of whole atoms gives at every n, so nothing changes."""
    dims: list[int | str] = ["n", 6]
    steps: list[Step] = [
        ("Reshape", {"target": [-1, 3]}),
        ("Transpose", {"perm": [1, 0]}),
        ("Reshape", {"target": [3, 2, -1]}),
    ]
    src = _model(tmp_path, dims, steps)
    out, before, after = _composed(tmp_path, src)
    assert before == after == 3
    _same_at(src, out, dims)


def test_bert_dynamo_key_head_takes_one_transpose_where_it_took_three_nodes(tmp_path: Path) -> None:
    """BERT's key head as the dynamo exporter writes it, batch n and sequence m: (n, 12, m, 64) read as
    (-1, m, 64) and back as (n, 12, 64, m), both targets computed from the shape; the three moves are one
    Transpose, and the shape arithmetic dies with them."""
    dims: list[int | str] = ["n", 12, "m", 64]
    steps: list[Step] = [
        ("Reshape", {"computed": [-1, "m", 64], "allowzero": 1}),
        ("Transpose", {"perm": [0, 2, 1]}),
        ("Reshape", {"computed": ["n", 12, 64, "m"], "allowzero": 1}),
    ]
    src = _model(tmp_path, dims, steps)
    out, _, _ = _composed(tmp_path, src)
    (node,) = onnx.load(str(out)).graph.node
    assert (node.op_type, list(node.attribute[0].ints)) == ("Transpose", [0, 1, 3, 2])
    _same_at(src, out, dims)


def test_gpt2_key_head_composes_once_its_shape_program_is_dead(tmp_path: Path) -> None:
    """GPT-2's key head as the dynamo exporter writes it, batch n and sequence m: the split-off key (n, m, 768) is
    read as (n, m, 12, 64) and transposed, and that value's Shape computes the next two targets: (-1, m, 64),
    a Transpose, then (n, 12, 64, m). The Shape is a second reader, so the first round composes only the second
    chain; the Shape dies with it, and the next round composes all five moves into a Reshape and a Transpose."""
    const = {"first": [0, 0, 12, 64], "at2": [2], "at0": [0], "minus1": [-1], "twelve": [12], "d64": [64]}
    nodes = [
        helper.make_node("Reshape", ["x", "first"], ["heads"]),
        helper.make_node("Transpose", ["heads"], ["key"], perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["key"], ["shape"]),
        helper.make_node("Gather", ["shape", "at2"], ["seq"], axis=0),
        helper.make_node("Gather", ["shape", "at0"], ["batch"], axis=0),
        helper.make_node("Concat", ["minus1", "seq", "d64"], ["flat"], axis=0),
        helper.make_node("Reshape", ["key", "flat"], ["stack"], allowzero=1),
        helper.make_node("Transpose", ["stack"], ["stack_t"], perm=[0, 2, 1]),
        helper.make_node("Concat", ["batch", "twelve", "d64", "seq"], ["back"], axis=0),
        helper.make_node("Reshape", ["stack_t", "back"], ["y"], allowzero=1),
    ]
    graph = helper.make_graph(
        nodes,
        "gpt2_key",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m", 768])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 12, 64, "m"])],
        initializer=[numpy_helper.from_array(np.array(v, np.int64), k) for k, v in const.items()],
    )
    src = write_graph(graph, tmp_path / "gpt2_key.onnx", opset=18)
    out, before, after = _composed(tmp_path, src)
    assert (before, after) == (10, 2)
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Reshape", "Transpose"]
    _same_at(src, out, ["n", "m", 768])


def test_unsqueeze_axes_read_from_a_dim_leave_the_chain(tmp_path: Path) -> None:
    """Unsqueeze axes computed from x's shape, known only as the dim param n: no axis can be read from that, so
    the chain stays as written (and runs at sizes where n names an axis)."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["axes"], axis=0),
        helper.make_node("Unsqueeze", ["t", "axes"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "axes_from_a_dim",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["y0", "y1", "y2"])],
        initializer=[numpy_helper.from_array(np.array([0], np.int64), "zero")],
    )
    g = onnx_io.load_model(write_graph(graph, tmp_path / "axes.onnx", opset=18))
    assert compose_views(g) == (g, 0)


def test_a_computed_entry_no_dim_param_names_leaves_the_chain(tmp_path: Path) -> None:
    """x (n, 6) read as (2n, 3) with the 2n computed (Mul): shape inference names no dim 2n, so the entry is
    unknown, and the chain stays as written."""
    steps: list[Step] = [("Reshape", {"computed": ["n", 3]}), ("Transpose", {"perm": [1, 0]})]
    src = _model(tmp_path, ["n", 6], steps)
    model = onnx.load(str(src))
    model.graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), "two"))
    model.graph.node.insert(2, helper.make_node("Mul", ["part0_0", "two"], ["twice"]))
    model.graph.node[3].input[0] = "twice"
    onnx.save(model, str(src))
    g = onnx_io.load_model(src)
    assert [n.op for n in g.nodes] == ["Shape", "Gather", "Mul", "Concat", "Reshape", "Transpose"]
    assert compose_views(g) == (g, 0)


LEFT = {
    "nine atoms, past the 8 axes onnxruntime's CUDA kernels take": (
        [2] * 9,
        [("Transpose", {"perm": list(reversed(range(9)))}), ("Transpose", {"perm": [1, 0, *range(2, 9)]})],
    ),
    "a Squeeze of every size-1 axis, which the run decides": (
        [1, "n", 3],
        [("Transpose", {"perm": [1, 0, 2]}), ("Squeeze", {})],
    ),
    "a Squeeze of a dim param's axis": (["n", 3], [("Transpose", {"perm": [1, 0]}), ("Squeeze", {"axes": [1]})]),
    "two axes of dim params that one Reshape cannot write (a -1 each)": (
        ["n", 2, "m"],
        [
            ("Reshape", {"target": [0, -1]}),
            ("Transpose", {"perm": [1, 0]}),
            ("Unsqueeze", {"axes": [0]}),
            ("Squeeze", {"axes": [0]}),
        ],
    ),
}


@pytest.mark.parametrize("case", LEFT)
def test_chains_the_atoms_cannot_follow_are_left_as_written(tmp_path: Path, case: str) -> None:
    dims, steps = LEFT[case]
    g = onnx_io.load_model(_model(tmp_path, dims, steps))
    assert compose_views(g) == (g, 0)


UNREAD = {
    "a dim no one knows": """graph(%x: float32[2,?,3]):
      %r = Transpose(%x) {perm=[1,0,2]} : float32[?,2,3]
      %y = Transpose(%r) {perm=[0,2,1]} : float32[?,3,2]
      return %y""",
    "a Reshape target the model's user gives": """graph(%x: float32[2,3], %t: int64[2]):
      %r = Transpose(%x) {perm=[1,0]} : float32[3,2]
      %s = Reshape(%r, %t) : float32[?,?]
      %y = Transpose(%s) {perm=[1,0]} : float32[?,?]
      return %y""",
}
"""Chains whose sizes the atoms cannot read: a dim shape inference left neither a size nor a dim param (it
cannot be told from another unknown dim), a Reshape target known only to the run."""


@pytest.mark.parametrize("case", UNREAD)
def test_a_chain_whose_sizes_cannot_be_read_is_left_as_written(case: str) -> None:
    g = parse_graph(UNREAD[case])
    assert compose_views(g) == (g, 0)


@pytest.mark.parametrize("reader", ["a Relu", "the graph's outputs"])
def test_a_link_read_elsewhere_ends_the_chain(tmp_path: Path, reader: str) -> None:
    """A move whose output something else reads stays (a node, or the model's user): composing past it would
    compute it twice, or lose it."""
    steps: list[Step] = [("Transpose", {"perm": [1, 0]}), ("Transpose", {"perm": [1, 0]})]
    src = _model(tmp_path, [2, 3], steps)
    model = onnx.load(str(src))
    if reader == "a Relu":
        model.graph.node.append(helper.make_node("Relu", ["v0"], ["r"]))
    model.graph.output.append(
        helper.make_tensor_value_info("r" if reader == "a Relu" else "v0", TensorProto.FLOAT, [3, 2])
    )
    onnx.save(model, str(src))
    g = onnx_io.load_model(src)
    assert compose_views(g) == (g, 0)
