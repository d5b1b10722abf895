"""Cost model on the CPU provider: fusion-aware units, the SQLite cache keyed by device, the profile CLI."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import subst
from hypothesis import given
from hypothesis import strategies as st

from taso import onnx as onnx_io
from taso.cachedir import cost_cache
from taso.cost import model as cost
from taso.cost import profiler
from taso.errors import BadInput
from taso.execute import Runner, random_inputs
from taso.execute.precompute import precompute
from taso.ir import TensorType, WeightData, parse_graph
from taso.rules import store

CONV_CHAIN = """graph(%x: float32[1,4,8,8], %w: float32[8,4,3,3] weight, %s: float32[8] weight, %b: float32[8] weight,
      %m: float32[8] weight, %v: float32[8] weight, %w2: float32[8,8,1,1] weight):
  %c = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,8,8,8]
  %n = BatchNormalization(%c, %s, %b, %m, %v) {epsilon=0.001} : float32[1,8,8,8]
  %r = Relu(%n) : float32[1,8,8,8]
  %c2 = Conv(%r, %w2) {dilations=[1,1], group=1, kernel_shape=[1,1], pads=[0,0,0,0], strides=[1,1]} : float32[1,8,8,8]
  %a = Add(%c2, %r) : float32[1,8,8,8]
  %y = Relu(%a) : float32[1,8,8,8]
  return %y"""


def _with_weights(text: str, seed: int = 0):
    g = parse_graph(text)
    rng = np.random.default_rng(seed)
    data = {w: rng.uniform(0.5, 1.5, g.types[w].shape).astype(np.float32) for w in g.weights}
    return replace(g, data={k: WeightData(v) for k, v in data.items()})


def test_units_fuse_what_onnxruntime_fuses() -> None:
    g = _with_weights(CONV_CHAIN)
    labels = [u.label for u in cost.units(g)]
    # Conv+BN+Relu fold into one kernel; the residual Add and its Relu join the second conv (ORT's FusedConv).
    assert labels == ["Conv+BatchNormalization+Relu", "Conv+Add+Relu"]


def test_non_epilogue_ops_start_their_own_unit() -> None:
    g = _with_weights(
        """graph(%x: float32[4,4], %w: float32[4,4] weight, %b: float32[4] weight):
          %m = MatMul(%x, %w) : float32[4,4]
          %a = Add(%m, %b) : float32[4,4]
          %t = Tanh(%m) : float32[4,4]
          %s = Transpose(%a) {perm=[1,0]} : float32[4,4]
          %y = MatMul(%s, %w) : float32[4,4]
          %z = Add(%y, %t) : float32[4,4]
          %p = Softmax(%z) {axis=-1} : float32[4,4]
          return %p"""
    )
    # both consumers of %m are epilogues of the first MatMul; Transpose is not; the last Add joins the latest
    # head, and the Softmax after it too (onnxruntime's BiasSoftmax)
    assert [u.label for u in cost.units(g)] == ["MatMul+Add+Tanh", "Transpose", "MatMul+Add+Softmax"]


def test_weight_only_nodes_cost_nothing() -> None:
    g = _with_weights(
        """graph(%x: float32[2,4], %w: float32[4,4] weight):
          %wt = Transpose(%w) {perm=[1,0]} : float32[4,4]
          %y = MatMul(%x, %wt) : float32[2,4]
          return %y"""
    )
    assert [u.label for u in cost.units(g)] == ["MatMul"]
    assert [n.op for n in cost.unit_graph(g, cost.units(g)[0]).nodes] == ["Transpose", "MatMul"]


def test_equal_units_share_a_key_and_different_shapes_do_not(bert_path: Path) -> None:
    def keys(seq: int) -> dict[str, list[str]]:
        g = onnx_io.concretize(onnx_io.load_model(bert_path), {"batch": 1, "seq": seq})
        out: dict[str, list[str]] = {}
        for u in cost.units(g):
            out.setdefault(u.label, []).append(cost.unit_key(cost.unit_graph(g, u)))
        return out

    k8, k16 = keys(8), keys(16)
    label = "MatMul+Add+Add+LayerNormalization"  # a projection, its bias, the residual and the norm after it
    assert len(set(k8[label])) < len(k8[label])  # attention and FFN outputs, one shape each
    assert set(k8[label]).isdisjoint(k16[label])  # another seq: another unit


def test_replicated_unit_computes_the_same_in_every_copy(tmp_path: Path) -> None:
    g = _with_weights(CONV_CHAIN)
    ug = cost.unit_graph(g, cost.units(g)[0])
    many = cost.replicate(ug, 3)
    assert len(many.inputs) == 3 and len(set(many.inputs)) == 3 and many.weights == ug.weights
    feeds = random_inputs(ug, seed=1)
    single = Runner(onnx_io.save_model(ug, tmp_path / "one.onnx"))(feeds)
    copies = Runner(onnx_io.save_model(many, tmp_path / "many.onnx"))(
        {f"{k}#{c}": v for k, v in feeds.items() for c in range(3)}
    )
    for c in range(3):
        np.testing.assert_allclose(copies[f"{ug.outputs[0]}#{c}"], single[ug.outputs[0]], rtol=1e-5)


def test_analytic_estimate_grows_with_work(calibration: cost.Calibration) -> None:
    def mm(n: int):
        return _with_weights(
            f"graph(%x: float32[{n},{n}], %w: float32[{n},{n}] weight):\n  %y = MatMul(%x, %w) : float32[{n},{n}]\n  return %y"
        )

    small, large = mm(16), mm(256)
    assert cost.flops(large) == 2 * 256**3 and cost.traffic(large) == 3 * 256 * 256 * 4
    assert calibration.estimate(large) > calibration.estimate(small) > 0


def test_cache_hit_on_second_run_and_device_key_respected(tmp_path: Path, cpu, calibration) -> None:
    g = _with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    first = cost.CostModel(cpu, db, calibration=calibration)
    a = first.graph_cost(g)
    assert first.measured == len(a.units) and a.estimated == 0 and a.total_ms > 0
    second = cost.CostModel(cpu, store.open_store(tmp_path / "s.db"), calibration=calibration)
    b = second.graph_cost(g)
    assert second.measured == 0 and second.cached == len(b.units) and b.total_ms == a.total_ms
    other = replace(cpu, name="another CPU")
    third = cost.CostModel(other, store.open_store(tmp_path / "s.db"), calibration=calibration)
    third.graph_cost(g)
    assert third.measured == len(a.units) and third.cached == 0
    refreshed = cost.CostModel(cpu, store.open_store(tmp_path / "s.db"), refresh=True, calibration=calibration)
    refreshed.graph_cost(g)
    assert refreshed.measured == len(a.units)
    devices = {r["device"] for r in db["costs"].rows}
    assert devices == {cpu.key, other.key}


def test_past_the_measure_limit_units_are_estimated_and_a_later_run_measures_them(
    tmp_path: Path, cpu, calibration
) -> None:
    g = _with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    limited = cost.CostModel(cpu, db, calibration=calibration)
    limited.measure_until = 0.0
    a = limited.graph_cost(g)
    assert limited.measured == 0 and limited.measuring_s == 0 and a.estimated == len(a.units)
    later = cost.CostModel(cpu, store.open_store(tmp_path / "s.db"), calibration=calibration)
    b = later.graph_cost(g)
    assert later.measured == len(b.units) and b.estimated == 0 and later.measuring_s > 0


def test_the_measure_limit_bounds_a_fresh_store_s_calibration(tmp_path: Path, cpu) -> None:
    """Calibration is the first measurement a fresh store makes: with no seconds to measure it is not made (the
    defaults stand in, stored nowhere, and say so), and its seconds count against the limit the units share."""
    g = _with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    none = cost.CostModel(cpu, db, measure_limit=0.0)
    a = none.graph_cost(g)
    assert none.calibration_estimated and none.calibration == cost.DEFAULT_CALIBRATION
    assert none.measuring_s == 0 and none.measured == 0 and a.estimated == len(a.units)
    assert db["devices"].count == 0 and db["costs"].count == 0
    spent = cost.CostModel(cpu, store.open_store(tmp_path / "s.db"), measure_limit=1e-9)  # calibration spends it
    b = spent.graph_cost(g)
    assert not spent.calibration_estimated and spent.measuring_s > 0 and db["devices"].count == 1
    assert spent.measured == 0 and b.estimated == len(b.units)


def test_a_unit_used_often_is_costed_at_the_median_of_three_measurements(tmp_path: Path, cpu, calibration) -> None:
    relus = "\n".join(f"  %r{i + 1} = Relu(%r{i}) : float32[64,64]" for i in range(cost.SETTLE_COUNT))
    g = parse_graph(
        f"graph(%r0: float32[64,64]):\n{relus}\n  %t = Tanh(%r{cost.SETTLE_COUNT}) : float32[64,64]\n  return %t"
    )
    db = store.create(tmp_path / "s.db")
    model = cost.CostModel(cpu, db, calibration=calibration)
    by_label = {u.label: u for u in model.graph_cost(g).units}
    relu, tanh = by_label["Relu"], by_label["Tanh"]
    assert relu.count == cost.SETTLE_COUNT and tanh.count == 1
    taken = model.samples[relu.key][1]
    assert len(taken) == 3 and relu.ms == statistics.median(taken)
    assert len(model.samples[tanh.key][1]) == 1
    stored = {r["label"]: r["ms"] for r in db["costs"].rows}
    assert stored["Relu"] == relu.ms  # what a second run reads back
    model.graph_cost(g)
    assert len(model.samples[relu.key][1]) == 3  # settled once, not again for every graph


def test_a_cost_the_model_has_handed_out_is_not_settled_later(tmp_path: Path, cpu, calibration) -> None:
    """A unit measured where a graph uses it once keeps that cost when a later graph uses it often: a search
    compared with it, and a warm run reading it from the store must make the same comparisons."""
    one = parse_graph("graph(%r0: float32[64,64]):\n  %r1 = Relu(%r0) : float32[64,64]\n  return %r1")
    relus = "\n".join(f"  %r{i + 1} = Relu(%r{i}) : float32[64,64]" for i in range(cost.SETTLE_COUNT))
    many = parse_graph(f"graph(%r0: float32[64,64]):\n{relus}\n  return %r{cost.SETTLE_COUNT}")
    model = cost.CostModel(cpu, store.create(tmp_path / "s.db"), calibration=calibration)
    first = model.graph_cost(one).units[0]
    again = model.graph_cost(many).units[0]
    assert again.key == first.key and again.count == cost.SETTLE_COUNT
    assert again.ms == first.ms and len(model.samples[first.key][1]) == 1


def test_units_are_measured_side_by_side_each_cost_landing_on_its_own(
    tmp_path: Path, cpu, calibration, timed: list[int]
) -> None:
    """A graph's new units are timed in one measurement (`MEASURE_BATCH` at a time), not one each: a 256x256
    MatMul and a Relu of eight floats come back each at its own cost; a unit that cannot run alone (a Reshape
    to a shape drawn at random) fails the batch, which is then measured unit by unit, that one estimated with
    onnxruntime's error as its note and the others measured."""
    g = _with_weights(
        """graph(%x: float32[256,256], %w: float32[256,256] weight, %s: float32[1,8]):
          %m = MatMul(%x, %w) : float32[256,256]
          %r = Relu(%s) : float32[1,8]
          return %m, %r"""
    )
    db = store.create(tmp_path / "s.db")
    model = cost.CostModel(cpu, db, calibration=calibration)
    by_label = {u.label: u for u in model.graph_cost(g).units}
    assert len(timed) == 1 and model.measured == 2  # both in one time_models call
    assert by_label["MatMul"].ms > by_label["Relu"].ms and not by_label["Relu"].estimated
    bad = parse_graph(
        """graph(%s: float32[1,8], %v: float32[2,3], %d: int64[2]):
          %r = Tanh(%s) : float32[1,8]
          %q = Reshape(%v, %d) : float32[3,2]
          return %r, %q"""
    )
    timed.clear()
    by_label = {u.label: u for u in model.graph_cost(bad).units}
    assert len(timed) == 3  # the batch, then each unit alone
    assert by_label["Reshape"].estimated and not by_label["Tanh"].estimated
    notes = {r["label"]: r["note"] for r in db["costs"].rows}
    assert notes["Reshape"] and not notes["Tanh"]


def test_each_round_opens_the_sessions_in_another_order(tmp_path: Path, cpu, monkeypatch) -> None:
    small = parse_graph("graph(%x: float32[1,8]):\n  %y = Relu(%x) : float32[1,8]\n  return %y")
    large = _with_weights(
        """graph(%x: float32[256,256], %w: float32[256,256] weight):
          %a = MatMul(%x, %w) : float32[256,256]
          %b = MatMul(%a, %w) : float32[256,256]
          %y = MatMul(%b, %w) : float32[256,256]
          return %y"""
    )
    graphs = [small, large, small]
    paths = [onnx_io.save_model(g, tmp_path / f"{i}.onnx") for i, g in enumerate(graphs)]
    opened_first: list[str] = []

    def recording(models, *args, **kwargs):
        opened_first.append(models[0][0])
        return timing(models, *args, **kwargs)

    timing = cost.time_models
    monkeypatch.setattr(cost, "time_models", recording)
    heard: list[tuple[int, int]] = []
    per = cost.interleaved_rounds(paths, graphs, cpu, rounds=3, progress=lambda *a: heard.append(a))
    assert sorted(opened_first) == sorted(map(str, paths))  # every model opened first once
    assert all(s < m > t for s, m, t in zip(*per))  # and every round's times land on their own model
    assert heard == [(1, 3), (2, 3), (3, 3)]  # a round of a large model takes seconds: each one is told


GELU = """graph(%x: float32[4,64], %a: float32[] = 0.044715, %one: float32[] = 1.0, %k: float32[] = 0.7978845834732056,
      %half: float32[] = 0.5):
  %m1 = Mul(%x, %a) : float32[4,64]
  %m2 = Mul(%m1, %x) : float32[4,64]
  %a1 = Add(%m2, %one) : float32[4,64]
  %m4 = Mul(%x, %k) : float32[4,64]
  %m3 = Mul(%a1, %m4) : float32[4,64]
  %t = Tanh(%m3) : float32[4,64]
  %a2 = Add(%t, %one) : float32[4,64]
  %m6 = Mul(%x, %half) : float32[4,64]
  %y = Mul(%m6, %a2) : float32[4,64]
  return %y"""


def test_a_unit_onnxruntime_fuses_only_when_read_on_is_timed_read_on(
    tmp_path: Path, cpu, calibration, timed: list[int]
) -> None:
    """onnxruntime fuses a GELU chain into one FastGelu kernel only when its last node does not write a graph
    output: the unit is timed with its output read on, and the reading Reshape's own cost taken off."""
    gelu = parse_graph(GELU)
    assert cost.fused_when_read(gelu)
    assert profiler.optimized_ops(onnx_io.model_bytes(cost.read_on(gelu)), cuda=False).get("FastGelu") == 1
    assert not cost.fused_when_read(parse_graph(GELU.replace("Tanh(", "Sigmoid(")))  # no fusion to unblock
    feeds = random_inputs(gelu, seed=1)
    plain, read = (
        Runner(onnx_io.save_model(h, tmp_path / f"{i}.onnx"))(feeds) for i, h in enumerate((gelu, cost.read_on(gelu)))
    )
    np.testing.assert_allclose(read["y#flat"], plain["y"].reshape(-1), rtol=1e-5)
    sink = cost.sinks(gelu)
    assert [n.op for n in sink.nodes] == ["Reshape"] and sink.inputs == gelu.outputs
    cost.measure_marginal(gelu, cpu, calibration.run_ms)
    cost.measure_marginal(parse_graph(GELU.replace("Tanh(", "Sigmoid(")), cpu, calibration.run_ms)
    assert timed == [4, 2]  # read on, five copies of it, the sinks alone and five copies; else one and five


def test_a_units_fusion_is_asked_of_onnxruntime_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit settled is measured three times; whether it fuses only when read on is asked once (two sessions),
    and a unit that differs where a fusion's pattern looks (Sigmoid for Tanh) is asked anew."""
    asked: list[int] = []
    ops_of = cost.optimized_ops
    monkeypatch.setattr(cost, "optimized_ops", lambda *a, **k: asked.append(1) or ops_of(*a, **k))
    gelu = GELU.replace("[4,64]", "[4,96]")  # no other test asks of this one
    assert cost.fused_when_read(parse_graph(gelu)) and len(asked) == 2
    assert cost.fused_when_read(parse_graph(gelu)) and len(asked) == 2
    assert not cost.fused_when_read(parse_graph(gelu.replace("Tanh(", "Sigmoid("))) and len(asked) == 4


def test_estimates_without_measuring(cpu, calibration) -> None:
    g = _with_weights(CONV_CHAIN)
    model = cost.CostModel(cpu, None, measure=False, calibration=calibration)
    c = model.graph_cost(g)
    assert model.measured == 0 and c.estimated == len(cost.units(g)) and c.total_ms > calibration.run_ms


def test_device_choice(cpu) -> None:
    assert profiler.pick_device("auto").provider in (profiler.CPU, profiler.CUDA)
    assert cpu.provider == profiler.CPU and "ort-" in cpu.key
    if not profiler.cuda_works():
        with pytest.raises(BadInput, match="CUDA provider is not available"):
            profiler.pick_device("cuda")
    with pytest.raises(BadInput, match="unknown device"):
        profiler.pick_device("tpu")


def test_profile_cli_caches_per_user(tmp_path: Path, bert_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --dim every dim is 1, and every unit is measured: at size 1, Range's length over Shape(input_ids)
    stayed unknown to shape inference, and 26 of BERT-tiny's 32 units were estimated."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["profile", bert_path, "--device", "cpu", "--json"]
    r = subst(*args)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["measured_now"] == first["distinct_units"] > 0 and first["estimated"] == 0
    assert first["measured_ms"] > 0 and first["predicted_ms"] > 0
    assert first["host_slowdown"] > 0  # the reference run timed beside the whole model, over the quick one
    r = subst(*args, "--dim", "batch=1", "--dim", "seq=1", "--no-measure-model")
    second = json.loads(r.stdout)  # the default sizes, named: the same units
    assert second["measured_now"] == 0 and second["from_cache"] == first["measured_now"]
    assert (tmp_path / "cache" / "subst" / "costs.db").is_file()
    r = subst("profile", bert_path, "--dim", "seq")
    assert r.returncode == 2 and "NAME=SIZE" in r.stderr


def test_profile_measures_nothing_past_its_measure_limit(
    tmp_path: Path, bert_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["profile", bert_path, "--device", "cpu", "--measure-limit", "0", "--no-measure-model"]
    r = subst(*args, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["measured_now"] == 0 and out["estimated"] == out["units"] > 0 and out["estimated_calibration"]
    cache, _ = cost_cache()  # a fresh cache, not calibrated: a later run does it
    assert "devices" not in cache.table_names() or cache["devices"].count == 0
    assert "device calibration estimated" in subst(*args).stdout


def test_reference_table_reproduces_costs_without_measuring(tmp_path: Path, cpu, calibration) -> None:
    g = _with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    model = cost.CostModel(cpu, db, calibration=calibration)
    measured = model.graph_cost(g)
    assert cost.export_reference(model, str(tmp_path / "ref.json")) == len(measured.units)
    reference = cost.reference_model(str(tmp_path / "ref.json"))
    again = reference.graph_cost(g)
    assert reference.measured == 0 and again.estimated == 0
    assert again.total_ms == pytest.approx(model.at_quick_host(measured).total_ms) and reference.device == cpu
    assert reference.host_scale() == 1.0  # the table is at the quick host speed already


@given(st.integers(1, 6), st.integers(0, 20))
def test_visiting_order_balances_every_pair_of_rounds(variants: int, pair: int) -> None:
    """Over rounds 2k and 2k+1 every variant's positions add up alike (a linear drift hits all alike), and over
    ``variants`` pairs each variant goes first once."""
    first, second = profiler.visiting_order(variants, 2 * pair), profiler.visiting_order(variants, 2 * pair + 1)
    assert sorted(first) == sorted(second) == list(range(variants))
    assert {first.index(i) + second.index(i) for i in range(variants)} == {variants - 1}
    leaders = [profiler.visiting_order(variants, 2 * (pair + k))[0] for k in range(variants)]
    assert sorted(leaders) == list(range(variants))


@given(st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(0.01, 1.0)), max_size=8), st.floats(0.01, 1.0))
def test_quick_mode_rounds_are_those_within_a_slow_spell_of_the_quick_host(
    taken: list[tuple[float, float]], quick: float
) -> None:
    """What a prediction at the quick host is compared with: the rounds whose reference ran at most SLOW_SPELL
    times the quick one, in order; a round with no reference counts as quick (nothing says it was slow)."""
    timings = [profiler.Timing(ms, 40, 0.0, reference_ms=ref) for ms, ref in taken]
    timings.append(profiler.Timing(1.0, 40, 0.0))
    kept = profiler.in_quick_mode(timings, quick)
    assert kept == [ms for ms, ref in taken if ref <= profiler.SLOW_SPELL * quick] + [1.0]


rounds = st.lists(st.floats(0.1, 10.0), min_size=3, max_size=7)


@given(rounds, st.data())
def test_clearly_faster_is_one_sided_monotone_and_wants_nearly_every_round(
    before: list[float], data: st.DataObject
) -> None:
    after = data.draw(st.lists(st.floats(0.1, 10.0), min_size=len(before), max_size=len(before)))
    verdict = cost.clearly_faster(before, after)
    assert not (verdict and cost.clearly_faster(after, before))  # never both ways
    if sum(a >= b for b, a in zip(before, after)) >= 2:
        assert not verdict  # two rounds lost: noise, not a gain
    if verdict:  # a result faster still, in any round, stays clearly faster
        k = data.draw(st.integers(0, len(after) - 1))
        assert cost.clearly_faster(before, [a * 0.5 if i == k else a for i, a in enumerate(after)])
    assert cost.clearly_faster(before, [b * 0.9 for b in before])  # faster in every round
    assert not cost.clearly_faster(before, list(before))  # the same times are not a gain


@given(dims=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_static_shapes_fold_and_what_is_computed_from_them_costs_nothing(dims: list[int], data: st.DataObject) -> None:
    start = data.draw(st.integers(-len(dims), len(dims) - 1))
    shape = ",".join(map(str, dims))
    g = _with_weights(
        f"""graph(%x: float32[{shape}], %one: int64[1] weight):
          %s = Shape(%x) {{start={start}}} : int64[{len(dims[start:])}]
          %t = Add(%s, %one) : int64[{len(dims[start:])}]
          %r = Relu(%x) : float32[{shape}]
          return %r, %t"""
    )
    folded = precompute.fold_static_shapes(g)
    assert "Shape" not in [n.op for n in folded.nodes]
    np.testing.assert_array_equal(folded.data["s"].array, dims[start:])
    assert [u.label for u in cost.units(folded)] == ["Relu"]  # the Add on shapes is a constant now
    dynamic = replace(g, types={**g.types, "x": TensorType("float32", ("n", *dims[1:]))})
    assert precompute.fold_static_shapes(dynamic) is dynamic


def test_view_ops_join_the_unit_of_what_they_view() -> None:
    g = _with_weights(
        """graph(%x: float32[2,8], %w: float32[8,8] weight, %shape: int64[3] weight):
          %v = Reshape(%x, %shape) : float32[2,2,4]
          %m = MatMul(%x, %w) : float32[2,8]
          %r = Reshape(%m, %shape) : float32[2,2,4]
          %t = Transpose(%r) {perm=[0,2,1]} : float32[2,4,2]
          %f = Flatten(%t) {axis=1} : float32[2,8]
          return %v, %f"""
    )
    g = replace(g, data={**g.data, "shape": WeightData(np.array([2, 2, 4], np.int64))})
    # a view of a graph input has no unit to join; the views of the MatMul's and the Transpose's outputs
    # run as no kernel of their own
    assert [u.label for u in cost.units(g)] == ["Reshape", "MatMul+Reshape", "Transpose+Flatten"]
    # and are not timed: the views a unit ends with leave it, a view other ops of the unit read stays
    timed = [[n.op for n in cost.unit_graph(g, u).nodes] for u in cost.units(g)]
    assert timed == [["Reshape"], ["MatMul"], ["Transpose"]]
    assert cost.unit_graph(g, cost.units(g)[1]).outputs == ("m",)


def test_a_view_read_inside_its_unit_is_timed() -> None:
    g = _with_weights(
        """graph(%x: float32[2,8], %w: float32[8,8] weight, %shape: int64[3] weight, %b: float32[4] weight):
          %m = MatMul(%x, %w) : float32[2,8]
          %r = Reshape(%m, %shape) : float32[2,2,4]
          %a = Add(%r, %b) : float32[2,2,4]
          %s = Squeeze(%a) : float32[2,2,4]
          return %s"""
    )
    g = replace(g, data={**g.data, "shape": WeightData(np.array([2, 2, 4], np.int64))})
    (unit,) = cost.units(g)
    assert unit.label == "MatMul+Reshape+Add+Squeeze"
    assert [n.op for n in cost.unit_graph(g, unit).nodes] == ["MatMul", "Reshape", "Add"]


def test_a_measurement_in_a_slow_spell_is_taken_again(cpu: profiler.Device) -> None:
    model, feeds = profiler._reference()
    quick = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=5)[0]
    assert quick.reference_ms is not None and quick.reference_ms > 0 and len(quick.values) == 5
    profiler._quickest[cpu.key] = quick.reference_ms / 100  # as if the host had once been 100x quicker
    try:
        slow = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=5)[0]
    finally:
        profiler._quickest.pop(cpu.key)
    assert slow.attempts == profiler.ATTEMPTS


def test_unit_costs_are_scaled_to_the_host_speed_of_the_calibration(cpu, calibration) -> None:
    assert calibration.reference_ms > 0  # calibrate keeps the quickest reference run it saw
    g = _with_weights(
        "graph(%x: float32[256,256], %w: float32[256,256] weight):\n"
        "  %y = MatMul(%x, %w) : float32[256,256]\n  return %y"
    )
    (ug,) = (cost.unit_graph(g, u) for u in cost.units(g))
    ms, timing = cost.measure_marginal(ug, cpu, calibration.run_ms)
    assert timing.reference_ms is not None and timing.reference_ms > 0
    as_calibrated = cost.to_calibrated_host(ms, timing, calibration)
    e = cost.HOST_ELASTICITY
    assert as_calibrated == pytest.approx(ms * (calibration.reference_ms / timing.reference_ms) ** e) and ms > 0
    # a calibration taken on a host 50x slower: the same unit, measured now, costs as on that host, less the
    # part of it the GPU spends, which the host's speed does not move
    slow_host = cost.to_calibrated_host(ms, timing, replace(calibration, reference_ms=50 * calibration.reference_ms))
    assert as_calibrated * 50**e == pytest.approx(slow_host) and slow_host < 50 * as_calibrated


def test_reports_are_at_the_hosts_quick_speed(tmp_path: Path, cpu, calibration, timed: list[int]) -> None:
    g = _with_weights(CONV_CHAIN)
    db = store.create(tmp_path / "s.db")
    model = cost.CostModel(cpu, db, calibration=calibration)
    measured = model.graph_cost(g)
    logged = [r["reference_ms"] for r in db["host_speed"].rows_where("device = ?", [model.key])]
    assert len(logged) == len(timed) > 0 and model.measured > 0  # every measurement logs how quick the host was
    quickest_tenth = sorted(logged)[int(cost.QUICK_QUANTILE * (len(logged) - 1))]
    assert model.host_slowdown() == pytest.approx(quickest_tenth / calibration.reference_ms)
    assert model.host_scale() == pytest.approx(model.host_slowdown() ** cost.HOST_ELASTICITY)

    def log(ms: float, times: int, device: str = model.key) -> None:
        db["host_speed"].insert_all([{"device": device, "reference_ms": ms, "measured_at": "t"}] * times)

    log(3 * calibration.reference_ms, cost.HOST_LOG)  # a day on a host 3x slower than at calibration
    log(calibration.reference_ms / 10, cost.HOST_LOG, device="another GPU")  # not this device's
    later = cost.CostModel(cpu, store.open_store(tmp_path / "s.db"), calibration=calibration)
    again = later.graph_cost(g)
    assert later.measured == 0 and again.total_ms == measured.total_ms  # what a search compares stays put
    assert later.host_slowdown() == pytest.approx(3.0)
    k = 3.0**cost.HOST_ELASTICITY  # costs move by the slowdown to the power HOST_ELASTICITY, not in full
    quick = later.at_quick_host(again)
    assert quick.total_ms == pytest.approx(k * again.total_ms)
    assert [u.ms for u in quick.units] == pytest.approx([k * u.ms for u in again.units])
    slow, quick_mode = int(0.7 * cost.HOST_LOG), cost.HOST_LOG - int(0.7 * cost.HOST_LOG)
    log(2 * calibration.reference_ms, quick_mode)  # a bimodal host: mostly slow, at times 2x, not 3x
    log(3 * calibration.reference_ms, slow)
    assert later.host_slowdown() == pytest.approx(2.0)  # its quick mode, not the median
    log(calibration.reference_ms, cost.HOST_LOG)  # then as quick as at calibration: the latest runs count
    assert later.host_slowdown() == pytest.approx(1.0) and later.host_scale() == pytest.approx(1.0)


def test_a_store_calibrated_before_the_yardstick_was_kept_still_opens(tmp_path: Path, cpu) -> None:
    db = store.create(tmp_path / "old.db")
    db["devices"].insert(
        {"device": cpu.key, "run_ms": 0.01, "kernel_ms": 0.002, "gflops": 50.0, "gbps": 10.0, "measured_at": "then"},
        pk="device",
    )
    model = cost.CostModel(cpu, db)
    assert model.calibration == cost.Calibration(0.01, 0.002, 50.0, 10.0, 0.0)  # read back, not re-measured
    assert "reference_ms" in db["devices"].columns_dict
