"""The rewrites of `subst optimize` that need no cost: the proved rules read, the passes no proof covers (each
application validated on the model: `validated`), and the rules marked ``always``. Each is a step of
`taso.optimize.pipeline.PASSES`, which a `Run` passes through.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

from taso import onnx as onnx_io
from taso import ops
from taso.execute.precompute import precompute
from taso.ir import Graph
from taso.optimize import certify, steps
from taso.optimize.dedup import merge_duplicates
from taso.optimize.idle import drop_idle
from taso.optimize.run import Run
from taso.optimize.shapefold import fold_shapes
from taso.optimize.views import compose_views
from taso.rules import REVERSE, provenance
from taso.search import apply_everywhere, rulecache
from taso.verify import basis


def read_rules(run: Run) -> Run:
    """The proved rules whose proofs are from the specs in use and whose ops the model's opset has, indexed for
    the search (read before the search's clock starts)."""
    proofs = basis.for_folder(run.settings.specs)  # what each proof rested on, under the specs run with
    rules = rulecache.proved_rules(run.db)
    proved, untrusted = provenance.trusted(rules, proofs.digest_of, run.db if rulecache.as_stored() else None)
    proved = rulecache.usable_at(proved, onnx_io.opset_of(run.graph))
    run = run.reporting(search={"untrusted_rules": dict(untrusted)})
    if run.settings.standard_onnx:  # read either way its proof covers, a rule must write no onnxruntime-only op
        onnxruntime_only = ops.having(ops.ORT_ONLY)
        sides = lambda r: (r.src, r.dst) if r.reversible else (r.dst,)  # noqa: E731
        proved = [r for r in proved if not any(n.op in onnxruntime_only for g in sides(r) for n in g.nodes)]
    if not proved:
        return run
    return replace(run, proved=proved, index=rulecache.search_index(proved))


def validated(run: Run, name: str, after: Graph, removed: int) -> Run:
    """``run`` rewritten by the pass ``name`` into ``after`` where its step validates (`steps.Validator`):
    where the graphs differ, the pass's application is declined and reported, never written. A step whose
    graph before cannot be run here is made, its evidence saying so (`subst certify` then refuses it)."""
    if after is run.graph:
        return run
    validator = run.validator or steps.Validator(run.settings.dims, [s.arrays for s in run.given])
    run = replace(run, validator=validator)
    t0 = time.perf_counter()
    try:
        evidence = {**validator.validate(run.graph, after), "seconds": time.perf_counter() - t0}
    except steps.Invalid as e:
        return replace(run, declined=(*run.declined, {"name": name, "why": str(e)}))
    except steps.Unevaluated as e:
        evidence = {"how": "not evaluated", "why": str(e)}
    made = steps.step(steps.PASS, name, run.graph, after, evidence=evidence)
    return replace(run.rewritten(after, Counter({name: removed})), steps=(*run.steps, made))


def ruled(run: Run, name: str, after: Graph, applied: Counter) -> Run:
    """``run`` rewritten by rules into ``after``: a step carrying each rule's id, count and proof record (the
    rules are proved; the proof, not a run, is the evidence)."""
    if after is run.graph:
        return run.rewritten(after, applied)
    proofs = {r.id: r.detail.get("proof") for r in run.proved}
    rules = [{"id": k, "count": n, "proof": proofs.get(k.removesuffix(REVERSE))} for k, n in sorted(applied.items())]
    made = steps.step(steps.RULES, name, run.graph, after, rules, {"how": "proof"})
    return replace(run.rewritten(after, applied), steps=(*run.steps, made))


def precompute_weights(run: Run) -> Run:
    """Weight-only nodes computed ahead of time; the result is the baseline a gain is measured against."""
    run = validated(run, "precompute weight-only nodes", *precompute(run.graph))
    return replace(run, baseline=run.graph)


def fold_shape_arithmetic(run: Run) -> Run:
    """Shape arithmetic over static dims folded: onnxruntime leaves it to the run, so it is a gain, not baseline."""
    before = run.graph
    run = validated(run, "fold shape arithmetic over static dims", *fold_shapes(run.graph))
    if run.graph is not before:  # re-inferred: its inner dims have names of their own, to be sized
        run = replace(run, folded_dims=onnx_io.dim_sizes(run.graph, run.settings.dims))
    return run


def merge_duplicate_operations(run: Run) -> Run:
    """Each operation that repeats an earlier one (same op, attributes and inputs) read from the earlier one."""
    return validated(run, "merge operations that repeat an earlier one", *merge_duplicates(run.graph))


def drop_idle_operations(run: Run) -> Run:
    """Operations an operand's known content makes idle (an And with all-true) replaced by their other operand:
    the test for packed sequences in transformers' masks, true at every size, is not computed."""
    return validated(run, "drop operations their operand's content makes idle", *drop_idle(run.graph))


def compose_axis_moves(run: Run) -> Run:
    """Chains of Reshapes, Transposes, Squeezes and Unsqueezes as at most a Reshape, a Transpose and a Reshape,
    where that takes fewer nodes: at most one copy (Transpose) where the chain made one or more, none where it
    made none."""
    return validated(run, "compose chains of axis moves", *compose_views(run.graph))


def apply_always(run: Run) -> Run:
    """The rules marked ``always`` applied wherever they match (`apply_everywhere`)."""
    return ruled(run, certify.ALWAYS, *apply_everywhere(run.graph, [r for r in run.proved if r.always]))
