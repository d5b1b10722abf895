"""`subst generate`: the rules that matter are found, pruning loses nothing derivable, runs are reproducible."""

from __future__ import annotations

import json
from collections import Counter
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import subst
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import cli
from taso import ops
from taso.generate import (
    BIASES,
    FORMS,
    TASO_POOL,
    InputClass,
    Settings,
    _build,
    _Context,
    _field_batch,
    field_apply,
    generate,
    parse_ops,
    save,
    settings_from,
    static_data,
)
from taso.generate.fingerprint import fingerprint
from taso.ir import Graph
from taso.rules import Rule, store

X = InputClass("X", (2, 4, 5, 5), "activation", 1)
K = InputClass("K", (4, 4, 3, 3), "weight", 2)
KP = InputClass("Kp", (4, 4, 1, 1), "weight", 1)
x = InputClass("x", (2, 4), "activation", 2)
W = InputClass("w", (4, 4), "weight", 3)


@cache
def rules_of(forms: tuple[str, ...], pool: tuple[InputClass, ...], max_ops: int, **kw: bool) -> list[Rule]:
    return [r for _, r in generate(Settings(max_ops, forms, pool, **kw), workers=1).rules]


def census(g: Graph) -> Counter:
    return Counter(n.op for n in g.nodes)


def lookup(rules: list[Rule], one: dict[str, int], other: dict[str, int]) -> list[Rule]:
    """Rules with these op counts on their two sides (either way round); each checked by fingerprint."""
    found = [
        r
        for r in rules
        if {frozenset(census(r.src).items()), frozenset(census(r.dst).items())}
        == {frozenset(one.items()), frozenset(other.items())}
    ]
    for r in found:
        assert fingerprint(r.src) == fingerprint(r.dst)
    return found


def outputs_read(g: Graph, op: str) -> set[str]:
    """Values the nodes of ``op`` read (to tell which tensor a rule shares)."""
    return {i for n in g.nodes if n.op == op for i in n.inputs}


# ---- the rules that matter on real models ------------------------------------------------------------------


def test_two_matmuls_sharing_an_input_merge_through_concat_and_split() -> None:
    rules = rules_of(("matmul", "concat1", "split1"), (x, W), 3)
    found = lookup(rules, {"MatMul": 2}, {"Concat": 1, "MatMul": 1, "Split": 1})
    assert found
    r = found[0]
    two = r.src if census(r.src)["MatMul"] == 2 else r.dst
    assert len(two.outputs) == 2 and len({n.inputs[0] for n in two.nodes}) == 1  # one shared left operand


def test_sibling_convs_merge_through_concat_and_split() -> None:
    rules = rules_of(("conv_s1_same", "concat0", "split1"), (X, K), 3)
    assert lookup(rules, {"Conv": 2}, {"Concat": 1, "Conv": 1, "Split": 1})


def test_a_1x1_kernel_enlarged_to_3x3_and_the_merged_siblings() -> None:
    rules = rules_of(("conv_s1_same", "enlarge3"), (X, KP), 2)
    assert lookup(rules, {"Conv": 1}, {"Enlarge": 1, "Conv": 1})


@pytest.mark.slow
def test_a_3x3_and_a_1x1_sibling_merge_with_enlarge() -> None:
    """Found as a candidate; kept, or folded because enlarge-then-merge (two smaller kept rules) derives it."""
    forms, pool, n = ("conv_s1_same", "enlarge3", "concat0", "split1"), (X, K, KP), 4
    merged = lookup(
        rules_of(forms, pool, n, prune_pairs=False), {"Conv": 2}, {"Enlarge": 1, "Concat": 1, "Conv": 1, "Split": 1}
    )
    assert merged
    for r in merged:
        assert "Kp0" in outputs_read(r.src if "Enlarge" in census(r.src) else r.dst, "Enlarge")
    kept = rules_of(forms, pool, n)
    assert lookup(kept, {"Conv": 1}, {"Enlarge": 1, "Conv": 1}) and lookup(
        kept, {"Conv": 2}, {"Concat": 1, "Conv": 1, "Split": 1}
    )
    for r in merged:
        assert r in kept or derivable(r.src, r.dst, kept, depth=1)


def test_relu_moves_through_channel_concat() -> None:
    """What lets merged convs keep their relus: relu(concat(a, b)) = concat(relu(a), relu(b))."""
    rules = rules_of(("relu", "concat1"), (InputClass("X", (2, 4, 5, 5), "activation", 2),), 3)
    assert lookup(rules, {"Relu": 2, "Concat": 1}, {"Concat": 1, "Relu": 1})


HALVES = InputClass("Y", (2, 8, 5, 5), "activation", 1, ((1, (4, 4)),))
THIRDS = InputClass("Z", (2, 12, 5, 5), "activation", 1, ((1, (4, 4, 4)),))
"""Activations declared splittable: a merged conv's output, in two parts and in three."""
SPLIT_MOVES = ("relu", "split1", "split1_head", "split1_tail")


def test_relu_moves_before_the_split_of_a_merged_output() -> None:
    """Split(y) then Relu on each part = Relu(y) then Split: what lets the merged conv fuse the Relu."""
    rules = rules_of(SPLIT_MOVES, (HALVES, THIRDS), 3)
    assert lookup(rules, {"Split": 1, "Relu": 2}, {"Relu": 1, "Split": 1})


def test_a_split_of_a_split_is_one_split() -> None:
    """Pairwise sibling merges nest Splits; one Split with all the sizes does the same in one kernel."""
    rules = rules_of(SPLIT_MOVES, (THIRDS,), 2)
    found = lookup(rules, {"Split": 2}, {"Split": 1})
    assert len(found) == 2  # the inner split cuts the leading parts, or the trailing ones
    for r in found:
        one = r.src if len(r.src.nodes) == 1 else r.dst
        assert [len(n.outputs) for n in one.nodes] == [3]


def test_pruning_over_splittable_inputs_drops_only_derivable_pairs() -> None:
    kept = rules_of(SPLIT_MOVES, (HALVES, THIRDS), 3)
    kept_keys = {(r.src.key, r.dst.key) for r in kept}
    dropped = [
        r
        for r in rules_of(SPLIT_MOVES, (HALVES, THIRDS), 3, prune_pairs=False, extend_all=True)
        if (r.src.key, r.dst.key) not in kept_keys
    ]
    assert dropped
    for r in dropped:
        assert derivable(r.src, r.dst, kept), f"dropped but not derivable:\n{r}"


@pytest.mark.slow
def test_conv_followed_by_relu_siblings_merge() -> None:
    rules = rules_of(("conv_s1_same", "relu", "concat0", "split1"), (X, K), 4)
    assert lookup(rules, {"Conv": 2, "Relu": 2}, {"Concat": 1, "Conv": 1, "Relu": 1, "Split": 1})


def test_transpose_of_a_product() -> None:
    rules = rules_of(("matmul", "transpose"), (x, W), 3)
    assert lookup(rules, {"MatMul": 1, "Transpose": 1}, {"Transpose": 2, "MatMul": 1})


def test_matmul_distributes_over_add_on_both_sides() -> None:
    rules = rules_of(("matmul", "add"), (x, W), 3)
    found = lookup(rules, {"MatMul": 2, "Add": 1}, {"Add": 1, "MatMul": 1})
    shared = set()
    for r in found:
        two = r.src if census(r.src)["MatMul"] == 2 else r.dst
        left, right = ({n.inputs[i] for n in two.nodes if n.op == "MatMul"} for i in (0, 1))
        shared.add("left" if len(left) == 1 else "right" if len(right) == 1 else "none")
    assert {"left", "right"} <= shared


def test_conv_distributes_over_add() -> None:
    rules = rules_of(("conv_s1_same", "add"), (X, K), 3)
    assert lookup(rules, {"Conv": 2, "Add": 1}, {"Add": 1, "Conv": 1})


def test_shipped_store_has_the_rules_that_matter() -> None:
    db = store.open_store(store.DEFAULT_PATH)
    rules = [r for op in ("MatMul", "Conv") for r in store.load_rules(db, op=op)]  # each looked up has one of these
    assert lookup(rules, {"MatMul": 2}, {"Concat": 1, "MatMul": 1, "Split": 1})
    assert lookup(rules, {"Conv": 2}, {"Concat": 1, "Conv": 1, "Split": 1})
    assert lookup(rules, {"Conv": 1}, {"Enlarge": 1, "Conv": 1})
    assert lookup(rules, {"MatMul": 1, "Transpose": 1}, {"Transpose": 2, "MatMul": 1})
    assert lookup(rules, {"MatMul": 2, "Add": 1}, {"Add": 1, "MatMul": 1})
    assert lookup(rules, {"Conv": 2, "Add": 1}, {"Add": 1, "Conv": 1})
    # the same for convs with a bias, as exporters write them: enlarged, and siblings merged (biases concatenated)
    biased = [r for r in rules if any(n.op == "Conv" and len(n.inputs) == 3 for n in r.src.nodes)]
    assert lookup(biased, {"Enlarge": 1, "Conv": 1}, {"Conv": 1})
    merged = lookup(biased, {"Conv": 2, "Concat": 1}, {"Concat": 2, "Conv": 1})
    assert any(len({n.inputs[1] for n in r.src.nodes if n.op == "Conv"}) == 2 for r in merged)  # two kernels
    assert all(r.status == "proved" for r in merged)


# ---- soundness of the candidates ------------------------------------------------------------------------------


def test_every_candidate_pairs_graphs_of_equal_fingerprint_and_types() -> None:
    rules = rules_of(
        ("matmul", "add", "relu", "transpose", "concat0", "split0", "eye", "smul"),
        (x, W, InputClass("s", (), "weight", 1)),
        2,
    )
    assert rules
    for r in rules:
        assert fingerprint(r.src) == fingerprint(r.dst), r
        for o_src, o_dst in zip(r.src.outputs, r.dst.outputs):
            assert r.src.types[o_src] == r.dst.types[o_dst], r
        assert r.src.key != r.dst.key


def test_relu_is_not_distributed_over_add() -> None:
    rules = rules_of(("relu", "add"), (x,), 3)
    for r in rules:
        assert not (census(r.src) == Counter({"Relu": 2, "Add": 1}) and census(r.dst) == Counter({"Add": 1, "Relu": 1}))


def test_batched_evaluation_is_row_by_row_evaluation() -> None:
    """Enumeration evaluates a form over many children at once: every row must be exactly what `field_apply`
    gives on its own, for every form and every argument signature of the pool and of one-op graphs."""
    thirds = InputClass("Z", (2, 12, 5, 5), "activation", 1, ((1, (4, 4, 4)),))  # for the split-of-split forms
    tokens = InputClass("T", (2, 3, 4), "activation", 1)  # for the forms of a transformer's projections
    ctx = _Context(Settings(2, tuple(FORMS), (*TASO_POOL, BIASES, thirds, tokens)), 1)
    values = list(ctx.inputs)
    for f, sc, _ in ctx.applicable(tuple(sorted({v.sig for v in values}))):
        args = [next(a for a, v in enumerate(ctx.inputs) if v.sig == s) for s in sc]
        values += _build(ctx, [(f, tuple(args))]).values[ctx.n_inputs :]
    by_sig: dict = {}
    for v in values:
        by_sig.setdefault(v.sig, []).append(v.runs[0])
    checked = set()
    for f, sc, (attrs, out_sigs) in ctx.applicable(tuple(sorted(by_sig))):
        op = ctx.forms[f].op
        rows = [[by_sig[s][(i + p) % len(by_sig[s])] for p, s in enumerate(sc)] for i in range(3)]
        data = static_data(ctx.forms[f], sc, attrs)
        extra = [] if data is None else [data]
        xs = [np.stack([r[p] for r in rows]) for p in range(len(sc))] + extra
        batch = _field_batch(op, xs, attrs, len(out_sigs), ctx.keys[0], len(rows))
        for i, r in enumerate(rows):
            alone = field_apply(op, r + extra, attrs, len(out_sigs), ctx.keys[0])
            assert all(np.array_equal(b[i], a) for b, a in zip(batch, alone, strict=True)), (op, sc)
        checked.add(ctx.forms[f].name)
    assert checked == set(FORMS)


# ---- pruning never drops what the kept rules cannot derive -------------------------------------------------

Term = tuple


@cache
def _terms(g: Graph) -> tuple[Term, ...]:
    """The graph as one expression tree per output: inputs are variables, weights with data literals (made
    once per graph: `derivable` reads every kept rule's for each pair it checks)."""

    def term(v: str) -> Term:
        n = g.producers.get(v)
        if n is None:
            return ("const", g.data[v].digest) if v in g.data else ("var", v)
        t = (n.op, n.attrs, tuple(term(a) for a in n.inputs))
        return t if len(n.outputs) == 1 else ("out", n.outputs.index(v), t)

    return tuple(term(o) for o in g.outputs)


def _match(p: Term, t: Term, b: dict) -> list[dict]:
    if p[0] == "var":
        if p[1] in b:
            return [b] if b[p[1]] == t else []
        return [{**b, p[1]: t}]
    if p[0] in ("const", "out") or t[0] in ("var", "const", "out"):
        if p[0] != t[0]:
            return []  # a const (a split's sizes) matches any const: the matcher recomputes them from shapes
        if p[0] == "out":
            return _match(p[2], t[2], b) if p[1] == t[1] else []
        return [b]
    if p[0] != t[0] or p[1] != t[1] or len(p[2]) != len(t[2]):
        return []
    orders = [t[2]] + ([t[2][::-1]] if ops.get(p[0]).commutative else [])
    out = []
    for args in orders:
        bs = [b]
        for pa, ta in zip(p[2], args):
            bs = [b2 for b1 in bs for b2 in _match(pa, ta, b1)]
        out += bs
    return out


def _subst(p: Term, b: dict) -> Term:
    if p[0] == "var":
        return b[p[1]]
    if p[0] == "const":
        return p
    if p[0] == "out":
        return ("out", p[1], _subst(p[2], b))
    return (p[0], p[1], tuple(_subst(a, b) for a in p[2]))


def _subterms(t: Term) -> set[Term]:
    out = {t}
    if t[0] == "out":
        out |= _subterms(t[2])
    elif t[0] not in ("var", "const"):
        for a in t[2]:
            out |= _subterms(a)
    return out


@lru_cache(maxsize=1 << 16)
def _sites(state: tuple[Term, ...]) -> frozenset[Term]:
    """Every subterm of a state: where a rule's left side may match (asked once per state and rule)."""
    return frozenset().union(*(_subterms(t) for t in state))


def _replace_all(t: Term, old: Term, new: Term) -> Term:
    """Every occurrence of ``old`` replaced: equal subterms are one value (one node) in the graph."""
    if t == old:
        return new
    if t[0] == "out":
        return ("out", t[1], _replace_all(t[2], old, new))
    if t[0] in ("var", "const"):
        return t
    return (t[0], t[1], tuple(_replace_all(a, old, new) for a in t[2]))


def _rewrites(state: tuple[Term, ...], lhs: tuple[Term, ...], rhs: tuple[Term, ...]) -> list[tuple[Term, ...]]:
    """Every state one application of lhs -> rhs away (multi-output rules match several values at once)."""
    if any(p[0] == "var" for p in lhs):
        return []  # a bare variable matches everything: never expand
    sites = _sites(state)
    out = []

    def go(k: int, b: dict, chosen: list[Term]) -> None:
        if k == len(lhs):
            try:
                new = [(old, _subst(r, b)) for old, r in zip(chosen, rhs)]
            except KeyError:
                return  # rhs reads a variable lhs does not bind
            result = state
            for old, term in new:
                result = tuple(_replace_all(t, old, term) for t in result)
            out.append(result)
            return
        for site in sites:
            if site not in chosen:
                for b2 in _match(lhs[k], site, b):
                    go(k + 1, b2, [*chosen, site])

    go(0, {}, [])
    return out


def derivable(src: Graph, dst: Graph, rules: list[Rule], depth: int = 2) -> bool:
    """Whether src and dst meet within ``depth`` rule applications from each end (rules used both ways). Each
    round rewrites only the states the last one reached: the others' rewrites are in the set already."""
    pairs = [(_terms(r.src), _terms(r.dst)) for r in rules]
    pairs += [(b, a) for a, b in pairs]

    def step(new: set, seen: set) -> set:
        return {n for s in new for lhs, rhs in pairs for n in _rewrites(s, lhs, rhs)} - seen

    fwd, bwd = {_terms(src)}, {_terms(dst)}
    fwd_new, bwd_new = set(fwd), set(bwd)
    for _ in range(depth):
        if fwd & bwd:
            return True
        fwd_new = step(fwd_new, fwd)
        fwd |= fwd_new
        if fwd & bwd:
            return True
        bwd_new = step(bwd_new, bwd)
        bwd |= bwd_new
    return bool(fwd & bwd)


def test_derivation_checker_is_not_vacuous() -> None:
    rules = rules_of(("matmul", "transpose"), (x, W), 3)
    t_mm = lookup(rules, {"MatMul": 1, "Transpose": 1}, {"Transpose": 2, "MatMul": 1})[0]
    assert derivable(t_mm.src, t_mm.dst, [t_mm])
    assert not derivable(t_mm.src, t_mm.dst, [r for r in rules if r is not t_mm and "Transpose" not in r.ops])


SMALL_FORMS = ["matmul", "add", "mul", "relu", "transpose", "concat0", "concat1", "split0", "split1", "smul", "eye"]


@settings(max_examples=6, deadline=None)
@given(st.lists(st.sampled_from(SMALL_FORMS), min_size=2, max_size=4, unique=True))
def test_pruning_drops_only_derivable_pairs(forms: list[str]) -> None:
    pool = (
        InputClass("x", (2, 2), "activation", 2),
        InputClass("w", (2, 2), "weight", 2),
        InputClass("s", (), "weight", 1),
    )
    kept = rules_of(tuple(forms), pool, 2)
    everything = rules_of(tuple(forms), pool, 2, prune_pairs=False, extend_all=True)
    assert len(everything) >= len(kept)
    kept_keys = {(r.src.key, r.dst.key) for r in kept}
    for r in everything:
        if (r.src.key, r.dst.key) not in kept_keys:
            assert derivable(r.src, r.dst, kept), f"dropped but not derivable:\n{r}"


@pytest.mark.slow
@pytest.mark.parametrize("forms", [("mul", "add", "smul", "relu"), ("matmul", "transpose", "concat1", "split1")])
def test_pruning_drops_only_derivable_pairs_at_three_ops(forms: tuple[str, ...]) -> None:
    pool = (
        InputClass("x", (2, 2), "activation", 2),
        InputClass("w", (2, 2), "weight", 2),
        InputClass("s", (), "weight", 1),
    )
    n = 3
    kept = rules_of(forms, pool, n)
    kept_keys = {(r.src.key, r.dst.key) for r in kept}
    dropped = [
        r
        for r in rules_of(forms, pool, n, prune_pairs=False, extend_all=True)
        if (r.src.key, r.dst.key) not in kept_keys
    ]
    assert len(dropped) > len(kept)  # the pruning does real work here
    for r in dropped:
        assert derivable(r.src, r.dst, kept), f"dropped but not derivable:\n{r}"


# ---- settings, determinism, the store, the command line ----------------------------------------------------


def test_same_settings_same_rules_whatever_the_workers() -> None:
    s = Settings(2, ("matmul", "add", "concat1", "split1", "transpose"), (x, W))
    one = [(fp, str(r)) for fp, r in generate(s, workers=1).rules]
    two = [(fp, str(r)) for fp, r in generate(s, workers=2).rules]
    assert one == two and one


def test_parse_ops() -> None:
    plain = ("conv_s1_same", "conv_s1_valid", "conv_s2_same", "conv_s2_valid")
    assert parse_ops("Conv") == (*plain, *(f"{f}_bias" for f in plain))
    assert set(plain) <= set(parse_ops("taso")) and not any(f.endswith("_bias") for f in parse_ops("taso"))
    assert parse_ops("+bias") == (*parse_ops("taso"), *(f"{f}_bias" for f in plain))
    assert settings_from(ops="+bias").pool[-1].prefix == "b" and "b" not in {c.prefix for c in Settings().pool}
    assert "maxpool3" not in parse_ops("-maxpool3") and "sigmoid" in parse_ops("+sigmoid")
    with pytest.raises(Exception, match="unknown form or op 'Foo'"):
        parse_ops("matmul,Foo")


def test_config_inputs_are_checked() -> None:
    s = settings_from({"inputs": [{"prefix": "a", "shape": [2, 2], "kind": "weight", "count": 2}], "ops": ["add"]})
    assert s.pool == (InputClass("a", (2, 2), "weight", 2),) and s.forms == ("add",)
    s = settings_from({"inputs": [{"prefix": "y", "shape": [2, 8], "splits": {"1": [4, 4]}}], "ops": ["split1"]})
    assert s.pool == (InputClass("y", (2, 8), "activation", 1, ((1, (4, 4)),)),)
    assert s.as_dict()["pool"][0]["splits"] == {"1": [4, 4]}
    for bad in (
        {"prefix": "a1", "shape": [2]},
        {"prefix": "a", "shape": [0]},
        {"prefix": "a", "shape": [2], "kind": "x"},
        {"prefix": "a", "shape": [2, 8], "splits": {"1": [4, 3]}},
        {"prefix": "a", "shape": [2, 8], "splits": {"2": [4, 4]}},
        {"prefix": "a", "shape": [2, 8], "splits": {"1": [8]}},
        {"prefix": "a", "shape": [2, 8], "splits": [4, 4]},
    ):
        with pytest.raises(Exception, match="config inputs"):
            settings_from({"inputs": [bad]})


def test_save_is_atomic_and_keeps_verdicts(tmp_path: Path) -> None:
    s = Settings(2, ("matmul", "transpose"), (x, W))
    result = generate(s, workers=1)
    path = tmp_path / "r.db"
    added, kept, _, _ = save(result, path)
    assert added == len(result.rules) > 0 and kept == 0
    db = store.open_store(path)
    first = next(store.load_rules(db))
    store.set_verdict(db, first.row, "proved", {"by": "test"})
    db.close()
    assert save(result, path)[:2] == (0, len(result.rules))
    again = list(store.load_rules(store.open_store(path)))
    assert len(again) == len(result.rules) and again[0].status == "proved"
    assert not list(tmp_path.glob(".*tmp"))
    row = next(store.open_store(path)["rules"].rows)
    prov = json.loads(row["provenance"])
    assert prov["settings"]["seed"] == 0 and prov["settings"]["max_ops"] == 2 and "version" in prov
    assert row["fingerprint"] == fingerprint(again[0].src)


def test_interrupted_save_leaves_the_store_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.db"
    result = generate(Settings(1, ("transpose", "relu"), (x,)), workers=1)
    store.create(path).close()
    before = path.read_bytes()

    def boom(*a: object, **k: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "add_rules", boom)
    result.rules.append(("0" * 16, generate(Settings(2, ("transpose",), (x,)), workers=1).rules[0][1]))
    with pytest.raises(KeyboardInterrupt):
        save(result, path)
    assert path.read_bytes() == before and not list(tmp_path.glob(".*tmp"))


def test_cli_generate_then_browse(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    runner = CliRunner()
    out = runner.invoke(
        cli, ["generate", "--max-ops", "2", "--ops", "matmul,transpose", "--workers", "1", "--store", str(db), "--json"]
    )
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)  # progress lines go to stderr
    assert summary["rules"] == summary["added"] > 0 and summary["graphs"]["1 ops"] > 0
    listed = json.loads(runner.invoke(cli, ["rules", "list", "--store", str(db), "--op", "Transpose", "--json"]).output)
    assert listed and all("Transpose" in r["ops"].split() for r in listed)
    shown = runner.invoke(cli, ["rules", "show", str(listed[0]["id"]), "--store", str(db)])
    assert shown.exit_code == 0 and "=>" in shown.output
    stats = json.loads(runner.invoke(cli, ["rules", "stats", "--store", str(db), "--json"]).output)
    assert stats["rules"] == summary["rules"] and stats["by_status"] == {"candidate": summary["rules"]}


@pytest.mark.parametrize(
    "args, message",
    [
        (["generate", "--ops", "nosuch"], "unknown form or op"),
        (["generate", "--config", "/nonexistent.toml"], "cannot read config"),
        (["rules", "show", "999999"], "no rule with id"),
        (["rules", "list", "--store", "/nonexistent.db"], "no such store"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    if args[0] == "rules" and "--store" not in args:
        db = tmp_path / "empty.db"
        store.create(db).close()
        args = [*args, "--store", str(db)]
    if args[0] == "generate":
        args = [*args, "--store", str(tmp_path / "x.db")]
    p = subst(*args)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
