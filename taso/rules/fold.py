"""Fold a rule set: drop each rule that strictly smaller kept rules already derive.

A rule (A, B) is dropped when one rewrite of A and one rewrite of B, each with a kept rule of fewer ops (either
direction), meet. Graphs are compared as expression trees with types: a rule's inputs are variables that bind
only to terms of the same type (rules are applied at their own shapes, never generalised), equal subterms are
one value (rewriting one rewrites all), commutative ops match either way round. Rules are taken in order of
size, and a size's survivors join the kept set only once the whole size is done, so no rule is dropped on the
strength of one that is itself dropped.

Why this module matches terms rather than calling `taso.rules.match`, the optimizer's graph matcher: the two
answer different questions. The optimizer asks where a proved rule may be *applied* to a model; fold asks
whether one rule's sides are *equal* to another's up to one rewrite, and equality is a question about terms:

- a term is its value, so two equal subterms are one (hash-consing): a pattern with two nodes may land on one
  term, where `match.find_matches` wants a distinct model node for each source node (a model can compute one
  value twice, and rewriting one copy leaves the other); comparing the results as terms is the canonical
  comparison, with no graph isomorphism to decide;
- a variable binds at its exact type, where the optimizer's matcher leaves sizes free and lets a rule's floats
  stand for any float type: a derivation at other shapes would drop a rule on the strength of a generalisation
  the kept rule was never checked at;
- a rule's weights are variables like its inputs, and its constants are equal only to equal constants, where
  the optimizer binds a weight only to a model's weight;
- the rewrite is substitution (`_subst`, `_replace`), where `taso.search.rewrite.apply` instantiates a target
  at the model's shapes, checks it numerically and folds weight-only computation into new weights, which would
  turn terms that are equal into constants that are not.

What is the same idea is shared: the argument orders a node matches in (`match.input_orders`, from the op's
catalogue entry), and the rules' sides as graphs (`Rule.src`, `Rule.dst`) that both read.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator

from taso.ir import Graph
from taso.rules.match import input_orders
from taso.rules.rule import Rule

Term = tuple
"""("v", name, type) | ("c", digest, type) | ("o", op, attrs, args, output index, type)."""


def terms(g: Graph) -> tuple[Term, ...]:
    """One typed expression tree per output of ``g``."""
    memo: dict[str, Term] = {}

    def term(v: str) -> Term:
        if v not in memo:
            n = g.producers.get(v)
            t = g.types[v]
            if n is None:
                memo[v] = ("c", g.data[v].digest, t) if v in g.data else ("v", v, t)
            else:
                memo[v] = ("o", n.op, n.attrs, tuple(term(a) for a in n.inputs if a), n.outputs.index(v), t)
        return memo[v]

    return tuple(term(o) for o in g.outputs)


def _match(p: Term, t: Term, b: dict) -> Iterator[dict]:
    if p[0] == "v":
        if p[2] != t[-1]:
            return
        if p[1] in b:
            if b[p[1]] == t:
                yield b
            return
        yield {**b, p[1]: t}
        return
    if p[0] == "c" or t[0] != "o":
        if p == t:
            yield b
        return
    if p[1:3] != t[1:3] or p[4:] != t[4:] or len(p[3]) != len(t[3]):
        return
    for args in _arg_orders(t):
        yield from _match_all(p[3], args, b)


def _arg_orders(t: Term) -> list[tuple[Term, ...]]:
    """The arguments of op term ``t`` in each order a pattern may match them in (`input_orders`), each distinct
    order once (swapping two equal arguments binds nothing new)."""
    args = t[3]
    perms = input_orders(t[1], len(args))
    if len(perms) == 1:  # the order given: most ops, and the hot path of generation's fold
        return [args]
    out: list[tuple[Term, ...]] = []
    for perm in perms:
        ordered = tuple(args[j] for j in perm)
        if ordered not in out:
            out.append(ordered)
    return out


def _match_all(ps: tuple[Term, ...], ts: tuple[Term, ...], b: dict) -> Iterator[dict]:
    if not ps:
        yield b
        return
    for b2 in _match(ps[0], ts[0], b):
        yield from _match_all(ps[1:], ts[1:], b2)


def _subst(p: Term, b: dict) -> Term:
    if p[0] == "v":
        return b[p[1]]
    if p[0] == "c":
        return p
    return ("o", p[1], p[2], tuple(_subst(a, b) for a in p[3]), p[4], p[5])


def _subterms(t: Term, out: set[Term]) -> None:
    if t not in out:
        out.add(t)
        if t[0] == "o":
            for a in t[3]:
                _subterms(a, out)


def _replace(t: Term, old: Term, new: Term) -> Term:
    if t == old:
        return new
    if t[0] != "o":
        return t
    return ("o", t[1], t[2], tuple(_replace(a, old, new) for a in t[3]), t[4], t[5])


def _head(t: Term) -> tuple:
    """What an op term must share with a pattern's op node for `_match` to look further."""
    return ("o", t[1], t[2], t[4], t[5], len(t[3]))


def _pattern_key(p: Term) -> tuple:
    """The index key of a pattern: its root and what each argument demands (an op, a term, or only a type)."""
    args = tuple(_head(a) if a[0] == "o" else ("v", a[2]) if a[0] == "v" else ("t", a) for a in p[3])
    return _head(p), args


def _site_keys(t: Term) -> set[tuple]:
    """Every `_pattern_key` a pattern matching ``t`` can have (arguments either way round when commutative)."""
    out = set()
    for args in _arg_orders(t):
        options = [(_head(a) if a[0] == "o" else ("t", a), ("v", a[-1])) for a in args]
        out.update((_head(t), combo) for combo in itertools.product(*options))
    return out


class Rewriter:
    """Kept rules, both ways round, indexed by the root of their first pattern and what its arguments demand
    (with tens of thousands of rules, a root op alone leaves thousands of patterns to try at every site)."""

    def __init__(self) -> None:
        self.by_root: dict[tuple, list[tuple[tuple[Term, ...], tuple[Term, ...]]]] = defaultdict(list)

    def add(self, rule: Rule) -> None:
        a, b = terms(rule.src), terms(rule.dst)
        for lhs, rhs in ((a, b), (b, a)):
            rhs_vars = _vars(rhs)
            if all(p[0] == "o" for p in lhs) and rhs_vars <= _vars(lhs):
                self.by_root[_pattern_key(lhs[0])].append((lhs, rhs))

    def step(self, state: tuple[Term, ...]) -> set[tuple[Term, ...]]:
        """Every state one rule application away."""
        sites: set[Term] = set()
        for t in state:
            _subterms(t, sites)
        order = sorted((s for s in sites if s[0] == "o"), key=repr)
        out: set[tuple[Term, ...]] = set()
        for site in order:
            for lhs, rhs in (pair for key in _site_keys(site) for pair in self.by_root.get(key, ())):
                for b in _match(lhs[0], site, {}):
                    for chosen, b2 in _rest(lhs[1:], order, [site], b):
                        result = state
                        for old, r in zip(chosen, rhs):
                            new = _subst(r, b2)
                            result = tuple(_replace(t, old, new) for t in result)
                        out.add(result)
        return out


def _rest(lhs: tuple[Term, ...], sites: list[Term], chosen: list[Term], b: dict) -> Iterator[tuple[list[Term], dict]]:
    if not lhs:
        yield chosen, b
        return
    for site in sites:
        if site not in chosen:
            for b2 in _match(lhs[0], site, b):
                yield from _rest(lhs[1:], sites, [*chosen, site], b2)


def _vars(ts: Iterable[Term]) -> set[str]:
    out: set[str] = set()
    seen: set[Term] = set()
    for t in ts:
        _subterms(t, seen)
    out.update(t[1] for t in seen if t[0] == "v")
    return out


def size(rule: Rule) -> int:
    return len(rule.src.nodes) + len(rule.dst.nodes)


def fold(rules: list[Rule]) -> tuple[list[bool], int]:
    """Which rules to keep (in the given order), and how many are dropped as derivable."""
    keep = [True] * len(rules)
    kept = Rewriter()
    by_size: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rules):
        by_size[size(r)].append(i)
    for n in sorted(by_size):
        for i in by_size[n]:
            a, b = terms(rules[i].src), terms(rules[i].dst)
            near_a, near_b = {a, *kept.step(a)}, {b, *kept.step(b)}
            keep[i] = near_a.isdisjoint(near_b)
        for i in by_size[n]:
            if keep[i]:
                kept.add(rules[i])
    return keep, keep.count(False)
