"""Each mutant kind, corrected, equals the ops it replaces: in float64 over random shapes, and in onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from taso import onnx as onnx_io
from taso import ops, pet
from taso.execute import compare

from .samples import SAMPLES, assert_equal_on_random_inputs, conv_graph, graph, mutated


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
