"""Rule identity: the content-derived id (`taso.rules.rule_id`), the name that states the algebra
(`taso.rules.algebra`), and the store's schema-2 column that keeps the id."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from taso.generate.targets import load_targets
from taso.ir import Graph
from taso.rules import Rule, algebra, census, parse_rules, rule_id, store

ROOT = Path(__file__).resolve().parents[2]


@cache
def _shipped() -> list[Rule]:
    return list(store.load_rules(store.open_store(store.DEFAULT_PATH)))


def _shuffled(g: Graph, draw_index, prefix: str) -> Graph:  # noqa: ANN001 (hypothesis's draw)
    """``g`` with its nodes in another valid order (any ready node next) and every node output renamed."""
    defined = set(g.inputs) | set(g.weights)
    left, order = list(g.nodes), []
    while left:
        ready = [n for n in left if all(v in defined or not v for v in n.inputs)]
        n = ready[draw_index(len(ready))]
        left.remove(n)
        order.append(n)
        defined.update(n.outputs)
    names = {o: f"{prefix}{k}" for k, o in enumerate(o for n in reversed(order) for o in n.outputs if o)}

    def rn(v: str) -> str:
        return names.get(v, v)

    nodes = tuple(replace(n, inputs=tuple(map(rn, n.inputs)), outputs=tuple(map(rn, n.outputs))) for n in order)
    return replace(g, nodes=nodes, outputs=tuple(map(rn, g.outputs)), types={rn(k): t for k, t in g.types.items()})


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_an_id_does_not_depend_on_value_names_or_node_order(data: st.DataObject) -> None:
    """A shipped rule rewritten with other intermediate names and another topological order of its nodes keeps
    its id (a rule written twice is one rule), and the stored id is the one its content gives."""
    rule = data.draw(st.sampled_from(_shipped()))

    def pick(n: int) -> int:
        return data.draw(st.integers(0, n - 1))

    moved = Rule(_shuffled(rule.src, pick, "s_"), _shuffled(rule.dst, pick, "d_"), rule.name, rule.conditions)
    assert moved.id == rule.id == rule_id(rule)


def test_every_shipped_rule_has_its_own_id_and_the_stored_one_is_its_contents() -> None:
    """No two of the shipped rules share an id (ids are 40 bits), and each stored id is what its content gives
    now: a change to what the digest reads would show here before a report named a rule wrongly."""
    rules = _shipped()
    assert len({r.id for r in rules}) == len(rules) > 4000
    assert [r.id for r in rules] == [rule_id(replace(r, id="x")) for r in rules]


def test_what_a_rule_says_changes_its_id() -> None:
    """The digest reads the attributes, the free attributes, ``always``, the types, and which input each node
    reads; not the name, verdict or row."""
    (rule,) = [r for r in _shipped() if r.name == "fold BatchNormalization into Conv"]
    same = Rule(rule.src, rule.dst, "another name", rule.conditions, "refuted", {}, 7)
    assert same.id == rule.id
    conv = rule.src.nodes[0]
    widened = replace(rule.src, nodes=(replace(conv, attrs=(*conv.attrs[:2], ("group", 1), *conv.attrs[3:])),))
    variants = [
        Rule(rule.src, rule.dst, rule.name, tuple(c for c in rule.conditions if c != "always")),
        Rule(rule.src, rule.dst, rule.name, ("free: strides pads group kernel_shape", "always")),
        Rule(replace(widened, nodes=(*widened.nodes, *rule.src.nodes[1:])), rule.dst, rule.name, rule.conditions),
        Rule(rule.dst, rule.src, rule.name, rule.conditions),
    ]
    assert len({rule.id, *(v.id for v in variants)}) == len(variants) + 1


def _ops(expression: str) -> set[str]:
    return set(re.findall(r"([A-Za-z][A-Za-z0-9]*)\(", expression))


def test_a_generated_rule_is_named_by_its_algebra_and_a_written_one_keeps_its_name() -> None:
    """Each side of the name is the side's ops as expressions over the rule's inputs (every op, nothing else,
    every input the side reads); a name written by hand is kept; the generator's op census is not a name."""
    written = set()
    for r in _shipped():
        if r.name and r.name != census(r.src, r.dst):
            assert r.title == r.name
            written.add(r.name)
            continue
        assert r.title == algebra(r)
        src, dst = r.title.split(" => ")
        assert _ops(src) == {n.op for n in r.src.nodes} and _ops(dst) == {n.op for n in r.dst.nodes}
        for side, g in ((src, r.src), (dst, r.dst)):
            read = {v for n in g.nodes for v in n.inputs if v in (*g.inputs, *g.weights)}
            read |= {o for o in g.outputs if o in (*g.inputs, *g.weights)}
            assert set(re.findall(r"\b[A-Za-z_]\w*\b", side)) - _ops(side) == read
    hand = {r.name for f in (ROOT / "specs" / "rules").glob("*.rules") for r in parse_rules(f.read_text())}
    spelled = {f"{name} spelled out" for name in load_targets()}  # `subst generate --target` names its rules so
    assert hand <= written and written - hand <= spelled


def test_a_split_whose_parts_are_all_outputs_is_written_once() -> None:
    (rule,) = parse_rules(
        """rule r
graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight, %s: int64[2] = [4, 4]):
  %c = Concat(%w1, %w2) {axis=1} : float32[4,8]
  %m = MatMul(%x, %c) : float32[2,8]
  %a, %b = Split(%m, %s) {axis=1} : float32[2,4], float32[2,4]
  return %a, %b
=>
graph(%x: float32[2,4], %w1: float32[4,4] weight, %w2: float32[4,4] weight):
  %p = MatMul(%x, %w1) : float32[2,4]
  %q = MatMul(%x, %w2) : float32[2,4]
  return %p, %q
"""
    )
    assert algebra(rule) == "Split(MatMul(x, Concat(w1, w2)), s) => MatMul(x, w1), MatMul(x, w2)"
    swapped = replace(rule, src=replace(rule.src, outputs=rule.src.outputs[::-1]), dst=rule.dst)
    assert algebra(swapped).startswith("Split(MatMul(x, Concat(w1, w2)), s)[1], Split(MatMul(x, Concat(w1, w2)), s)[0]")


def _version_1(path: Path) -> list[Rule]:
    """A store as schema 1 wrote it: no rule_id column."""
    rules = [r for r in _shipped() if r.always]
    db = store.create(path)
    store.add_rules(db, rules)
    db.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX idx_rules_rule_id")
        conn.execute("ALTER TABLE rules DROP COLUMN rule_id")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()
    return rules


def test_a_version_1_store_gets_its_ids_when_opened_writable_and_in_memory_read_only(tmp_path: Path) -> None:
    """An older subst's store still serves `subst optimize`, which opens stores read-only: the ids go into a
    copy in memory and the file is left as it was; opened writable, the file gains them."""
    path = tmp_path / "old.db"
    rules = _version_1(path)
    before = path.read_bytes()
    read = store.open_store(path, read_only=True)
    assert [r.id for r in store.load_rules(read)] == [r.id for r in rules]
    assert store.find_rule(read, rules[0].id)["id"] == 1
    read.close()
    assert path.read_bytes() == before
    db = store.open_store(path)
    assert store.meta(db, "schema_version") == str(store.SCHEMA_VERSION)
    assert [row["rule_id"] for row in db["rules"].rows_where(order_by="id")] == [r.id for r in rules]
    assert [r.id for r in store.load_rules(db)] == [r.id for r in rules]
    assert store.find_rule(db, f"{rules[0].id}~reverse")["id"] == 1
