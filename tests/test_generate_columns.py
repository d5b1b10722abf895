"""The columnar generator (levels spooled to disk in fingerprint buckets, classes filed by sorting) against a
straightforward one that holds every graph as an object, as the generator did before: the same graphs, classes,
candidates, prunings and rules in the same order. And the work folder: a run killed after level 2 resumes to the
same rules; a folder of other settings or in use is refused; nothing of a folder the user named is touched."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, subst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taso.errors import BadInput
from taso.generate import InputClass, LocalExecutor, Settings, generate, save, settings_from
from taso.generate import driver as columnar
from taso.generate.columns import CLASS, DUPLICATE, GRAPH, MEMBER, NOT_EXTENDED, file_level
from taso.generate.evaluate import _build, _Context, _sinks
from taso.generate.extend import _children, _cost, _structure, _text_hash
from taso.generate.fingerprint import combine
from taso.generate.pairs import judge, to_rule
from taso.generate.spool import Spool, stopped_at
from taso.rules import store
from taso.rules.fold import fold

x = InputClass("x", (2, 4), "activation", 2)
W = InputClass("w", (4, 4), "weight", 2)
S = InputClass("s", (), "weight", 1)
FORMS = ("matmul", "add", "mul", "smul", "relu", "transpose", "concat0", "concat1", "split0", "split1", "ones")


def straightforward(s: Settings) -> tuple[list[tuple[str, str]], list[int], int, int, Counter]:
    """(rules, graphs per level, classes, candidates, prunings) the plain way: a dict of classes, each a list of
    (nodes, outputs) members, cheapest first, and a set of structure hashes."""
    ctx, pruned = _Context(s, 1), Counter()
    classes: dict[int, tuple[list, set]] = {}
    picks = columnar._seed_picks(ctx)
    for outs in picks:
        key = _text_hash("out:" + ",".join(ctx.names[a] for a in outs))
        classes.setdefault(combine([ctx.inputs[a].digest for a in outs]), ([((), outs)], {key}))
    graphs, frontier = [len(picks)], [()]
    for level in range(1, s.max_ops + 1):
        last = level == s.max_ops
        states = [_build(ctx, nodes) for nodes in frontier]
        children = [(i, f, args, sc) for i, st_ in enumerate(states) for f, args, sc in _children(ctx, st_, pruned)]
        fps = []
        for i, f, args, _ in children:  # each child built whole, its sinks' digests combined
            child = _build(ctx, (*frontier[i], (f, args)))
            fps.append(combine(child.values[v].digest for v in _sinks(ctx, child)))
        graphs.append(len(fps))
        seen, built, new, everything = Counter(fps), set(), {}, []
        for fp, (i, f, args, _) in zip(fps, children):
            if last and seen[fp] < 2 and fp not in classes:
                continue
            g = (*frontier[i], (f, args))
            key = _text_hash(_structure(ctx, g, {}))
            if (fp, key) in built or (fp in classes and key in classes[fp][1]):
                pruned[DUPLICATE] += 1
                continue
            built.add((fp, key))
            everything.append(g)
            if fp in classes:
                classes[fp][0].append((g, None))
                classes[fp][1].add(key)
                pruned[NOT_EXTENDED] += not (last or s.extend_all)
            else:
                new.setdefault(fp, {})[key] = (_cost(ctx, g), g)
        frontier = []
        for fp, members in new.items():
            ranked = sorted(members.items(), key=lambda kv: (kv[1][0], kv[0]))
            classes[fp] = ([(g, None) for _, (_, g) in ranked], set(members))
            frontier.append(ranked[0][1][1])
            pruned[NOT_EXTENDED] += (len(ranked) - 1) * (not (last or s.extend_all))
        frontier = everything if s.extend_all else frontier
    full = _Context(s)
    pairs = [(m, members[0]) for members, _ in classes.values() for m in members[1:]]
    rules, keys = [], set()
    for ((nodes, outs), (r_nodes, r_outs)), (reason, key, fp) in zip(pairs, judge(full, pairs, (0, len(pairs)))):
        if reason or (key is not None and key in keys):
            pruned[reason or "same pair up to renaming inputs"] += 1
            continue
        keys.add(key)
        rules.append((f"{fp:016x}", to_rule(full, _build(full, nodes), outs, _build(full, r_nodes), r_outs)))
    if s.prune_pairs:
        keep, pruned["derivable from smaller kept rules (one rewrite from each side)"] = fold([r for _, r in rules])
        rules = [fr for fr, k in zip(rules, keep) if k]
    return [(fp, str(r)) for fp, r in rules], graphs, len(classes), len(pairs), +pruned


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    forms=st.lists(st.sampled_from(FORMS), min_size=2, max_size=4, unique=True),
    max_ops=st.integers(1, 3),
    extend_all=st.booleans(),
    prune_pairs=st.booleans(),
    group=st.sampled_from([1, 40, columnar.GROUP]),
)
def test_the_columnar_generator_agrees_with_the_straightforward_one(
    forms: list[str], max_ops: int, extend_all: bool, prune_pairs: bool, group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``group``: how many graphs a run of buckets gathers; 1 files every bucket on its own, as a level far larger
    than these would."""
    s = Settings(
        max_ops if len(forms) < 4 else min(max_ops, 2), tuple(forms), (x, W, S), 0, (), prune_pairs, extend_all
    )
    monkeypatch.setattr(columnar, "GROUP", group)
    r = generate(s, workers=1)
    rules, graphs, classes, candidates, pruned = straightforward(s)
    assert [(fp, str(rule)) for fp, rule in r.rules] == rules
    assert (r.graphs, r.classes, r.candidates) == (graphs, classes, candidates)
    assert +r.pruned == pruned


def test_a_graph_already_a_member_of_an_earlier_level_is_not_filed_again() -> None:
    """Structure hashes of different sizes differ but for a 64-bit collision: filed by hand here."""
    graphs = np.zeros(3, dtype=GRAPH)
    graphs["fp"], graphs["row"] = [7, 7, 9], [0, 1, 2]
    keys, costs = np.array([5, 6, 8], np.uint64), np.zeros(3, np.uint64)
    old = np.zeros(1, dtype=MEMBER)
    old["fp"], old["key"], old["level"] = 7, 5, 1
    old_classes = np.zeros(1, dtype=CLASS)
    old_classes["fp"], old_classes["level"] = 7, 1
    filed = file_level(graphs, keys, costs, old, old_classes, 2, True, False)
    assert filed.pruned[DUPLICATE] == 1
    assert filed.members[["fp", "key", "pos"]].tolist() == [(7, 6, 1), (9, 8, 0)]  # a joiner at its row; a founder
    assert filed.classes["fp"].tolist() == [9]


def test_folding_each_size_in_parallel_keeps_what_fold_keeps() -> None:
    """The driver folds one size's rules on the workers at once (`_fold`); `taso.rules.fold.fold` takes them one
    by one. Unpruned pairs over TASO's matmul forms give rules of several sizes, many of them derivable."""
    s = Settings(3, ("matmul", "add", "transpose", "concat1", "split1"), (x, W), 0, (), False)
    rules = [r for _, r in generate(s, workers=1).rules]
    keep, dropped = fold(rules)
    meter = columnar._Meter(None, LocalExecutor(2))
    assert columnar._fold(LocalExecutor(2), s, rules, meter) == (keep, dropped)
    assert 0 < dropped < len(rules) and len({len(r.src.nodes) + len(r.dst.nodes) for r in rules}) > 2


# ---- the work folder --------------------------------------------------------------------------------------------

ARGS = ["--ops", "matmul,transpose,add,relu,concat1,split1", "--max-ops", "3", "--workers", "1"]


def _stored(path: Path) -> list[tuple[str, str, str]]:
    return [(r["rule_id"], r["src"], r["dst"]) for r in store.open_store(path)["rules"].rows_where(order_by="id")]


def _interruptible() -> None:
    """Ctrl-C reaches the run even where the tests run in the background (whose children inherit SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_after_level_2(how: signal.Signals, work: Path, db: Path) -> subprocess.CompletedProcess:
    """Run `subst generate ARGS`, stopped by ``how`` as level 3's enumeration ends (level 2 is on disk)."""
    cmd = [sys.executable, "-m", "cli.main", "generate", *ARGS, "--work", str(work), "--store", str(db)]
    p = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)
    assert p.stderr is not None
    for line in p.stderr:  # a line as each stage ends
        if line.startswith(" 3 ops |"):
            p.send_signal(how)
            break
    err = p.communicate(timeout=120)[1]
    assert not db.exists(), "the run ended before it was stopped"
    assert json.loads((work / "manifest.json").read_text())["level"] == 2
    return subprocess.CompletedProcess(cmd, p.returncode, "", err)


def test_a_run_killed_after_level_2_resumes_to_the_same_rules(tmp_path: Path) -> None:
    work, db = tmp_path / "work", tmp_path / "g.db"
    _stop_after_level_2(signal.SIGKILL, work, db)
    r = subst("generate", *ARGS, "--work", work, "--store", db, "--resume", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed_after_ops"] == 2
    assert not work.exists()  # the rules are saved: the spool is gone
    save(generate(settings_from(None, ARGS[1], 3), workers=1), tmp_path / "straight.db")
    assert _stored(db) == _stored(tmp_path / "straight.db") and _stored(db)


def test_ctrl_c_keeps_the_completed_levels_and_says_where(tmp_path: Path) -> None:
    r = _stop_after_level_2(signal.SIGINT, tmp_path / "work", tmp_path / "g.db")
    assert r.returncode == 130 and f"kept in {tmp_path / 'work'}: --resume takes them up" in r.stderr, r.stderr


def test_resuming_in_a_folder_of_other_settings_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with Spool.open(tmp_path, Settings(2, ("matmul",), (x, W)), resume=False) as spool:
        spool.commit(0, graphs=[1], classes=1, members=1, pruned={})
    r = subst("generate", *ARGS, "--work", tmp_path, "--store", tmp_path / "g.db", "--resume")
    assert r.returncode == 2 and "holds a run of other settings" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "g.db").exists()


def test_a_fresh_start_forgets_a_stopped_run(tmp_path: Path) -> None:
    """Else a fresh run that stops before its first level is on disk would leave the old manifest to --resume."""
    s = Settings(1, ("matmul",), (x, W))
    with Spool.open(tmp_path, s, resume=False) as spool:
        spool.commit(0, graphs=[1], classes=1, members=1, pruned={})
    assert stopped_at(tmp_path, s) == 0
    with Spool.open(tmp_path, s, resume=False):
        assert stopped_at(tmp_path, s) == -1


def test_a_folder_in_use_is_refused(tmp_path: Path) -> None:
    s = Settings(1, ("matmul",), (x, W))
    with Spool.open(tmp_path, s, resume=False):
        with pytest.raises(BadInput, match="another subst generate is working in this folder"):
            generate(s, workers=1, work=tmp_path)


def test_the_spool_touches_nothing_else_of_a_folder_the_user_named(tmp_path: Path) -> None:
    (tmp_path / "Logs").mkdir()
    (tmp_path / "Logs" / "today.txt").write_text("mine")
    (tmp_path / "L9").write_text("a file, not a level folder")
    r = subst("generate", "--ops", "matmul,add", "--max-ops", "2", "--work", tmp_path, "--store", tmp_path / "g.db")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L9", "Logs", "g.db"]
    assert (tmp_path / "Logs" / "today.txt").read_text() == "mine"
