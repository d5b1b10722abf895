"""Operations made idle by their operand's content (taso.optimize.content, taso.optimize.idle): the test for packed sequences that
the dynamo exporter writes into transformers' causal masks is dropped where it holds at every size, kept where it
does not, and onnxruntime computes the same either way, empty tensors included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso import onnx as onnx_io
from taso.execute.precompute import precompute
from taso.optimize.content import _compared, contents
from taso.optimize.idle import drop_idle
from taso.optimize.shapefold import fold_shapes


def _constants(values: dict[str, int | float | list[int]]) -> list[TensorProto]:
    """Initializers named by ``values``' keys: floats as float32, the rest int64."""
    return [
        numpy_helper.from_array(np.array(v, np.float32 if isinstance(v, float) else np.int64), k)
        for k, v in values.items()
    ]


def _positions() -> list[onnx.NodeProto]:
    """``r = arange(seq)`` over ``ids`` [batch, seq], ``b`` its batch as a one-element shape, as exporters read them."""
    return [
        helper.make_node("Shape", ["ids"], ["b"], start=0, end=1),
        helper.make_node("Shape", ["ids"], ["s"], start=1, end=2),
        helper.make_node("Squeeze", ["s"], ["seq"]),
        helper.make_node("Range", ["zero", "seq", "one"], ["r"]),
    ]


def _mask_model(tmp: Path, start: int = 0, delta: int = 1, gap: int = 1, op: str = "And", form: str = "packed") -> Path:
    """scores [batch, seq, seq] plus a causal mask ``op``-ed with the packed-sequence test as transformers
    writes it: positions ``start + delta * arange(seq)``, each row's steps compared with ``gap``, the count of
    breaks so far equal between query and key. ``form`` "direct" tests each key's step itself instead (no
    count); "counted" also outputs how many entries the mask lets through (a reader no broadcast absorbs)."""
    c = {
        "zero": 0,
        "one": 1,
        "i0": [0],
        "i1": [1],
        "neg1": [-1],
        "gap": gap,
        "start": start,
        "delta": delta,
        "big": -1e9,
        "fzero": 0.0,
    }
    inits = _constants(c)
    n = helper.make_node
    nodes = [
        *_positions(),
        n("Mul", ["r", "delta"], ["steps"]),
        n("Add", ["steps", "start"], ["pos"]),
        n("Unsqueeze", ["pos", "i0"], ["pos1"]),
        n("Concat", ["b", "i1"], ["bs"], axis=0),
        n("Expand", ["pos1", "bs"], ["ids_pos"]),
        n("Slice", ["ids_pos", "i0", "i1", "i1"], ["first"]),
        n("Sub", ["first", "one"], ["before"]),
        n("Concat", ["before", "ids_pos"], ["cat"], axis=-1),
        n("Add", ["s", "i1"], ["s1"]),
        n("Slice", ["cat", "i0", "s", "neg1"], ["lo"]),
        n("Slice", ["cat", "i1", "s1", "neg1"], ["hi"]),
        n("Sub", ["hi", "lo"], ["step"]),
        n("Equal", ["step", "gap"], ["same"]),
        n("Not", ["same"], ["breaks"]),
        n("Cast", ["breaks"], ["breaks_i"], to=TensorProto.INT64),
        n("CumSum", ["breaks_i", "neg1"], ["seqno"]),
        n("Gather", ["seqno", "r"], ["picked"], axis=1),  # read at each query and key index, as transformers does
        n("Unsqueeze", ["picked", "neg1"], ["q"]),
        n("Unsqueeze", ["picked", "i1"], ["k"]),
        n("Equal", ["q", "k"], ["packed"]),
        n("Unsqueeze", ["r", "i0"], ["rk"]),
        n("Unsqueeze", ["r", "neg1"], ["rq"]),
        n("LessOrEqual", ["rk", "rq"], ["causal"]),
        n("Unsqueeze", ["same", "i1"], ["direct"]),
        n(op, ["causal", "direct" if form == "direct" else "packed"], ["mask"]),
        n("Where", ["mask", "fzero", "big"], ["bias"]),
        n("Add", ["scores", "bias"], ["y"]),
        n("Cast", ["mask"], ["mask_i"], to=TensorProto.INT64),
        n("ReduceSum", ["mask_i"], ["count"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "mask",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "seq", "seq"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", "seq"]),
            *([helper.make_tensor_value_info("count", TensorProto.INT64, [])] if form == "counted" else []),
        ],
        inits,
    )
    path = tmp / f"mask-{start}-{delta}-{gap}-{op}-{form}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _dropped(path: Path) -> tuple[Path, int]:
    """The model as `optimize`'s passes before it leave it: weights precomputed, shapes folded, idle ops dropped."""
    g, _ = onnx_io.import_model(path)
    g, _ = fold_shapes(precompute(g)[0])
    g, removed = drop_idle(g)
    out = path.with_suffix(".dropped.onnx")
    onnx_io.save_model(g, out)
    return out, removed


def _run(path: Path, batch: int, seq: int) -> list[np.ndarray]:
    rng = np.random.default_rng([batch, seq])
    feeds = {
        "ids": rng.integers(0, 100, (batch, seq)).astype(np.int64),
        "scores": rng.standard_normal((batch, seq, seq)).astype(np.float32),
    }
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


SIZES = [(1, 16), (2, 7), (1, 1), (3, 2), (0, 4), (2, 0)]


def test_the_packed_sequence_test_of_consecutive_positions_is_dropped(tmp_path: Path) -> None:
    path = _mask_model(tmp_path)
    out, removed = _dropped(path)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert removed >= 10 and "CumSum" not in ops and "Not" not in ops
    _same_everywhere(path, out)


def _same_everywhere(path: Path, out: Path) -> None:
    for batch, seq in SIZES:
        for a, b in zip(_run(path, batch, seq), _run(out, batch, seq), strict=True):
            assert a.shape == b.shape and np.array_equal(a, b), (batch, seq)


@settings(max_examples=16, deadline=None)
@given(
    start=st.sampled_from([0, 1, 5]),
    delta=st.sampled_from([1, 2]),
    gap=st.sampled_from([0, 1, 2]),
    op=st.sampled_from(["And", "Or"]),
    form=st.sampled_from(["packed", "direct", "counted"]),
)
def test_dropping_is_exact_and_happens_only_where_the_test_holds(
    tmp_path_factory, start: int, delta: int, gap: int, op: str, form: str
) -> None:
    """Positions stepping by ``delta`` compared with ``gap``: past the first step (from the -1 put before the
    row) the test is all-true at every size exactly where the two agree, and only an And hands on its other
    operand then (an Or's identity is false); tested directly, the first step must agree too. The pass drops
    it only then, always for the exporter's form (steps of 1; the direct test's type names no dim the
    analysis may assume), and never where a reader would count the mask's entries."""
    path = _mask_model(tmp_path_factory.mktemp("mask"), start, delta, gap, op, form)
    out, _ = _dropped(path)
    dropped = not {"And", "Or"} & {n.op_type for n in onnx.load(str(out)).graph.node}
    holds = delta == gap and op == "And" and (form != "direct" or gap == 1)
    assert not dropped or (holds and form != "counted")
    assert dropped or not (delta == gap == 1 and op == "And" and form == "packed")
    _same_everywhere(path, out)


def test_a_length_taken_from_a_dim_is_assumed_only_where_the_dim_is_at_least_one(tmp_path: Path) -> None:
    """``cat[:, :1]`` is one long only where seq is not 0: its content says so, and the mask's test, which
    is empty where seq is 0, may rely on it."""
    g, _ = onnx_io.import_model(_mask_model(tmp_path))
    g, _ = fold_shapes(precompute(g)[0])
    known = contents(g)
    assert known["first"].assumes == {"seq"} and known["first"].lengths[1] == (1, ())
    assert known["pos"].assumes == frozenset() and known["pos"].coefs == (1,) and known["pos"].offset == 0
    assert known["packed"].splat and known["packed"].offset == 1
    assert "seq" in g.types["packed"].shape


@pytest.mark.parametrize("op", ["And", "Where"])
def test_a_test_that_holds_only_at_nonzero_sizes_is_kept_where_its_type_hides_the_dim(tmp_path: Path, op: str) -> None:
    """``arange(seq)[:1] == 0`` is all-true, but only one long where seq is not 0. Typed ``[batch, 1]`` (as an
    exporter may annotate it), an And with it, or a Where on it, would pass for idle: at seq 0 it empties the
    op's output, so it stays."""
    n = helper.make_node
    inits = _constants({"zero": 0, "one": 1, "i0": [0], "i1": [1]})
    inits.append(numpy_helper.from_array(np.zeros((1, 1), np.float32), "never"))
    kind, np_kind = (TensorProto.BOOL, bool) if op == "And" else (TensorProto.FLOAT, np.float32)
    nodes = [
        *_positions(),
        n("Unsqueeze", ["r", "i0"], ["r1"]),
        n("Concat", ["b", "i1"], ["bs"], axis=0),
        n("Expand", ["r1", "bs"], ["pos"]),
        n("Slice", ["pos", "i0", "i1", "i1"], ["first"]),
        n("Equal", ["first", "zero"], ["starts"]),
        n("And", ["w", "starts"], ["both"]) if op == "And" else n("Where", ["starts", "w", "never"], ["both"]),
        n("Not" if op == "And" else "Neg", ["both"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "first",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("w", kind, ["batch", 1]),
        ],
        [helper.make_tensor_value_info("y", kind, ["batch", "any"])],
        inits,
        value_info=[helper.make_tensor_value_info("starts", TensorProto.BOOL, ["batch", 1])],
    )
    path = tmp_path / f"first-{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    g, _ = onnx_io.import_model(path)
    assert g.types["starts"].shape == ("batch", 1)
    dropped, removed = drop_idle(g)
    assert removed == 0
    out = tmp_path / f"first-{op}.dropped.onnx"
    onnx_io.save_model(dropped, out)
    for seq in (0, 3):
        feeds = {"ids": np.zeros((2, seq), np.int64), "w": np.ones((2, 1), np_kind)}
        runs = [
            ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0] for p in (path, out)
        ]
        assert runs[0].shape == runs[1].shape and np.array_equal(*runs), seq


COMPARISONS = {"Greater": int.__gt__, "GreaterOrEqual": int.__ge__, "Less": int.__lt__, "LessOrEqual": int.__le__}


@settings(max_examples=40, deadline=None)
@given(
    op=st.sampled_from([*COMPARISONS, "Equal"]),
    coefs=st.lists(st.integers(-3, 3), min_size=1, max_size=3),
    offset=st.integers(-5, 5),
)
def test_a_comparison_is_known_only_where_every_index_agrees(op: str, coefs: list[int], offset: int) -> None:
    """`_compared` of ``offset + sum(coefs * index) <op> 0``: where it says true or false, so is every element
    of an index box; and where the difference only grows or falls from its value at index 0 and that value
    decides, it says so."""

    fn = COMPARISONS.get(op, int.__eq__)
    known = _compared(fn, tuple(coefs), offset)
    box = np.indices((5,) * len(coefs)).reshape(len(coefs), -1).T
    seen = {bool(fn(int(offset + box_row @ np.array(coefs)), 0)) for box_row in box}
    if known is not None:
        assert seen == {bool(known)}
    if not any(coefs) or (all(k >= 0 for k in coefs) and op in ("Greater", "GreaterOrEqual") and fn(offset, 0)):
        assert known is not None


@settings(max_examples=16, deadline=None)
@given(op=st.sampled_from([*COMPARISONS, "Equal"]), scale=st.sampled_from([-1, 1, 2]), shift=st.integers(-2, 2))
def test_a_mask_of_positions_against_a_bound_is_dropped_where_it_is_constant(
    tmp_path_factory, op: str, scale: int, shift: int
) -> None:
    """``Where(scale * arange(seq) <op> shift, scores, -1e9)``, as encoders write their padding masks over
    positions: onnxruntime computes the same with the mask dropped, at every size tried, 0 and 1 included."""
    c = {"zero": 0, "one": 1, "scale": scale, "shift": shift, "i0": [0], "big": -1e9}
    inits = _constants(c)
    n = helper.make_node
    nodes = [
        n("Shape", ["scores"], ["s"], start=1, end=2),
        n("Squeeze", ["s"], ["seq"]),
        n("Range", ["zero", "seq", "one"], ["r"]),
        n("Mul", ["r", "scale"], ["pos"]),
        n("Unsqueeze", ["pos", "i0"], ["row"]),
        n(op, ["row", "shift"], ["keep"]),
        n("Where", ["keep", "scores", "big"], ["masked"]),
        n("Neg", ["masked"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bound",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])],
        inits,
    )
    path = tmp_path_factory.mktemp("bound") / "bound.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    out, _ = _dropped(path)
    for batch, seq in [(1, 1), (2, 5), (1, 0), (0, 3), (3, 40)]:
        feeds = {"scores": np.random.default_rng([batch, seq]).standard_normal((batch, seq)).astype(np.float32)}
        runs = [
            ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0] for p in (path, out)
        ]
        assert runs[0].shape == runs[1].shape and np.array_equal(*runs), (batch, seq)
    dropped = "Where" not in {node.op_type for node in onnx.load(str(out)).graph.node}
    never = {"GreaterOrEqual": shift <= 0 <= scale, "Greater": shift < 0 <= scale, "LessOrEqual": scale <= 0 <= shift}
    assert dropped == never.get(op, op == "Less" and scale <= 0 < shift)


def test_the_dims_the_fold_names_anew_are_sized_for_the_cost_model(tmp_path: Path) -> None:
    """The shape fold re-infers, and inference names inner dims afresh (``folded__3``): the run must size every
    one of them, or the cost model costs those units at size 1 and the search chooses by it (ViT-B/16's GELU
    scale moved into a weight, which onnxruntime then cannot fuse)."""
    from taso.optimize.pipeline import fold_shape_arithmetic
    from taso.optimize.report import Report, quiet
    from taso.optimize.run import Checking, Run, Settings

    path = _mask_model(tmp_path)
    g, _ = onnx_io.import_model(path)
    report = Report(str(path), "", len(g.nodes), 0, opaque_nodes=0, proved_rules=0)
    run = Run(
        path,
        tmp_path / "out.onnx",
        tmp_path / "store.db",
        Settings(dims={"batch": 1, "seq": 16}),
        Checking(),
        tmp_path,
        quiet,
        report,
        imported=g,
        graph=g,
    )
    folded = fold_shape_arithmetic(run)
    named = {d for t in folded.graph.types.values() if t.shape for d in t.shape if isinstance(d, str)}
    assert any(d.startswith("folded__") for d in named)
    assert named <= set(folded.folded_dims) | {"batch", "seq"}
    assert folded.folded_dims["seq"] == 16


def test_an_int32_is_known_only_from_a_splat_it_holds(tmp_path: Path) -> None:
    """A Cast to int32 wraps what it cannot hold: positions scaled past 2**31 are not followed through it, a
    splat that fits is."""
    n = helper.make_node
    inits = _constants({"zero": 0, "one": 1, "big": 2**31, "i0": [0]})
    nodes = [
        n("Shape", ["x"], ["s"], start=0, end=1),
        n("Squeeze", ["s"], ["seq"]),
        n("Range", ["zero", "seq", "one"], ["r"]),
        n("Mul", ["r", "big"], ["far"]),
        n("Cast", ["far"], ["far32"], to=TensorProto.INT32),
        n("Cast", ["one"], ["one32"], to=TensorProto.INT32),
        n("Add", ["far32", "one32"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "wrap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq"])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["seq"])],
        inits,
    )
    path = tmp_path / "wrap.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    g, _ = onnx_io.import_model(path)
    known = contents(fold_shapes(precompute(g)[0])[0])
    assert known["far"].coefs == (2**31,) and "far32" not in known
    assert known["one32"].splat and known["one32"].offset == 1


def test_a_narrower_operand_never_narrows_a_graph_output(tmp_path: Path) -> None:
    """A Where on an all-true mask hands on its scalar 0, but the Neg that reads it writes the model's output,
    whose shape would shrink to a scalar with it: the Where stays."""
    inits = _constants({"zero": 0, "one": 1, "i0": [0], "fzero": 0.0, "big": -1e9})
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["scores"], ["s"], start=1, end=2),
            helper.make_node("Squeeze", ["s"], ["seq"]),
            helper.make_node("Range", ["zero", "seq", "one"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "i0"], ["row"]),
            helper.make_node("GreaterOrEqual", ["row", "zero"], ["keep"]),
            helper.make_node("Where", ["keep", "fzero", "big"], ["bias"]),
            helper.make_node("Neg", ["bias"], ["y"]),
        ],
        "output",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq"])],
        inits,
    )
    path = tmp_path / "output.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    g, _ = onnx_io.import_model(path)
    dropped, removed = drop_idle(fold_shapes(g)[0])
    assert removed == 0 and dropped.types["y"].shape == (1, "seq")
