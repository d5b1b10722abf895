"""Applying a matched rule: build its target at the model's real shapes and splice it in.

The target's outputs take over the names of the source outputs they replace, so every consumer, graph
output and subgraph reference stays valid without renaming anything. Sizes a rule carries as data are
recomputed for the real shapes: a Split's sizes from the source outputs it reproduces, a constant
generator's shape by mapping the rule's dims to the model's. The instantiation must type-check and give
exactly the source's output types; where it is cheap, both sides are also evaluated on random inputs at
the real shapes (float64) and must agree, a guard against a rule generalised beyond what it says. New
weight-only computation (concatenated, enlarged, transposed weights) is folded into initializers.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from functools import cache

import numpy as np

from taso import ops
from taso.ir import (
    Dim,
    Graph,
    IRError,
    Kind,
    Node,
    TensorType,
    WeightData,
    eliminate_dead,
    fresh_names,
    lint,
    topological_order,
)
from taso.rules import OUTPUT, AttrIs, Condition, Match, Rule, Size, SizeIs, float_dtype

CHECK_LIMIT = 20_000_000
"""Multiply-adds above which the float64 instantiation check is skipped (the final onnxruntime check stays)."""


class Declined(Exception):
    """A match whose target cannot be instantiated here; the message says why in a user's words: what could not
    be done before the first colon (the search counts rewrites declined by it, and the report shows the counts),
    the instance's detail after it (kept for the search's tracer)."""


class Unfit(Declined):
    """A match whose target cannot be built at its own values' shapes, sizes and constants (`instantiate`):
    nothing outside the matched nodes decides it, so the search declines it again, unbuilt, in every graph that
    keeps those nodes (`taso.search.backtrack`)."""


def _dim_map(match: Match, g: Graph) -> dict[int, int | None]:
    """Rule dim size -> model dim size, from the bound inputs and weights (not the rule's constants); None for a
    size that maps two ways or to a dynamic dim. A proof reads a target constant's size the same way
    (`taso.lowering`): as the source's dims of that size, or as the literal where the source has none."""
    seen: dict[int, set[object]] = {}
    src = match.rule.src
    for rv in (*src.inputs, *src.weights):
        if rv not in match.values or rv in src.data:
            continue
        rt, mt = src.types[rv], g.types[match.values[rv]]
        for a, b in zip(rt.shape or (), mt.shape or ()):
            if isinstance(a, int):
                seen.setdefault(a, set()).add(b)
    return {a: next(iter(b)) if len(b) == 1 and isinstance(next(iter(b)), int) else None for a, b in seen.items()}


def _constant_value(g: Graph, name: str) -> np.ndarray | None:
    d = g.data.get(name)
    return None if d is None else d.array


def _bound_attrs(n: Node, match: Match) -> dict:
    """A target node's attributes, free ones taken from what the match bound; a free attribute whose example
    no source node has is a literal (`Rule.free_examples`), as the verifier read it."""
    attrs = n.attr
    for k in match.rule.free_attrs & attrs.keys():
        attrs[k] = match.attrs.get((k, attrs[k]), attrs[k])
    return attrs


def _bound_size(g: Graph, match: Match, s: Size) -> int | str | None:
    src = match.rule.src
    name = src.outputs[int(s.value.removeprefix(OUTPUT))] if s.value.startswith(OUTPUT) else s.value
    t = g.types.get(match.values.get(name, ""))
    return None if t is None or t.shape is None or s.axis >= len(t.shape) else t.shape[s.axis]


def _unmet(g: Graph, match: Match, conditions: tuple[Condition, ...]) -> Condition | None:
    """The first condition of the rule's proof this match does not meet (a symbolic dim meets an equality
    only with itself, and no size)."""
    for c in conditions:
        if isinstance(c, AttrIs):
            ok = _same_value(match.attrs.get((c.attr, c.example), c.example), c.example)
        elif isinstance(c, SizeIs):
            ok = _bound_size(g, match, c.a) == c.n
        else:
            a, b = _bound_size(g, match, c.a), _bound_size(g, match, c.b)
            ok = a is not None and a == b
        if not ok:
            return c
    return None


def _same_value(a: object, b: object) -> bool:
    return (tuple(a) if isinstance(a, list | tuple) else a) == (tuple(b) if isinstance(b, list | tuple) else b)


def _broadcast_changed(
    nodes: list[Node], example: Graph, types: Mapping[str, TensorType], names: Mapping[str, str]
) -> Node | None:
    """A node whose operands broadcast otherwise than in the rule's example (``names``: example value ->
    instance value): a proof over symbolic sizes lowered each element-wise node by how its example broadcasts
    (same shape, per channel, by a scalar), so an instance must broadcast the same way; an Expand's input and
    result likewise (specs/expand.py spreads the axes its example spreads)."""
    for n in nodes:
        operands = n.inputs if ops.get(n.op).elementwise else (n.inputs[0], n.outputs[0]) if n.op == "Expand" else ()
        if len(operands) < 2:
            continue
        shapes = [example.types[v].shape or () for v in operands]
        bound = [t.shape or () if (t := types.get(names.get(v, ""))) else None for v in operands]
        if None in bound:
            return n
        for (x, y), (bx, by) in zip(itertools.combinations(shapes, 2), itertools.combinations(bound, 2)):
            for p, q, bp, bq in zip(reversed(x), reversed(y), reversed(bx), reversed(by)):
                if (p == q and bp != bq) or (p == 1 != q and bp != 1) or (q == 1 != p and bq != 1):
                    return n
    return None


def instantiate(g: Graph, match: Match) -> tuple[list[Node], dict[str, WeightData], dict[str, TensorType]]:
    """The target's nodes, new weights and types at the model's shapes; raises `Unfit`."""
    src, dst = match.rule.src, match.rule.dst
    covered = match.rule.covered
    if covered is not None:
        unmet = _unmet(g, match, covered)
        if unmet is not None:
            raise Unfit(f"this case is outside what the rule's proof covers: it needs {unmet}")
        changed = _broadcast_changed(list(src.nodes), src, g.types, match.values)
        if changed is not None:
            raise Unfit(f"this case is outside what the rule's proof covers: {changed.op} broadcasts otherwise here")
    out_name = {d: match.values[s] for s, d in zip(src.outputs, dst.outputs)}
    out_type = {d: g.types[match.values[s]] for s, d in zip(src.outputs, dst.outputs)}
    fresh = fresh_names(g.values(), "subst_")
    names: dict[str, str] = {}
    for v in (*dst.inputs, *dst.weights):
        if v in match.values:
            names[v] = match.values[v]
        elif v not in dst.data:
            raise Unfit(f"the rewrite reads a value the matched nodes do not give: {v!r}")
    types: dict[str, TensorType] = {}
    data: dict[str, WeightData] = {}
    dims = _dim_map(match, g)
    floats = float_dtype(match, g)
    nodes: list[Node] = []
    for n in dst.nodes:
        attrs = _bound_attrs(n, match)
        if "constant" in ops.get(n.op).tags:
            shape = tuple(dims.get(d, d) for d in attrs["shape"])  # type: ignore[union-attr]
            if None in shape:
                raise Unfit(f"the rewrite needs a constant whose size the model does not fix: {n.op} {attrs['shape']}")
            attrs = {**attrs, "shape": shape, "dtype": floats}
        for o in n.outputs:
            names[o] = out_name.get(o) or next(fresh)
        inputs = []
        for v in n.inputs:
            if v not in names:  # an inline constant of the rule (Split sizes): recomputed below
                names[v] = next(fresh)
            inputs.append(names[v])
        in_types = [types.get(names[v]) or g.types.get(names[v]) for v in n.inputs]
        static = ops.get(n.op).static_inputs  # the values a shape rule reads; other weights stay unread
        consts: list[np.ndarray | None] = [
            (data[names[v]].array if names[v] in data else _constant_value(g, names[v])) if i in static else None
            for i, v in enumerate(n.inputs)
        ]
        if n.op == "Split" and len(n.inputs) > 1 and n.inputs[1] in dst.data:
            if not all(o in out_type for o in n.outputs):
                raise Unfit("the rewrite needs Split sizes the matched outputs do not give")
            axis = int(attrs["axis"])  # type: ignore[arg-type]
            dims_along = [out_type[o].shape[axis] for o in n.outputs]  # type: ignore[index]
            if not all(isinstance(d, int) for d in dims_along):
                raise Unfit("the rewrite would split along a dimension whose size is known only at run time")
            sizes = np.array(dims_along, np.int64)
            sizes_name = next(fresh)  # never the bound source value: these sizes are the target's own
            inputs[1] = sizes_name
            data[sizes_name] = WeightData(sizes)
            types[sizes_name] = TensorType("int64", (len(n.outputs),))
            in_types[1], consts[1] = types[sizes_name], sizes
        elif (k := _target_input(n, dst)) is not None:
            copied = (dst.types[n.inputs[0]], in_types[0]) if not attrs.get("allowzero") else None
            target = _reshape_target(dst.types[n.outputs[0]], out_type.get(n.outputs[0]), dims, copied)
            target_name = next(fresh)  # the rule's target is its example's; this one is the model's
            inputs[k] = target_name
            data[target_name] = WeightData(target)
            types[target_name] = in_types[k] = TensorType("int64", (len(target),))
            consts[k] = target
        elif any(t is None for t in in_types):
            raise Unfit(f"the rewrite needs a constant whose size the model does not fix: an input of {n.op}")
        try:
            outs = ops.infer(n.op, in_types, attrs, consts, len(n.outputs))  # type: ignore[arg-type]
        except ops.OpError as e:
            raise Unfit(f"the rewrite does not fit the model's shapes here: {e}") from None
        for o, t in zip(n.outputs, outs):
            types[names[o]] = t
        nodes.append(Node(n.op, tuple(inputs), tuple(names[o] for o in n.outputs), tuple(sorted(attrs.items()))))
    for d, name in out_name.items():
        got = g.types.get(match.values[d]) if d in dst.inputs else types.get(name)
        if got != out_type[d]:
            raise Unfit(f"the rewrite would change an output's shape or type: {got}, not {out_type[d]}")
    if covered is not None:
        changed = _broadcast_changed(list(dst.nodes), dst, {**g.types, **types}, names)
        if changed is not None:
            raise Unfit(
                f"this case is outside what the rule's proof covers: the rewrite's {changed.op} broadcasts otherwise"
            )
    return nodes, data, types


def buildable(rule: Rule) -> bool:
    """Whether `instantiate` can ever build ``rule``'s target: each target node reads only values the match
    binds or the target makes, but for the constants it writes itself (Split sizes, a Reshape target). A rule
    read backwards whose source carried a constant of its own (GELU spelled out: 0.5, 1, 1/sqrt(2)) is not:
    it would match everywhere and be declined everywhere (gMLP-S16: 25,600 times in one search)."""
    bound, made = set(rule.src.values()), {o for n in rule.dst.nodes for o in n.outputs}
    for n in rule.dst.nodes:
        split_sizes = n.op == "Split" and len(n.inputs) > 1 and n.inputs[1] in rule.dst.data
        if split_sizes or _target_input(n, rule.dst) is not None:
            continue
        if any(v and v not in bound and v not in made for v in n.inputs):
            return False
    return True


def _target_input(n: Node, rule_side: Graph) -> int | None:
    """The position of ``n``'s whole-shape input (Reshape's target) where the rule carries it as data."""
    where = ops.shape_input(n.op)
    return where[0] if where is not None and n.inputs[where[0]] in rule_side.data else None


def _reshape_target(
    example: TensorType,
    output: TensorType | None,
    dims: Mapping[int, int | None],
    copied: tuple[TensorType, TensorType | None] | None = None,
) -> np.ndarray:
    """A Reshape's target at the model's sizes: the matched output's shape where it makes one, else its example
    result's sizes mapped to the model's (`_dim_map`), the one size no input has left for onnxruntime to infer
    (the product of a batch's rows). A size the model knows only at run time (a symbolic batch) is 0 where the
    Reshape keeps it in place (``copied``: its example input and its input at the model's sizes, given where
    allowzero is 0, which makes 0 copy the input's dim). The proof read its result's sizes as variables
    (specs/reshape.py), so any target that type-checks is one it covers; one that cannot be written is declined."""
    if output is not None:
        shape = output.shape or ()
        if all(isinstance(d, int) for d in shape):
            return np.array(shape, np.int64)
    mapped = [dims.get(d, -1) if isinstance(d, int) else None for d in example.shape or ()]
    if copied is not None and copied[1] is not None:
        was, now = copied[0].shape or (), copied[1].shape or ()
        mapped = [
            0 if m is None and i < min(len(was), len(now)) and was[i] == d and not isinstance(now[i], int) else m
            for i, (m, d) in enumerate(zip(mapped, example.shape or ()))
        ]
    if None in mapped or mapped.count(-1) > 1:
        raise Unfit(f"the rewrite needs a Reshape target the model's sizes do not fix: {example}")
    return np.array(mapped, np.int64)


def _evaluate(graph_nodes: list[Node], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for n in graph_nodes:
        outs = ops.get(n.op).run([values[i] for i in n.inputs], n.attr, len(n.outputs))
        values.update(zip(n.outputs, outs))
    return values


def _fully_known(shape: tuple[Dim, ...] | None) -> bool:
    """Every dim a size: not symbolic, not unknown, not negative (exporters such as paddle2onnx write -1 for a
    dynamic dim, and onnx keeps it as a size)."""
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def _work(nodes: list[Node], types: Mapping[str, TensorType]) -> float:
    """Multiply-adds, roughly: output elements times the reduction length of MatMul and Conv."""
    total = 0.0
    for n in nodes:
        shapes = [types[v].shape for v in (*n.inputs, *n.outputs) if v in types]
        if not all(_fully_known(s) for s in shapes):
            return float("inf")
        reduction = 1
        if n.op == "MatMul":
            reduction = types[n.inputs[0]].shape[-1]  # type: ignore[index]
        elif n.op == "Conv":
            reduction = int(np.prod(types[n.inputs[1]].shape[1:]))  # type: ignore[index]
        total += float(np.prod(types[n.outputs[0]].shape)) * reduction  # type: ignore[arg-type]
    return total


def numerically_equal(g: Graph, match: Match, new_nodes: list[Node], new_data: dict, new_types: dict) -> bool | None:
    """Both sides on the same random float64 inputs at the real shapes; None where that cannot be done: too
    costly, an opaque op, or an input whose shape is not fully known (no random input can be drawn for it).
    The final onnxruntime check, on every output at bound sizes, still judges such a rewrite."""
    old_nodes = [match.nodes[i] for i in range(len(match.rule.src.nodes))]
    types = {**g.types, **new_types}
    if any(n.is_opaque for n in old_nodes) or _work(old_nodes + new_nodes, types) > CHECK_LIMIT:
        return None
    rng = np.random.default_rng(0)
    produced = {o for n in old_nodes + new_nodes for o in n.outputs}
    feeds: dict[str, np.ndarray] = {}
    for n in old_nodes + new_nodes:
        for v in n.inputs:
            if v in produced or v in feeds:
                continue
            if v in new_data:
                feeds[v] = new_data[v].array
            elif v in g.data:
                arr = g.data[v].array
                feeds[v] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr
            else:
                t = types[v]
                if not _fully_known(t.shape) or np.dtype(t.dtype).kind != "f":
                    return None
                feeds[v] = rng.standard_normal(t.shape)  # type: ignore[arg-type]
    src, dst = match.rule.src, match.rule.dst
    # each source output against its target output, which is one of the target's inputs in rules like
    # Concat(Split(x)) => x (`apply` then hands consumers that input)
    pairs = [
        (match.values[s], match.values[d] if d in (*dst.inputs, *dst.weights) else match.values[s])
        for s, d in zip(src.outputs, dst.outputs)
    ]
    try:
        before = _evaluate(old_nodes, dict(feeds))
        after = _evaluate(new_nodes, dict(feeds))
        return all(np.allclose(before[a], after[b], rtol=1e-7, atol=1e-9) for a, b in pairs)
    except (ops.OpError, ValueError, KeyError):
        return None


_CHECKED: dict[tuple, bool | None] = {}


def _checked(g: Graph, match: Match, new_nodes: list[Node], new_data: dict, new_types: dict) -> bool | None:
    """`numerically_equal`, once per rule and bound input types: the same rule at the same shapes is the same
    question wherever in a model it matches (weights bound by value differ, but the check draws them at random
    unless they are data, and data-dependent rules carry that data in the key; free attributes are in it too)."""
    src = match.rule.src
    key = (
        match.rule.name,
        src.key,
        match.rule.dst.key,
        tuple(str(g.types.get(match.values[v])) for v in (*src.inputs, *src.weights) if v in match.values),
        tuple(sorted(match.attrs.items(), key=str)),
    )
    if key not in _CHECKED:
        _CHECKED[key] = numerically_equal(g, match, new_nodes, new_data, new_types)
    return _CHECKED[key]


Folds = dict[tuple, tuple[WeightData, ...]]
"""Constant folds done so far: (op, attributes, output dtypes, input data) -> output data. A search folds the
same weights in many graphs (every graph that keeps a match applies it again); reusing the result also reuses
its digest, so the search's repeat check does not hash it again."""


def fold_constants(g: Graph, candidates: set[str], folds: Folds | None = None) -> Graph:
    """Replace catalogue nodes among ``candidates`` (by output name) whose inputs all have data by weights;
    ``folds`` remembers results across calls. Raises `Declined` where a fold overflows its type."""
    folds = {} if folds is None else folds
    data, types = dict(g.data), dict(g.types)
    weights, nodes = list(g.weights), []
    for n in g.nodes:
        if (
            n.outputs
            and n.outputs[0] in candidates
            and not n.is_opaque
            and all(v in data for v in n.inputs)
            and all(v for v in n.inputs)
        ):
            key = (n.op, n.attrs, tuple(types[o].dtype for o in n.outputs), tuple(data[v] for v in n.inputs))
            lazy = ops.REARRANGES in ops.get(n.op).tags and all(types[o].is_static for o in n.outputs)
            if key not in folds and lazy:
                folds[key] = _deferred(n, [data[v] for v in n.inputs], [types[o] for o in n.outputs])
            elif key not in folds:
                with np.errstate(over="ignore", invalid="ignore"):
                    outs = ops.get(n.op).run([data[v].array for v in n.inputs], n.attr, len(n.outputs))
                if not all(_finite(o) for o in outs) and all(_finite(data[v].array) for v in n.inputs):
                    raise Declined(f"a weight the rewrite precomputes overflows {types[n.outputs[0]].dtype}: {n.op}")
                folds[key] = tuple(
                    WeightData.computed(_fresh(arr, types[o].dtype), (n.op, n.attrs, k, *(data[v] for v in n.inputs)))
                    for k, (o, arr) in enumerate(zip(n.outputs, outs))
                )
            for o, folded in zip(n.outputs, folds[key]):
                data[o] = folded
                weights.append(o)
            continue
        nodes.append(n)
    if len(nodes) == len(g.nodes):
        return g
    return replace(g, nodes=tuple(nodes), weights=tuple(weights), data=data, types=types)


def _deferred(n: Node, inputs: list[WeightData], out_types: list[TensorType]) -> tuple[WeightData, ...]:
    """The folded outputs of a rearranging node, made when first read. A search folds every candidate's new
    weights and costs the candidate by shapes alone: with the lookahead, NasRNN's merges concatenated 1,435 gate
    matrices for graphs of which a handful were kept, and made lazy its search took 14.4 s, not 25.5 s."""
    run = cache(lambda: ops.get(n.op).run([d.array for d in inputs], n.attr, len(n.outputs)))
    return tuple(
        WeightData.deferred(
            t.dtype,
            t.shape,
            lambda k=k, t=t: _fresh(run()[k], t.dtype),
            (n.op, n.attrs, k, *inputs),  # type: ignore[arg-type, misc]
        )
        for k, t in enumerate(out_types)
    )


def _finite(array: np.ndarray) -> bool:
    """No inf or NaN: a fold that makes one from finite weights (float16 scales multiplied past 65,504) would
    change the model's outputs, where the unfolded ops, applied to activations in between, need not."""
    return array.dtype.kind != "f" or bool(np.isfinite(array).all())


def _fresh(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as a C-ordered array of ``dtype`` that nothing else holds: copied only when it is a view
    (of a weight the fold read, say), not when the op made it (a concatenation of megabytes of weights)."""
    out = np.asarray(array, dtype=dtype)
    return out if out.flags.c_contiguous and out.flags.owndata else np.array(out, order="C")


def _reuse(g: Graph, new_nodes: list[Node], removed: set[int], renamed: set[str]) -> tuple[list[Node], dict[str, str]]:
    """``new_nodes`` less those that recompute a value ``g`` already has (same op, attributes and inputs), with
    the renames that point their readers at it. Two merges of NasRNN's ``x @ Wx + h @ Wh`` each make a
    ``Concat(x, h)``; reading one Concat, their MatMuls are siblings a third rule can merge. A value that is a
    graph output keeps its node (the interface never changes), and so does one whose twin's value is renamed."""
    kept: list[Node] = []
    same: dict[str, str] = {}
    for n in new_nodes:
        if same:
            n = replace(n, inputs=tuple(same.get(i, i) for i in n.inputs))
        key = (n.op, n.attrs, n.inputs)
        readers = (*g.consumers.get(n.inputs[0], ()), *kept) if n.inputs else kept  # a twin reads what n reads
        alive = (t for t in readers if id(t) not in removed and not t.is_opaque)
        twin = next((t for t in alive if (t.op, t.attrs, t.inputs) == key), None)
        if twin is not None and not set(n.outputs) & set(g.outputs) and not set(twin.outputs) & renamed:
            same.update((o, t) for o, t in zip(n.outputs, twin.outputs) if o)
        else:
            kept.append(n)
    return kept, same


def apply(g: Graph, match: Match, folds: Folds | None = None) -> Graph:
    """``g`` with the match replaced by the rule's target (new weight-only values folded, reusing ``folds``);
    raises `Declined`."""
    new_nodes, new_data, new_types = instantiate(g, match)
    replaced = {match.values[o] for o in match.rule.src.outputs}
    old = [match.nodes[i] for i in range(len(match.rule.src.nodes))]
    if any(o and o not in replaced and o in g.outputs for n in old for o in n.outputs):
        raise Declined("a value the rewrite would remove is a model output")
    rename: dict[str, str] = {}
    for s, d in zip(match.rule.src.outputs, match.rule.dst.outputs):
        if d not in match.rule.dst.inputs:
            continue
        # a target output that is one of its inputs: consumers read that input instead; if the replaced value
        # is a graph output, the input takes over its name (the graph's interface never changes)
        old_v, new_v = match.values[s], match.values[d]
        if old_v not in g.outputs:
            rename[old_v] = new_v
        elif new_v in g.producers and new_v not in g.outputs and not any(new_v in n.implicit for n in g.nodes):
            rename[new_v] = old_v
        else:
            raise Declined("the rewrite would rename a model input, weight or output")
    removed = {id(n) for n in old if any(o in replaced for o in n.outputs)}
    if any(
        o and o not in replaced and any(id(c) not in {id(m) for m in old} for c in g.consumers.get(o, ()))
        for n in old
        if id(n) in removed
        for o in n.outputs
    ):
        raise Declined("a node the rewrite would remove also computes a value other nodes read")
    verdict = _checked(g, match, new_nodes, new_data, new_types)
    if verdict is False:
        raise Declined("the rule's two sides differ at the model's shapes (float64 check)")
    new_nodes, same = _reuse(g, new_nodes, removed, set(rename))
    rename.update(same)
    kept = [
        replace(n, inputs=tuple(rename.get(i, i) for i in n.inputs), outputs=tuple(rename.get(o, o) for o in n.outputs))
        if any(v in rename for v in (*n.inputs, *n.outputs))
        else n
        for n in g.nodes
        if id(n) not in removed
    ]
    order = topological_order(kept + new_nodes, set(g.inputs) | set(g.weights) | set(new_data))
    if order is None:
        raise Declined("the rewrite would make the graph read its own result (a cycle)")
    out = replace(
        g,
        nodes=tuple(order),
        weights=(*g.weights, *new_data),
        data={**g.data, **new_data},
        types={**g.types, **new_types},
    )
    out = fold_constants(out, {o for n in new_nodes for o in n.outputs if out.kinds.get(o) is Kind.CONSTANT}, folds)
    pending = {o: n.op for n in new_nodes if not ops.get(n.op).exportable for o in n.outputs}
    stuck = sorted({op for o, op in pending.items() if o in out.producers})
    if stuck:
        raise Declined(f"a weight-only op of the rewrite could not be precomputed here: {', '.join(stuck)}")
    try:
        return lint(eliminate_dead(out))
    except IRError as e:
        raise Declined(f"the rewrite would leave an invalid graph: {e}") from None
