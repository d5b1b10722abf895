"""PET mutants: each kind with its correction equals the original; a mismatch the boxes miss is rejected."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, subst, write_graph
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso import ops, pet
from taso.execute import compare
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs
from taso.optimize import Report
from taso.search import search

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


def mismatch(size: int, k: int, stride: int, dilation: int, lo: int, hi: int) -> tuple[set[int], set[int]]:
    """Outputs along one axis whose window starts before the image (left) or ends after it (right): where an
    image laid beside others sees its neighbour instead of zero padding. Worked out here, not taken from pet."""
    reach = dilation * (k - 1) + 1
    out = range((size + lo + hi - reach) // stride + 1)
    return {j for j in out if j * stride - lo < 0}, {j for j in out if j * stride - lo + reach > size}


@settings(max_examples=30, deadline=None)
@given(
    axis=st.sampled_from([2, 3]),
    n=st.integers(2, 4),
    c=st.integers(1, 2),
    m=st.integers(1, 3),
    blocks=st.integers(2, 8),
    other=st.integers(3, 6),
    k=st.sampled_from([1, 2, 3, 5]),
    stride=st.sampled_from([1, 1, 2]),
    dilation=st.sampled_from([1, 1, 2]),
    lo=st.integers(0, 8),
    hi=st.integers(0, 8),
    other_stride=st.sampled_from([1, 2]),
    bias=st.booleans(),
    groups=st.sampled_from(["one", "two", "depthwise"]),
)
def test_batch_to_space_plus_correction_equals_the_conv(
    axis: int,
    n: int,
    c: int,
    m: int,
    blocks: int,
    other: int,
    k: int,
    stride: int,
    dilation: int,
    lo: int,
    hi: int,
    other_stride: int,
    bias: bool,
    groups: str,
) -> None:
    """Images laid side by side along ``axis``, for any conv whose pads along it are at most 'same' (a 'valid',
    strided, dilated or grouped one through pad-conv-slice): the correction recomputes the outputs whose window
    reaches over an image's edge, and the result is exact."""
    reach = dilation * (k - 1) + 1
    lo, hi = min(lo, reach - 1), min(hi, reach - 1 - min(lo, reach - 1))
    size = blocks * stride
    assume(size + lo + hi >= reach)
    group = {"one": 1, "two": 2, "depthwise": 2 * c}[groups]
    channels = 2 * c if groups != "one" else c
    kernel = (k, 1) if axis == 2 else (1, k)
    x = (n, channels, size, other) if axis == 2 else (n, channels, other, size)
    pads, strides, dilations = [0, 0, 0, 0], [other_stride] * 2, [1, 1]
    pads[axis - 2], pads[axis], strides[axis - 2], dilations[axis - 2] = lo, hi, stride, dilation
    w = (group * m, channels // group, *kernel)
    g = conv_graph(x, w, bias, pads=tuple(pads), strides=tuple(strides), dilations=tuple(dilations), group=group)
    got = mutated(g, "batch-to-height" if axis == 2 else "batch-to-width")
    left, right = mismatch(size, k, stride, dilation, lo, hi)
    outputs = (size + lo + hi - reach) // stride + 1
    images = {*range(1, n)} if left else set()
    images |= {*range(n - 1)} if right else set()
    expected = min(len(left | right) / outputs, len(images) / n)
    assert (got is not None) == (expected <= pet.MAX_FRACTION and k > 1)  # a 1x1 conv: layout change only
    if got is not None:
        h, fix = got
        assert fix.fraction == pytest.approx(expected)
        assert_equal_on_random_inputs(g, h, seed=n * size)


@settings(max_examples=20, deadline=None)
@given(
    d=st.sampled_from([2, 3]),
    n=st.integers(1, 2),
    c=st.integers(1, 3),
    m=st.integers(1, 3),
    hw=st.tuples(st.integers(2, 4), st.integers(2, 4)),
    k=st.sampled_from([1, 3]),
    same=st.booleans(),
    bias=st.booleans(),
)
def test_dilation_to_batch_equals_the_dilated_conv(
    d: int, n: int, c: int, m: int, hw: tuple[int, int], k: int, same: bool, bias: bool
) -> None:
    """A dilated conv as an undilated one over the image's d x d phases moved into the batch: exact, so no
    correction at all."""
    x = (n, c, hw[0] * d, hw[1] * d)
    pad = d * (k - 1) // 2 if same else 0
    assume(same or min(x[2:]) >= d * (k - 1) + 1)
    g = conv_graph(x, (m, c, k, k), bias, dilations=(d, d), pads=(pad,) * 4)
    got = mutated(g, "dilation-to-batch")
    assert got is not None
    h, fix = got
    assert fix.fraction == 0 and not any(f.intervals for f in fix.fixes)
    assert_equal_on_random_inputs(g, h, seed=d * k)
    assert not any(n.op == "Conv" and n.attr["dilations"] != (1, 1) for n in h.nodes)


@settings(max_examples=25, deadline=None)
@given(
    s=st.sampled_from([2, 3]),
    n=st.integers(1, 2),
    c=st.integers(1, 3),
    m=st.integers(1, 3),
    blocks=st.tuples(st.integers(2, 5), st.integers(2, 5)),
    kernel=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    pads=st.tuples(*[st.integers(0, 3)] * 4),
    bias=st.booleans(),
)
def test_stride_to_channels_equals_the_strided_conv(
    s: int,
    n: int,
    c: int,
    m: int,
    blocks: tuple[int, int],
    kernel: tuple[int, int],
    pads: tuple[int, ...],
    bias: bool,
) -> None:
    """A strided conv as a stride-1 conv over the image's s x s phases moved into the channels, for any kernel
    and pads (the kernel is shifted onto a phase boundary): exact, no correction."""
    assume(kernel != (1, 1))
    x = (n, c, blocks[0] * s, blocks[1] * s)
    assume(all(x[2 + i] + pads[i] + pads[i + 2] >= kernel[i] for i in (0, 1)))
    g = conv_graph(x, (m, c, *kernel), bias, strides=(s, s), pads=pads)
    got = mutated(g, "stride-to-channels")
    assert got is not None
    h, fix = got
    assert fix.fraction == 0
    assert [node.attr["strides"] for node in h.nodes if node.op == "Conv"] == [(1, 1)]
    assert_equal_on_random_inputs(g, h, seed=s * n)


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((4, 3, 7, 7), {"strides": (2, 2), "pads": (1, 1, 1, 1)}),  # stride 2 over an odd size: blocks don't tile
        ((4, 3, 6, 6), {"pads": (2, 2, 2, 2)}),  # padded beyond 'same': an image's output is wider than the image
        ((1, 3, 6, 6), {"pads": (1, 1, 1, 1)}),  # a batch of one has no seams to move
    ],
)
def test_no_batch_to_space_where_the_layout_change_does_not_hold(shape: tuple[int, ...], attrs: dict) -> None:
    g = conv_graph(shape, (2, 3, 3, 3), False, **attrs)
    assert not [name for name, _ in pet.mutations(g) if "batch-to" in name]


odd = st.sampled_from([1, 3, 5])


@settings(max_examples=25, deadline=None)
@given(
    kernels=st.lists(st.tuples(odd, odd), min_size=2, max_size=3),
    pads=st.lists(st.tuples(*[st.integers(0, 2)] * 4), min_size=3, max_size=3),
    size=st.tuples(st.integers(5, 9), st.integers(5, 9)),
    stride=st.sampled_from([1, 1, 2]),
    dilation=st.sampled_from([1, 1, 2]),
    bias=st.booleans(),
    n=st.integers(1, 2),
)
def test_merged_sibling_convs_equal_the_siblings(
    kernels: list[tuple[int, int]],
    pads: list[tuple[int, ...]],
    size: tuple[int, int],
    stride: int,
    dilation: int,
    bias: bool,
    n: int,
) -> None:
    """Siblings over one input with different odd kernels and pads (Inception's 1x3 beside 3x1) as one conv
    over their enlarged, concatenated kernels, each sibling sliced back out: exact, no correction."""
    layers = [
        ("Conv", {"w": (1 + i, 2, *k), **({"b": (1 + i,)} if bias else {})}, {"pads": p})
        for i, (k, p) in enumerate(zip(kernels, pads))
    ]
    for _, _, attrs in layers:
        attrs.update(strides=(stride, stride), dilations=(dilation, dilation))
    try:
        g = graph((n, 2, *size), layers)
    except ops.OpError:
        assume(False)  # a window larger than the padded image
    got = mutated(g, "merge-convs")
    # at stride 1 siblings always align; at stride 2 only when their windows start on the same parity
    assert got is not None or stride > 1
    if got is not None:
        h, fix = got
        assert fix.fraction == 0
        assert sum(node.op == "Conv" for node in h.nodes) == 1
        assert_equal_on_random_inputs(g, h, seed=size[0])


@settings(max_examples=20, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=2),
    m=st.integers(1, 5),
    k=st.integers(1, 4),
    n=st.integers(1, 5),
    ones=st.integers(0, 2),
)
def test_batch_to_rows_equals_the_batched_matmul(batch: list[int], m: int, k: int, n: int, ones: int) -> None:
    """[..., M, K] @ [(1, ...) K, N] as one [B*M, K] @ [K, N] product: exact everywhere."""
    ones = min(ones, len(batch))
    g = graph((*batch, m, k), [("MatMul", {"w": (*[1] * ones, k, n)}, {})])
    got = mutated(g, "batch-to-rows")
    assert got is not None
    h, fix = got
    assert fix.fraction == 0
    assert [len(h.types[node.inputs[0]].shape) for node in h.nodes if node.op == "MatMul"] == [2]
    assert_equal_on_random_inputs(g, h, seed=m * n)


@settings(max_examples=20, deadline=None)
@given(
    lead=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    k=st.integers(1, 4),
    widths=st.lists(st.integers(1, 4), min_size=2, max_size=4),
)
def test_merged_sibling_matmuls_equal_the_siblings(lead: list[int], k: int, widths: list[int]) -> None:
    """Q/K/V-like siblings [..., K] @ [K, N_i] as one product by the matrices side by side, split back."""
    g = graph((*lead, k), [("MatMul", {"w": (k, width)}, {}) for width in widths])
    got = mutated(g, "merge-matmuls")
    assert got is not None
    h, fix = got
    assert fix.fraction == 0 and sum(node.op == "MatMul" for node in h.nodes) == 1
    assert_equal_on_random_inputs(g, h, seed=k)


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


def test_every_kind_has_a_sample() -> None:
    assert set(SAMPLES) == set(pet.MUTATORS)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_kind_matches_the_original_in_onnxruntime(kind: str, tmp_path: Path) -> None:
    """The corrected mutant, exported as ONNX, gives the original's outputs in onnxruntime."""
    g = SAMPLES[kind]
    got = mutated(g, kind)
    assert got is not None
    paths = [onnx_io.save_model(h, tmp_path / f"{i}.onnx") for i, h in enumerate((g, got[0]))]
    result = compare(paths[0], paths[1], g)
    assert result.ok, result.summary()


def _off_centre_seam(b: pet.Builder, nodes: tuple[Node, ...]) -> pet.Mutant | None:
    """A bad mutant: the conv in two halves cut a third of the way along the width, each half padded as if it
    were the whole image, so the two columns at the cut are wrong; it claims its boxes split only at the edges,
    whose corners and centres never probe the cut."""
    (conv,) = nodes
    n, c, h, w = b.shape(conv.inputs[0])
    left, right = b.split(conv.inputs[0], 3, (w // 3,))
    halves = [b.one("Conv", [part, *conv.inputs[1:]], **conv.attr) for part in (left, right)]
    return pet.single(b.one("Concat", halves, axis=3), {3: (1, w - 1)})


def test_a_mismatch_the_boxes_miss_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pet.MUTATORS, "off-centre-seam", pet.MutantKind("Conv", _off_centre_seam))
    g = conv_graph((2, 3, 5, 12), (4, 3, 3, 3), False, pads=(1, 1, 1, 1))
    assert pet.plan("off-centre-seam", g.nodes, g.types) is None
    assert not [name for name, _ in pet.mutations(g) if "off-centre-seam" in name]
    # the same mutant telling the truth about its cut is corrected, and then exact
    truthful = lambda b, nodes: pet.single(_off_centre_seam(b, nodes).outputs[0], {3: (3, 5)})  # noqa: E731
    monkeypatch.setitem(pet.MUTATORS, "truthful-seam", pet.MutantKind("Conv", truthful))
    fix = pet.plan("truthful-seam", g.nodes, g.types)
    assert fix is not None and fix.fixes == (pet.Fix(3, ((3, 5),)),)
    h = pet.mutate(g, g.nodes, "truthful-seam", fix)
    assert h is not None
    assert_equal_on_random_inputs(g, h, seed=5)


def _copied_line(axis: int, at: int, splits: tuple[int, ...]) -> pet.Mutator:
    """A bad merge of sibling MatMuls: right for the first sibling, but the second one's line ``at - 1`` along
    ``axis`` (a batch, a row or a column) is copied over line ``at``; it claims the boxes split at ``splits``."""

    def build(b: pet.Builder, mms: tuple[Node, ...]) -> pet.Mutant:
        merged = pet.MUTATORS["merge-matmuls"].build(b, mms)
        assert merged is not None
        first, second = merged.outputs
        before, line, _, after = b.split(second, axis, (at - 1, at, at + 1))
        copied = b.one("Concat", [before, line, line, after], axis=axis)
        return pet.Mutant((first, copied), ({}, {axis: splits}))

    return build


@pytest.mark.parametrize("axis", [0, 1, 2], ids=["batch", "rows", "columns"])
def test_a_merge_whose_mismatch_the_boxes_miss_is_rejected(axis: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The multi-output machinery and every way a MatMul slab is recomputed: a planted line that no probe
    reaches is rejected, and the same mutant naming the line's boxes is corrected there, and then exact."""
    g = graph((12, 12, 6), [("MatMul", {"w": (6, 12)}, {}), ("MatMul", {"w": (6, 12)}, {})])
    lying, truthful = f"lying-{axis}", f"truthful-{axis}"  # plans are cached by kind name: one name per mutator
    monkeypatch.setitem(pet.MUTATORS, lying, pet.MutantKind("MatMul", _copied_line(axis, 3, (1, 11)), merges=()))
    assert pet.plan(lying, g.nodes, g.types) is None
    assert not [name for name, _ in pet.mutations(g) if lying in name]
    monkeypatch.setitem(pet.MUTATORS, truthful, pet.MutantKind("MatMul", _copied_line(axis, 3, (3, 4)), merges=()))
    fix = pet.plan(truthful, g.nodes, g.types)
    assert fix is not None and fix.fixes[0].intervals == () and fix.fixes[1] == pet.Fix(axis, ((3, 4),))
    h = pet.mutate(g, g.nodes, truthful, fix)
    assert h is not None
    assert_equal_on_random_inputs(g, h, seed=axis)


def test_merges_take_only_siblings_that_agree() -> None:
    """Convs reading one input but with different strides are not one site; those that agree still are."""
    layers = [
        ("Conv", {"w": (2, 3, 3, 3)}, {"pads": (1, 1, 1, 1)}),
        ("Conv", {"w": (2, 3, 1, 1)}, {}),
        ("Conv", {"w": (2, 3, 3, 3)}, {"strides": (2, 2)}),
    ]
    g = graph((1, 3, 8, 8), layers)
    assert [[n.name for n in site] for site in pet.sites(g, pet.MUTATORS["merge-convs"])] == [["conv0", "conv1"]]


def test_search_takes_mutants_as_candidates_and_keeps_the_cheapest() -> None:
    """With a cost that prefers more nodes, the search picks a mutant; the result stays exact."""
    g = conv_graph((4, 3, 8, 8), (4, 3, 3, 3), True, pads=(1, 1, 1, 1))
    result = search(g, [], lambda h: -float(len(h.nodes)), budget=5, mutate=pet.mutations)
    assert result.candidates >= 2
    assert [k for k in result.applied if k.startswith(pet.PREFIX)]
    assert_equal_on_random_inputs(g, result.graph, seed=1)


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_search_merges_siblings_when_fewer_kernels_cost_less(op: str) -> None:
    """With a cost of one per compute kernel, the search's pick among the mutants is the merge."""
    g = SAMPLES["merge-convs" if op == "Conv" else "merge-matmuls"]
    result = search(g, [], lambda h: float(sum(n.op == op for n in h.nodes)), budget=5, mutate=pet.mutations)
    assert [k for k in result.applied if k.startswith(f"{pet.PREFIX}merge-")]
    assert_equal_on_random_inputs(g, result.graph, seed=2)


def _pet_model(path: Path) -> Path:
    """A batch-16 model with a conv, Inception's 1x3 and 3x1 siblings, and a BERT-like projection."""
    rng = np.random.default_rng(0)
    weights = {
        "w": (8, 8, 3, 3),
        "wa": (8, 8, 1, 3),
        "wb": (8, 8, 3, 1),
        "wq": (14, 14),
        "wk": (14, 14),
    }
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n) for n, s in weights.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "wa"], ["a"], pads=[0, 1, 0, 1]),
        helper.make_node("Conv", ["r", "wb"], ["b"], pads=[1, 0, 1, 0]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["t"]),
        helper.make_node("MatMul", ["t", "wq"], ["q"]),
        helper.make_node("MatMul", ["t", "wk"], ["k"]),
        helper.make_node("Add", ["q", "k"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.array([16, 8 * 14, 14], np.int64), "shape")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8, 14, 14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 8 * 14, 14])
    return write_graph(helper.make_graph(nodes, "g", [x], [y], [*inits, shape]), path)


WORK_BOUND = ("--budget", "20", "--time-limit", "100000")
"""A search bounded by work alone: the time limit, a safety net, out of reach."""


def test_optimize_pet_flag_adds_candidates_and_keeps_the_model_exact(tmp_path: Path) -> None:
    """`subst optimize --pet` on a batch-16 model where every kind but the dilated and strided ones applies: more
    candidates than without (the new kinds among them), and the onnxruntime check passes. The search is bounded
    by its budget, the time limit set out of reach: under load, a 10 s limit once expanded nothing."""
    rules = tmp_path / "rules.db"
    shutil.copy(ROOT / "substitutions.db", rules)  # a copy: the costs this run estimates are cached in it
    src = _pet_model(tmp_path / "pet.onnx")
    model = onnx_io.load_model(src)
    kinds = {name.split(" ")[1] for name, _ in pet.mutations(model)}
    assert kinds == set(pet.MUTATORS) - {"dilation-to-batch", "stride-to-channels"}
    reports = {}
    for flag in ("--no-pet", "--pet"):
        out = tmp_path / f"out{flag}.onnx"
        r = subst("optimize", src, "-o", out, "--device", "estimate", "--store", rules, flag, *WORK_BOUND, "--json")
        assert r.returncode == 0, r.stderr
        reports[flag] = json.loads(r.stdout)
        assert reports[flag]["check"]["ok"] and not reports[flag]["search"]["time_limit_reached"]
    assert reports["--pet"]["search"]["candidates"] > reports["--no-pet"]["search"]["candidates"]


def test_the_report_names_each_mutated_node_and_its_correction() -> None:
    """`subst optimize --pet` says which parts were mutated and how much of each output the correction
    recomputes: the search's history names, as the report prints them."""
    g = conv_graph((3, 4, 8, 8), (5, 4, 3, 3), True, pads=(1, 1, 1, 1))
    fix = pet.plan("batch-to-height", g.nodes, g.types)
    assert fix is not None and 0 < fix.fraction <= pet.MAX_FRACTION
    (name,) = [n for n, _ in pet.mutations(g) if n.startswith(f"{pet.PREFIX}batch-to-height ")]
    label = g.nodes[0].name
    assert name == f"{pet.PREFIX}batch-to-height {label} (corrects {fix.fraction:.1%})"
    report = Report(
        "in.onnx",
        "out.onnx",
        1,
        9,
        0,
        0,
        {
            name: {"name": name, "count": 1},
            "1c0d127e73": {"name": "Concat(Relu(x0), Relu(x1)) => Relu(Concat(x0, x1))", "count": 2},
        },
    )
    (line,) = [s for s in report.lines() if s.startswith("pet")]
    assert line.endswith(f"1 mutated: batch-to-height {label} (corrects {fix.fraction:.1%})")
    assert not any(pet.PREFIX in s for s in report.lines() if s.startswith("rules"))
