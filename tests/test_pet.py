"""PET mutants: each kind with its correction equals the original; a mismatch the boxes miss is rejected."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, subst
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx_io, ops, pet
from taso.check import compare
from taso.ir import Graph, Node, TensorType, WeightData, make_attrs
from taso.search import search


def conv_graph(x: tuple[int, ...], w: tuple[int, ...], bias: bool, seed: int = 0, **attrs: object) -> Graph:
    """One Conv over input ``x`` with random float weights (as data): the smallest model a mutant applies to."""
    rng = np.random.default_rng(seed)
    full = {"kernel_shape": w[2:], "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1, **attrs}
    names = ("x", "w", "b") if bias else ("x", "w")
    types = {"x": TensorType("float32", x), "w": TensorType("float32", w), "b": TensorType("float32", (w[0],))}
    y = ops.infer("Conv", [types[v] for v in names], full)[0]
    data = {"w": WeightData(rng.standard_normal(w).astype(np.float32))}
    if bias:
        data["b"] = WeightData(rng.standard_normal(w[0]).astype(np.float32))
    node = Node("Conv", names, ("y",), make_attrs(full), name="conv")
    return Graph((node,), ("x",), ("y",), {**types, "y": y}, names[1:], data)


def run(g: Graph, x: np.ndarray) -> np.ndarray:
    """``g`` in float64 with numpy (the catalogue's reference semantics)."""
    env = {
        "x": x,
        **{w: d.array.astype(np.float64) if d.array.dtype.kind == "f" else d.array for w, d in g.data.items()},
    }
    for n in g.nodes:
        env.update(zip(n.outputs, ops.get(n.op).run([env[v] for v in n.inputs], n.attr, len(n.outputs))))
    return env[g.outputs[0]]


def mutated(g: Graph, kind: str) -> tuple[Graph, pet.Plan] | None:
    found = [(name, h) for name, h in pet.mutations(g) if name.startswith(f"{pet.PREFIX}{kind} ")]
    if not found:
        return None
    fix = pet.plan(kind, g.nodes[0], g.types)
    assert fix is not None
    return found[0][1], fix


def assert_equal_on_random_inputs(g: Graph, h: Graph, seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal(g.types["x"].shape)
    np.testing.assert_allclose(run(h, x), run(g, x), rtol=1e-9, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    axis=st.sampled_from([2, 3]),
    n=st.integers(2, 4),
    c=st.integers(1, 3),
    m=st.integers(1, 3),
    size=st.integers(2, 9),
    other=st.integers(1, 6),
    k=st.sampled_from([1, 2, 3, 5]),
    before=st.integers(0, 4),
    other_stride=st.sampled_from([1, 2]),
    bias=st.booleans(),
    depthwise=st.booleans(),
)
def test_batch_to_space_plus_correction_equals_the_conv(
    axis: int,
    n: int,
    c: int,
    m: int,
    size: int,
    other: int,
    k: int,
    before: int,
    other_stride: int,
    bias: bool,
    depthwise: bool,
) -> None:
    """Images laid side by side along ``axis``: the correction recomputes the seams (what the kernel's padding
    covers at each edge), and the result is exact for any 'same' stride-1 conv along that axis."""
    before = min(before, k - 1)
    kernel = (k, 1) if axis == 2 else (1, k)
    x = (n, c, size, other) if axis == 2 else (n, c, other, size)
    pads = [0, 0, 0, 0]
    pads[axis - 2], pads[axis] = before, k - 1 - before
    strides = (1, other_stride) if axis == 2 else (other_stride, 1)
    group = c if depthwise else 1
    w = (c if depthwise else m, 1 if depthwise else c, *kernel)
    g = conv_graph(x, w, bias, pads=tuple(pads), strides=strides, group=group)
    kind = "batch-to-height" if axis == 2 else "batch-to-width"
    got = mutated(g, kind)
    # where the kernel reaches across a seam: the first `before` rows of every image but the first, the last
    # `after` rows of every image but the last; covered by those rows of all images, or by the images that have them
    after = k - 1 - before
    rows = min(before + after, size) / size
    images = len(({*range(1, n)} if before else set()) | ({*range(n - 1)} if after else set())) / n
    expected = min(rows, images)
    assert (got is not None) == (expected <= pet.MAX_FRACTION)
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
    if not same and min(x[2:]) < d * (k - 1) + 1:
        return
    g = conv_graph(x, (m, c, k, k), bias, dilations=(d, d), pads=(pad,) * 4)
    got = mutated(g, "dilation-to-batch")
    assert got is not None
    h, fix = got
    assert fix.intervals == () and fix.fraction == 0
    assert_equal_on_random_inputs(g, h, seed=d * k)
    assert not any(n.op == "Conv" and n.attr["dilations"] != (1, 1) for n in h.nodes)


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((4, 3, 6, 6), {"strides": (1, 2), "pads": (1, 1, 1, 1)}),  # stride 2 along width
        ((4, 3, 6, 6), {"dilations": (1, 2), "pads": (1, 2, 1, 2)}),  # dilated along width, not square
        ((1, 3, 6, 6), {"pads": (1, 1, 1, 1)}),  # a batch of one has no seams to move
        ((4, 3, 6, 6), {"pads": (0, 0, 0, 0)}),  # 'valid' conv: the wide image's output is not the batch's
    ],
)
def test_no_mutant_where_the_layout_change_does_not_hold(shape: tuple[int, ...], attrs: dict) -> None:
    g = conv_graph(shape, (2, 3, 3, 3), False, **attrs)
    assert not [name for name, _ in pet.mutations(g) if "batch-to-width" in name or "dilation" in name]


@pytest.mark.parametrize("kind", sorted(pet.MUTATORS))
def test_each_kind_matches_the_original_in_onnxruntime(kind: str, tmp_path: Path) -> None:
    """The corrected mutant, exported as ONNX, gives the original's outputs in onnxruntime."""
    attrs = {"dilations": (2, 2), "pads": (2, 2, 2, 2)} if kind == "dilation-to-batch" else {"pads": (1, 1, 1, 1)}
    g = conv_graph((3, 4, 8, 10), (5, 4, 3, 3), True, **attrs)
    got = mutated(g, kind)
    assert got is not None
    paths = [onnx_io.save_model(h, tmp_path / f"{i}.onnx") for i, h in enumerate((g, got[0]))]
    result = compare(paths[0], paths[1], g)
    assert result.ok, result.summary()


def _off_centre_seam(b: pet.Builder, conv: Node) -> pet.Mutant | None:
    """A bad mutant: the conv in two halves cut a third of the way along the width, each half padded as if it
    were the whole image, so the two columns at the cut are wrong; it claims its boxes split only at the edges,
    whose corners and centres never probe the cut."""
    n, c, h, w = b.shape(conv.inputs[0])
    left, right = b.split(conv.inputs[0], 3, (w // 3,))
    halves = [b.one("Conv", [part, *conv.inputs[1:]], **conv.attr) for part in (left, right)]
    return pet.Mutant(b.one("Concat", halves, axis=3), {3: (1, w - 1)})


def test_a_mismatch_the_boxes_miss_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pet.MUTATORS, "off-centre-seam", _off_centre_seam)
    g = conv_graph((2, 3, 5, 12), (4, 3, 3, 3), False, pads=(1, 1, 1, 1))
    assert pet.plan("off-centre-seam", g.nodes[0], g.types) is None
    assert not [name for name, _ in pet.mutations(g) if "off-centre-seam" in name]
    # the same mutant telling the truth about its cut is corrected, and then exact
    truthful = lambda b, conv: pet.Mutant(_off_centre_seam(b, conv).output, {3: (3, 5)})  # noqa: E731
    monkeypatch.setitem(pet.MUTATORS, "truthful-seam", truthful)
    fix = pet.plan("truthful-seam", g.nodes[0], g.types)
    assert fix is not None and fix.axis == 3 and fix.intervals == ((3, 5),)
    assert_equal_on_random_inputs(g, pet.mutate(g, g.nodes[0], "truthful-seam", fix), seed=5)


def test_search_takes_mutants_as_candidates_and_keeps_the_cheapest() -> None:
    """With a cost that prefers more nodes, the search picks a mutant; the result stays exact."""
    g = conv_graph((4, 3, 8, 8), (4, 3, 3, 3), True, pads=(1, 1, 1, 1))
    result = search(g, [], lambda h: -float(len(h.nodes)), budget=5, mutate=pet.mutations)
    assert result.candidates >= 2
    assert [k for k in result.applied if k.startswith(pet.PREFIX)]
    assert_equal_on_random_inputs(g, result.graph, seed=1)


def test_optimize_pet_flag_adds_candidates_and_keeps_the_model_exact(tmp_path: Path) -> None:
    """`subst optimize --pet` on a batch-16 conv model: more candidates than without, and the check passes."""
    rules = tmp_path / "rules.db"
    shutil.copy(ROOT / "substitutions.db", rules)  # a copy: the costs this run estimates are cached in it
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8, 14, 14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 8, 14, 14])
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)], ir_version=10
    )
    src = tmp_path / "conv.onnx"
    onnx.save_model(model, src)
    reports = {}
    for flag in ("--no-pet", "--pet"):
        out = tmp_path / f"out{flag}.onnx"
        r = subst("optimize", src, "-o", out, "--device", "estimate", "--store", rules, flag, "--json")
        assert r.returncode == 0, r.stderr
        reports[flag] = json.loads(r.stdout)
        assert reports[flag]["check"]["ok"]
    assert reports["--pet"]["search"]["candidates"] > reports["--no-pet"]["search"]["candidates"]
