"""The verifier's shortcuts change no term and no order: z3 terms built and walked through its C API, or
substituted into shape instances made once, are the ones its Python API builds and meets; the shards start
heaviest first, and a worker decides shard after shard."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import z3

from taso.errors import BadInput
from taso.rules import SPECS_DIR, Rule, store
from taso.verify import SMALL, D, Prover, R, Specs, load_specs, pending, verify_rows
from taso.verify.lowering import lower_rule
from taso.verify.premises import ShapeInstances
from taso.verify.session import Session
from taso.verify.spec import DIM, RANK, T, applications, subterms, translated
from taso.verify.workers import SHARDS, Shards, heaviest_first

RULE = Rule.from_row(
    {
        "src": """graph(%x: float32[1,4,5,5], %w: float32[4,4,3,3], %v: float32[4,4,3,3]):
  %a = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,4,5,5]
  %b = Conv(%x, %v) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,4,5,5]
  %c = Add(%a, %b) : float32[1,4,5,5]
  return %c""",
        "dst": """graph(%x: float32[1,4,5,5], %w: float32[4,4,3,3], %v: float32[4,4,3,3]):
  %s = Add(%w, %v) : float32[4,4,3,3]
  %c = Conv(%x, %s) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,4,5,5]
  return %c""",
    }
)


@pytest.fixture(scope="module")
def specs() -> Specs:
    return load_specs(SPECS_DIR)


def _children_walk(exprs: list[z3.ExprRef]) -> list[z3.ExprRef]:
    """The walk as the Python API makes it (what `subterms` did before it read the C API)."""
    seen: dict[int, z3.ExprRef] = {}
    todo = list(exprs)
    while todo:
        e = todo.pop()
        if e.get_id() not in seen:
            seen[e.get_id()] = e
            todo.extend(e.children())
    return list(seen.values())


def test_subterms_and_applications_meet_the_terms_the_python_api_meets_in_its_order(specs: Specs) -> None:
    """The premise check asserts one shape instance per application in this order: another order or another
    set would be another z3 problem."""
    low = lower_rule(RULE, specs)
    formulas = [a.formula for a in specs.axioms] + [f for s in specs.symbols.values() for f in s.shape_axioms()]
    for exprs in (formulas, [*low.src, *low.dst, *low.facts]):
        want = _children_walk(exprs)
        got = subterms(exprs)
        assert [e.get_id() for e in got] == [e.get_id() for e in want] and len(got) > 50
        assert [type(e) for e in got] == [type(e) for e in want]  # wrapped as the Python API wraps them
        apps = [e for e in want if z3.is_app(e) and e.sort() == T and e.num_args() and e.decl().name() in specs.symbols]
        assert [e.get_id() for e in applications(exprs, specs.symbols)] == [e.get_id() for e in apps] and apps
    assert subterms([]) == [] and applications([], specs.symbols) == []


def test_dims_ranks_and_applications_are_the_terms_the_python_api_builds(specs: Specs) -> None:
    x, y, i = z3.Const("x", T), z3.Const("y", T), z3.Int("i")
    assert D(x, 2).eq(DIM(x, 2)) and D(x, i).eq(DIM(x, i)) and R(x).eq(RANK(x))
    assert isinstance(D(x, 0), z3.ArithRef) and isinstance(R(x), z3.ArithRef)
    conv = specs.symbols["conv"]
    attrs = {name: (1,) * n if n else 1 for name, n in conv.layout}
    assert conv(x, y, **attrs).eq(conv.fn(*conv.flat(attrs), x, y))
    assert conv(x, y, **attrs | {"group": i}).eq(conv.fn(*conv.flat(attrs | {"group": i}), x, y))
    with pytest.raises(z3.Z3Exception, match="Sort mismatch"):  # z3 checks the sorts, as the Python call does
        D(D(x, 0), 1)


def test_the_shard_that_took_longest_last_time_starts_first_and_candidates_keep_id_order() -> None:
    """A shard holding a rule that ran to the safety net started fifth of eight: one worker was left on it for
    a minute after the other had finished. Stored seconds that are not a positive finite number count as none."""

    def row(k: int, detail: object) -> dict:
        return {"id": k, "detail": detail if isinstance(detail, str) else json.dumps(detail)}

    candidates = [[row(k, "{}")] for k in range(SHARDS)]
    assert heaviest_first(candidates) == candidates
    decided = [[row(k, {"seconds": 0.1}), row(k + SHARDS, {"seconds": 0.2})] for k in range(SHARDS)]
    decided[4][1] = row(4 + SHARDS, {"seconds": 121.9})
    decided[6][0] = row(6, {"seconds": 3.0})
    assert [s[0]["id"] for s in heaviest_first(decided)] == [4, 6, *(k for k in range(SHARDS) if k not in (4, 6))]
    odd = [[row(0, "[1]")], [row(1, {"seconds": "9"})], [row(2, "NaN")], [row(3, {"seconds": float("inf")})]]
    odd += [[row(4, "{not json")], [row(5, {"seconds": -5})], [row(6, {"seconds": 1.0})]]
    assert [s[0]["id"] for s in heaviest_first(odd)] == [6, 0, 1, 2, 3, 4, 5]


STRIDES = Rule.from_row(
    {
        "src": """graph(%x: float32[1,4,6,6], %w: float32[4,4,3,3]):
  %a = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,4,6,6]
  %b = Conv(%a, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[0,0,0,0], strides=[2,2]} : float32[1,4,2,2]
  %c = ReduceSum(%b) {axes=[3], keepdims=1} : float32[1,4,2,1]
  return %c""",
        "dst": """graph(%x: float32[1,4,6,6], %w: float32[4,4,3,3]):
  %a = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,4,6,6]
  %b = Conv(%a, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[0,0,0,0], strides=[2,2]} : float32[1,4,2,2]
  %c = ReduceSum(%b) {axes=[3], keepdims=0} : float32[1,4,2]
  return %c""",
    }
)
"""Two convs of one kernel but other pads and strides, a reduction that keeps its axis and one that does not (not
a rule to prove: only its terms are read)."""


@pytest.mark.parametrize("rule", [RULE, STRIDES], ids=["conv-add", "strides"])
def test_shape_instances_are_the_terms_each_applications_shape_rule_builds(rule: Rule, specs: Specs) -> None:
    """The premise check's instances, made once per symbol, attribute values and depth over stand-ins and then
    substituted, are the very terms the shape rule builds at each application (another term would be another
    z3 problem, and another context for the proof): applications that differ only in their attributes get
    their own."""
    low = lower_rule(rule, specs)
    made = ShapeInstances(specs)
    apps = applications([*low.src, *low.dst, *low.facts], specs.symbols)
    for depth in (4, 2, 4):
        for t in apps:
            sym = specs.symbols[t.decl().name()]
            args = t.children()
            a = SimpleNamespace(**sym.group(args[: sym.n_ints]))
            xs = args[sym.n_ints :]
            want = [R(t) == sym.rank(a, *xs), *(D(t, i) == sym.dims(i, a, *xs) for i in range(depth))]
            got = made.at(t, depth)
            assert len(got) == depth + 1 and all(g.eq(w) for g, w in zip(got, want)), (t, got, want)
    convs = {tuple(a.as_long() for a in t.children()[:-2]) for t in apps if t.decl().name() == "conv"}
    assert len(convs) == (1 if rule is RULE else 2)


def test_guarded_facts_and_goals_are_the_terms_the_python_api_builds(specs: Specs) -> None:
    """A session's facts and guarded literals, built through z3's C API, are those ``z3.Implies(z3.Bool(name),
    formula)`` makes, asserted in the same order, and its literals are the ones a check assumes by name."""
    low = lower_rule(STRIDES, specs)
    ctx = z3.Context()
    goals = [(i, a, b) for i, (a, b) in enumerate(zip(low.src, low.dst))]
    session = Session(Prover(specs), 1000, goals, low.facts, low.tracked, low.used, 1e18, ctx)
    want = [*low.facts, *(z3.Implies(z3.Bool(f"fact {k}"), t.fact) for k, t in enumerate(low.tracked))]
    want += [z3.Implies(z3.Bool(f"goal {i}"), a != b) for i, a, b in goals]
    got = session.solver.assertions()
    assert len(got) == len(want) > 10 and all(g.eq(w) for g, w in zip(got, translated(want, ctx)))
    literals = [*session.facts_on.values(), *(b for _, b in session.goals)]
    names = [f"fact {k}" for k in range(len(low.tracked))] + [f"goal {i}" for i, _, _ in goals]
    assert [b.eq(z3.Bool(n, ctx)) for b, n in zip(literals, names)] == [True] * len(names)


def _pid(row: dict) -> tuple[int, object]:
    return row["id"], os.getpid()


def _nothing() -> None:
    """A worker's start (nothing to load here)."""


def _never(row: dict, why: str) -> tuple[int, object]:
    raise AssertionError(why)


@pytest.mark.slow  # two worker processes started (about 1.5 s)
def test_a_worker_decides_shard_after_shard_in_one_process() -> None:
    """Starting a worker (imports, the specs) is paid once per worker, not once per shard: two workers decide
    every shard between them, each in one process."""
    rows = [{"id": k} for k in range(2 * SHARDS)]
    with Shards(_nothing, (), _pid, _never, 2, 60.0) as pool:
        got = dict(pool.decide(rows))
    assert sorted(got) == list(range(2 * SHARDS)) and len(set(got.values())) <= 2


def test_verdicts_written_in_one_statement_are_the_rows_set_verdict_writes(tmp_path: Path) -> None:
    """`store.set_verdicts` writes each row as `store.set_verdict` does, and only the rows it is given."""
    rows = {}
    for batched in (False, True):
        path = tmp_path / f"{batched}.db"
        shutil.copy(store.DEFAULT_PATH, path)
        db = store.open_store(path)
        verdicts = [(k, "unknown", {"reason": f"row {k}", "seconds": 0.5}) for k in (3, 1, 7)]
        with db.conn:
            if batched:
                store.set_verdicts(db, verdicts)
            else:
                for k, status, detail in verdicts:
                    store.set_verdict(db, k, status, detail)
        rows[batched] = list(db["rules"].rows_where(order_by="id"))
    changed = [
        r for r, s in zip(rows[True], store.open_store(store.DEFAULT_PATH)["rules"].rows_where(order_by="id")) if r != s
    ]
    assert rows[True] == rows[False] and [r["id"] for r in changed] == [1, 3, 7]


def test_workers_started_before_the_rows_are_read_are_stopped_when_a_row_is_refused(tmp_path: Path) -> None:
    """The worker processes start before the rows are parsed (they load while the parent reads), so a refused
    row (its id not its content's) must stop them too, with nothing written."""
    path = tmp_path / "tampered.db"
    shutil.copy(store.DEFAULT_PATH, path)
    db = store.open_store(path)
    db.execute("UPDATE rules SET rule_id = '0000000000' WHERE id = 5")
    db.conn.commit()
    before = list(db["rules"].rows_where(order_by="id"))
    rows = pending(db, force=True)
    assert len(rows) >= SMALL
    with pytest.raises(BadInput, match="is not its content's"):
        verify_rows(db, rows, load_specs(SPECS_DIR), workers=2)
    assert multiprocessing.active_children() == [] and list(db["rules"].rows_where(order_by="id")) == before
