"""Target-directed generation (`taso.generate.target`): the exporters' spellings of a target found, only those of
its fingerprint paired with it, planted false targets never proved (real z3), the same rules on 1 or 2 workers
and on Ray, and `subst generate --target` refusing bad input in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import bounded, subst

from taso import ops
from taso.errors import BadInput
from taso.generate import LocalExecutor
from taso.generate import abstract as ab
from taso.generate.storing import save_rules
from taso.generate.target import Move, Problem, _children, generate_target, meaning
from taso.generate.targets import SHIPPED, Target, functions, load_targets
from taso.ir import format_graph, parse_graph
from taso.rules import SPECS_DIR, Rule, lifted, store
from taso.verify import load_specs, run_graph, verify_rows
from taso.verify.admit import normalised


def _ops(text: str) -> list[str]:
    return [n.op for n in parse_graph(text).nodes]


def _targets(tmp_path: Path, body: str) -> dict[str, Target]:
    path = tmp_path / "targets.toml"
    path.write_text(body)
    return load_targets(path)


def test_the_normal_form_equates_the_exporters_spellings() -> None:
    """x / c and x * (1/c), a - b and a + (-b), Pow(x, 2) and x * x, operands in either order: one expression."""
    x, y = ab.leaf("x"), ab.leaf("y")
    assert ab.mul(x, ab.inv(ab.const(1.4142135))) == ab.mul(ab.const(0.70710677), x)
    assert ab.add(x, ab.mul(y, ab.const(-1.0))) == ab.add(ab.mul(ab.const(-1.0), y), x)
    assert ab.power(x, 2.0) == ab.mul(x, x)
    assert ab.inv(ab.mul(x, ab.fn("sqrt", y))) == ab.mul(ab.inv(ab.fn("sqrt", y)), ab.inv(x))
    assert ab.fn("erf", x) != ab.fn("tanh", x)


def test_the_vocabulary_is_the_catalogue_ops_with_a_meaning() -> None:
    """Each op's meaning lives in its entry (`OpDef.meaning`) and is read by the targets' language; the
    generator spells targets in exactly those ops, and a unary one's ``f(a)`` makes ``f`` a function of the
    language (erf by Erf's entry; Relu has none, so no target may say relu). An op with an attribute (Softmax's
    axis, Transpose's perm) comes once per value the target's expression applies it with: none for LayerNorm."""
    problem = Problem(load_targets()["layernorm"], 3)
    assert {m.op for m in problem.moves} == {n for n, d in ops.OPS.items() if d.meaning} - {"Softmax", "Transpose"}
    assert {"erf", "tanh", "sigmoid", "sqrt", "exp"} <= functions() and "relu" not in functions()
    x, y = ab.leaf("x"), ab.leaf("y")
    assert meaning(Move("Div", 2), [x, y]) == ab.mul(x, ab.inv(y))
    assert meaning(Move("Sub", 2), [x, y]) == ab.add(x, ab.mul(y, ab.const(-1.0)))
    mean = Move("ReduceMean", 1, reduces=1, shape=(2, 4))
    assert meaning(mean, [x]) == ab.mul(ab.fn("sum", x, 1), ab.const(0.25))


def test_erf_gelu_five_op_spellings_are_found_and_paired() -> None:
    """The exporters' erf-GELU (Div by sqrt(2), Erf, Add 1, Mul x, Mul 0.5) and its reorderings are found at 5
    ops, and every one pairs with Gelu: its field rule is its decomposition, and x / 1.4142135 and x *
    0.70710677 are one function because both constants are read as sqrt 2's (`taso.ops.numbers`)."""
    found = generate_target(load_targets()["gelu"], 5, LocalExecutor(1))
    spelled = [sorted(_ops(s)) for s in found.spellings]
    assert sorted(["Div", "Erf", "Add", "Mul", "Mul"]) in spelled
    assert sorted(["Mul", "Erf", "Add", "Mul", "Mul"]) in spelled  # x * (1/sqrt 2): the reciprocal folded
    assert all(parse_graph(s).outputs == ("y",) and len(parse_graph(s).nodes) == 5 for s in found.spellings)
    assert len(found.rules) == len(found.spellings) == 16
    assert all(r.dst.nodes[0].op == "Gelu" for _, r in found.rules)


def test_only_pieces_of_the_target_are_grown() -> None:
    """A graph is grown only where its every value is a piece of the target's expression, no expression is
    computed twice, and its loose ends can still meet in the ops left: toward GELU, some twenty graphs up to 3
    ops, where every catalogue op on every value makes thousands."""
    assert sum(generate_target(load_targets()["gelu"], 3, LocalExecutor(1)).graphs) < 100
    most = 5
    problem = Problem(load_targets()["layernorm"], most)
    frontier: list = [()]
    for level in range(1, most):
        frontier = [c for nodes in frontier for c in _children(problem, nodes)[0]]
        assert frontier
        for nodes in frontier:
            values = problem.values(nodes)[len(problem.leaves) :]
            assert all(v.term in problem.allowed for v in values)
            assert len({v.term for v in values}) == len(values)
            sinks = set(range(len(values))) - {a - len(problem.leaves) for _, args in nodes for a in args}
            assert len(sinks) - 1 <= most - level


def test_softmax_spellings_pair_with_softmax_by_fingerprint() -> None:
    found = generate_target(load_targets()["softmax"], 4, LocalExecutor(1))
    spelled = {tuple(_ops(s)) for s in found.spellings}
    assert spelled == {("Exp", "ReduceSum", "Div"), ("Exp", "ReduceSum", "Reciprocal", "Mul")}
    assert len(found.rules) == 2
    assert all(r.dst.nodes[0].op == "Softmax" and r.dst.nodes[0].attr["axis"] == 1 for _, r in found.rules)


def test_gelu_family_spellings_pair_by_fingerprint() -> None:
    """QuickGelu's x * sigmoid(1.702 x) and BiasGelu's erf-GELU of x + b: every spelling pairs, its constants
    read as the numbers they round (`taso.ops.numbers`)."""
    for name, n, ops_ in (("quickgelu", 3, 2), ("biasgelu", 6, 16)):
        found = generate_target(load_targets()[name], n, LocalExecutor(1))
        assert len(found.rules) == len(found.spellings) == ops_, name


@pytest.mark.slow
@pytest.mark.parametrize("name", bounded(["gelu", "quickgelu", "biasgelu"], ci=1))
def test_gelu_family_spellings_are_proved(tmp_path: Path, name: str) -> None:
    """Gelu's, BiasGelu's and QuickGelu's definitions (specs/gelu.py, specs/fused.py) and the known numbers
    (specs/numbers.py) prove every spelling paired (real z3; about 5 s each, after the one-time spec check that
    follows a change to the specs)."""
    target = load_targets()[name]
    found = generate_target(target, target.max_ops, LocalExecutor(1))
    db_path = tmp_path / f"{name}.db"
    save_rules(found.rules, {"tool": "test"}, db_path)
    db = store.open_store(db_path)
    summary = verify_rows(db, list(db["rules"].rows_where(order_by="id")), load_specs(SPECS_DIR))
    assert summary.counts["proved"] == len(found.rules) > 0


@pytest.mark.slow
def test_softmax_spellings_are_proved_from_its_definition(tmp_path: Path) -> None:
    """specs/softmax.py's ``softmax-def`` (exp(x) / sum(exp(x)) along the axis) proves both spellings (real z3,
    some 10 s of CPU); without it they stay unknown."""
    found = generate_target(load_targets()["softmax"], 4, LocalExecutor(1))
    db_path = tmp_path / "softmax.db"
    save_rules(found.rules, {"tool": "test"}, db_path)
    db = store.open_store(db_path)
    summary = verify_rows(db, list(db["rules"].rows_where(order_by="id")), load_specs(SPECS_DIR))
    assert summary.counts["proved"] == len(found.rules) == 2


@pytest.mark.slow
def test_layernorm_nine_op_decompositions_as_exporters_write_them() -> None:
    """LayerNorm's 9-op decomposition, with Pow(d, 2) or Mul(d, d), Sqrt or Pow(v, 0.5), the scale before or
    after the division: every spelling found pairs with LayerNormalization by fingerprint (7 s on one core)."""
    found = generate_target(load_targets()["layernorm"], 9, LocalExecutor(1))
    torchscript = ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
    spelled = [_ops(s) for s in found.spellings]
    assert torchscript in spelled
    assert any("Pow" not in s and s.count("Mul") == 2 for s in spelled)  # (x - mean) squared as a Mul
    assert any(s.index("Mul") < s.index("Div") for s in spelled)  # the scale before the division
    assert len(found.rules) == len(found.spellings) >= 8


_PLANTED = [
    # (name, op, attrs, inputs, a false expression for it, ops)
    ("erf_as_tanh", "Gelu", '{approximate = "tanh"}', "x", "x * 0.5 * (1 + erf(x / 1.4142135))", 5),
    ("softmax_wrong_axis", "Softmax", "{axis = -1}", "x", "exp(x) / sum(exp(x), 0)", 3),
    (
        "ln_no_epsilon",
        "LayerNormalization",
        "{axis = -1, epsilon = 1e-5}",
        "xg",
        "(x - mean(x)) / sqrt(mean((x - mean(x)) ** 2)) * g",
        7,
    ),
    (
        "ln_wrong_axis",
        "LayerNormalization",
        "{axis = -1, epsilon = 1e-5}",
        "xg",
        "(x - mean(x, 0)) / sqrt(mean((x - mean(x, 0)) ** 2, 0) + 1e-5) * g",
        8,
    ),
    ("gelu_wrong_constant", "Gelu", '{approximate = "none"}', "x", "x * 0.5 * (1 + erf(x / 1.5))", 5),
    ("quickgelu_as_gelu", "Gelu", '{approximate = "none"}', "x", "x * sigmoid(1.702 * x)", 3),
    (
        "tanh_as_erf",
        "Gelu",
        '{approximate = "none"}',
        "x",
        "x * 0.5 * (1 + tanh(0.7978846 * (x + 0.044715 * x ** 3)))",
        8,
    ),
]
_INPUTS = {
    "x": '[{name = "x", shape = [2, 4]}]',
    "xg": '[{name = "x", shape = [2, 4]}, {name = "g", shape = [4], kind = "weight"}]',
}


@pytest.mark.slow
@pytest.mark.parametrize("case", bounded(_PLANTED, ci=2), ids=lambda c: c[0])
def test_planted_false_targets_are_never_paired_nor_proved(tmp_path: Path, case: tuple) -> None:
    """A target with a wrong expression (tanh-GELU as erf-GELU and back, erf-GELU by 1.5 for sqrt 2, QuickGelu
    as Gelu, LayerNorm over the wrong axis or without its epsilon, softmax over the wrong axis): its spellings are found, none has the op's fingerprint, so no rule
    is made; and each spelling stored as a rule by force is refuted by `subst verify`, never proved."""
    name, op, attrs, inputs, expr, n = case
    entry = f'[{name}]\nop = "{op}"\nattrs = {attrs}\ninputs = {_INPUTS[inputs]}\nexpr = "{expr}"\nmax_ops = {n}\n'
    target = _targets(tmp_path, entry)[name]
    found = generate_target(target, n, LocalExecutor(1))
    assert found.spellings and found.rules == []
    dst = parse_graph(target.graph_text())
    forced = [("0", normalised(Rule(parse_graph(s), dst))) for s in found.spellings]
    db = store.create(tmp_path / "planted.db")  # by force: `save_rules` would drop them (they differ grown too)
    store.add_rules(db, [r for _, r in forced], "0", {"tool": "test"})
    summary = verify_rows(db, list(db["rules"].rows_where(order_by="id")), load_specs(SPECS_DIR))
    assert summary.counts.get("proved", 0) == 0 and summary.counts["refuted"] == len(forced)


def test_a_rule_through_a_mean_over_the_last_axis_lifts_to_batch_seq_hidden() -> None:
    """A rank-2 rule whose ReduceMean (or ReduceSum) runs along the last axis lifts to [batch, seq, hidden] with
    its axes counted from the end (the hidden axis), and both sides still agree there."""
    src = parse_graph(
        "graph(%x: float32[2,4], %c: float32[] = 0.25):\n  %s = ReduceSum(%x) {axes=[1], keepdims=1} : float32[2,1]"
        "\n  %y = Mul(%s, %c) : float32[2,1]\n  return %y"
    )
    dst = parse_graph(
        "graph(%x: float32[2,4]):\n  %y = ReduceMean(%x) {axes=[1], keepdims=1} : float32[2,1]\n  return %y"
    )
    up = lifted(Rule(src, dst), 1)
    assert up is not None
    assert [n.attr["axes"] for g in (up.src, up.dst) for n in g.nodes if n.op.startswith("Reduce")] == [(2,), (2,)]
    batch, seq, hidden = up.src.types["x"].shape
    x = np.random.default_rng(0).standard_normal((batch, seq, hidden))
    (a,), (b,) = (run_graph(g, {"x": x}) for g in (up.src, up.dst))
    np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(a[..., 0], x.mean(axis=-1), rtol=1e-6)


def test_two_workers_give_the_same_spellings_and_rules_as_one() -> None:
    gelu, softmax = (load_targets()[n] for n in ("gelu", "softmax"))
    for t, n in ((gelu, 5), (softmax, 4)):
        one, two = (generate_target(t, n, LocalExecutor(w)) for w in (1, 2))
        assert one.spellings == two.spellings and one.graphs == two.graphs
        assert [(fp, format_graph(r.src)) for fp, r in one.rules] == [(fp, format_graph(r.src)) for fp, r in two.rules]


@pytest.mark.slow
def test_ray_gives_the_same_rules_as_local_processes() -> None:
    pytest.importorskip("ray")
    from taso.generate.ray_executor import RayExecutor

    softmax = load_targets()["softmax"]
    local = generate_target(softmax, 4, LocalExecutor(1))
    ray = generate_target(softmax, 4, RayExecutor(None, 2))
    assert [format_graph(r.src) for _, r in ray.rules] == [format_graph(r.src) for _, r in local.rules]


def test_generate_target_stores_candidates(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    r = subst("generate", "--target", "Softmax", "--store", db, "--workers", "1")  # on matrices and 4-D scores
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("2 rules added") == 2
    assert {row["status"] for row in store.open_store(db)["rules"].rows} == {"candidate"}


@pytest.mark.parametrize(
    "args, says",
    [
        (["--target", "Conv"], "is not a target"),
        (["--target", "Softmax", "--ops", "add"], "do not apply"),
        (["--targets", "missing.toml", "--target", "Softmax"], "cannot read targets"),
        (["--target", "Softmax", "--max-ops", "0"], "at least 1 op"),
    ],
)
def test_bad_target_input_is_one_line_exit_2_nothing_written(tmp_path: Path, args: list[str], says: str) -> None:
    db = tmp_path / "t.db"
    r = subst("generate", *args, "--store", db)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not db.exists()


def test_a_bad_targets_file_is_refused(tmp_path: Path) -> None:
    """An expression outside the small language, an op outside the catalogue: BadInput naming the entry."""
    with pytest.raises(BadInput, match="is not a known function"):
        _targets(tmp_path, '[t]\nop = "Relu"\ninputs = [{name = "x", shape = [2]}]\nexpr = "__import__(\'os\')"\n')
    with pytest.raises(BadInput, match="is not understood"):
        _targets(tmp_path, '[t]\nop = "Relu"\ninputs = [{name = "x", shape = [2]}]\nexpr = "x.real"\n')
    with pytest.raises(BadInput, match="is not a known function"):
        _targets(tmp_path, '[t]\nop = "Relu"\ninputs = [{name = "x", shape = [2]}]\nexpr = "relu(x)"\n')
    with pytest.raises(BadInput, match="not a catalogue op"):
        _targets(tmp_path, '[t]\nop = "Nope"\ninputs = [{name = "x", shape = [2]}]\nexpr = "x"\n')
    assert SHIPPED.exists()
