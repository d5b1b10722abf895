"""Folding a rule set (`taso.rules.fold`): every rewrite it relies on preserves the value, and it keeps what
smaller rules cannot reach (generation's pruning, which calls it, is checked against the independent derivation
checker of test_generate)."""

from __future__ import annotations

from test_generate import W, derivable, lookup, rules_of, x

from taso.generate.fingerprint import fingerprint
from taso.ir import Graph, Node, TensorType, WeightData
from taso.rules import Rewriter, size, terms
from taso.rules.fold import fold

# ---- folding: every rewrite it relies on preserves the value ----------------------------------------------


def _graph_of(state: tuple, data: dict) -> Graph:
    """An IR graph computing a state of `taso.rules.fold` terms (constants looked up by digest in ``data``)."""
    nodes: list[Node] = []
    types: dict[str, TensorType] = {}
    names: dict[tuple, list[str]] = {}
    inputs: dict[str, None] = {}
    weights: dict[str, WeightData] = {}

    def emit(t: tuple) -> str:
        if t[0] == "v":
            inputs[t[1]] = None
            types[t[1]] = t[2]
            return t[1]
        if t[0] == "c":
            name = f"c{t[1][:8]}"
            weights[name], types[name] = data[t[1]], t[2]
            return name
        key = t[1:4]
        if key not in names:
            args = [emit(a) for a in t[3]]
            n_out = len(data_of(t, data)) if t[1] == "Split" else 1
            names[key] = [f"t{len(nodes)}_{i}" for i in range(n_out)]
            nodes.append(Node(t[1], tuple(args), tuple(names[key]), t[2]))
        types[names[key][t[4]]] = t[5]
        return names[key][t[4]]

    outs = [emit(t) for t in state]
    for outs_k in names.values():
        for o in outs_k:
            types.setdefault(o, TensorType("float32", None))
    return Graph(tuple(nodes), tuple(inputs), tuple(outs), types, tuple(weights), weights)


def data_of(t: tuple, data: dict) -> list:
    return list(data[t[3][1][1]].array)


def test_every_fold_rewrite_preserves_the_value() -> None:
    rules = rules_of(("matmul", "transpose", "concat1", "split1", "add"), (x, W), 3, prune_pairs=False)
    data = {wd.digest: wd for r in rules for g in (r.src, r.dst) for wd in g.data.values()}
    small = [r for r in rules if size(r) <= 3]
    rewriter = Rewriter()
    for r in small:
        rewriter.add(r)
    checked = 0
    for r in rules:
        want = fingerprint(r.src)
        for g in (r.src, r.dst):
            for state in rewriter.step(terms(g)):
                assert fingerprint(_graph_of(state, data)) == want, r
                checked += 1
    assert checked > 100


def test_fold_keeps_what_smaller_rules_cannot_reach() -> None:
    rules = rules_of(("matmul", "transpose"), (x, W), 3, prune_pairs=False)
    keep, dropped = fold(rules)
    assert 0 < dropped < len(rules)
    kept = [r for r, k in zip(rules, keep) if k]
    t_mm = lookup(kept, {"MatMul": 1, "Transpose": 1}, {"Transpose": 2, "MatMul": 1})
    assert t_mm  # nothing smaller derives transpose of a product
    for r, k in zip(rules, keep):
        if not k:
            assert derivable(r.src, r.dst, [q for q in kept if size(q) < size(r)], depth=1)
