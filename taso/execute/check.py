"""Numerical equivalence of two ONNX files, run in real onnxruntime sessions on the same random inputs.

This is subst's last line of defence: `optimize` writes nothing unless the rewritten model reproduces the
original's outputs here. "Reproduces" is judged against a float64 evaluation of the original
(`taso.reference`), not element-wise: a correct rewrite rounds differently, and an output near zero then
differs from the original by more than any relative tolerance (the folds of DenseNet-121 were refused at
rtol 1e-3, atol 1e-5, though they moved its outputs by less than onnxruntime's own optimizations do). The
rewrite's error against the reference may be a few times the original's own float32 error, no more; a wrong
rewrite 1e-5 off in norm fails.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from taso.errors import BadInput
from taso.execute import feeds, ortlog
from taso.execute.feeds import Sample, concrete_shape
from taso.execute.reference import NoReference, Reference
from taso.ir import Graph


@dataclass(frozen=True)
class Errors:
    """How far one model's outputs are from the float64 reference: the error's norm over the output's norm,
    and the worst element's error over the output's root mean square (a rewrite wrong in a few elements)."""

    norm: float = 0.0
    worst: float = 0.0

    def worse(self, other: Errors) -> Errors:
        return Errors(max(self.norm, other.norm), max(self.worst, other.worst))

    def within(self, limit: Errors) -> bool:
        return self.norm <= limit.norm and self.worst <= limit.worst

    def __str__(self) -> str:
        return f"{self.norm:.2g} (worst element {self.worst:.2g})"


@dataclass(frozen=True)
class CheckResult:
    """The verdict, and what it rests on (``mode``):

    - "reference": each float output's error against the float64 reference (`Errors`, on the first input set)
      was held to ``limit``, `FACTOR` times the original's own float32 error (``original_error``: the larger
      of onnxruntime's optimized and unoptimized runs) or `FLOOR_ULPS`, whichever is larger;
    - "given tolerance": ``--rtol``/``--atol`` were given: outputs were compared element-wise at them, as
      `numpy.allclose` does (the errors are still measured and reported);
    - "element-wise": no reference could be computed (``note`` says why): element-wise at each element
      type's default `tolerance`;
    - "identical": the candidate gave the original's outputs bit for bit on every input set, which passes
      whatever a tolerance or the reference would allow, so no reference was computed (it is the check's
      costly part: 3 of ResNet-50's 5 s on the 2-core CPU, for a rewrite that changed no arithmetic).

    ``rtol`` and ``atol`` are the loosest element-wise tolerances that applied; ``max_abs_diff`` is the
    largest difference from the original's output. Outputs that are not floats must be equal."""

    ok: bool
    outputs: int
    max_abs_diff: float
    worst_output: str
    rtol: float
    atol: float
    runs: int = 1
    mismatches: tuple[str, ...] = field(default_factory=tuple)
    mode: str = "element-wise"
    rewrite_error: Errors | None = None
    original_error: Errors | None = None
    """The original's own float32 error: the larger of onnxruntime's fully optimized and unoptimized runs."""
    limit: Errors | None = None
    note: str = ""
    inputs: str = "random"
    """Whose input sets the outputs were compared on: "random" (drawn by the check) or "given" (the user's)."""

    def summary(self) -> str:
        verdict = "match" if self.ok else "MISMATCH in " + ", ".join(self.mismatches)
        head = f"{verdict}: {self.outputs} output(s) on {self.runs} {self.inputs} input set(s), max |diff| {self.max_abs_diff:.3g}"
        errors = ""
        if self.rewrite_error and self.original_error:
            errors = f"; error vs float64: rewrite {self.rewrite_error}, original {self.original_error}"
        if self.mode == "reference":
            return f"{head}{errors}, limit {self.limit}{self.note}"
        if self.mode == "identical":
            return f"{head}, identical to the original's bit for bit{self.note}"
        return f"{head} (rtol {self.rtol:g}, atol {self.atol:g}, {self.mode}{self.note}){errors}"


TOLERANCES: dict[str, tuple[float, float]] = {"float16": (1e-2, 1e-3)}
"""Default (rtol, atol) by output element type; others get `DEFAULT_TOLERANCE`. float16 resolves about 1 part
in 2,000, so a rewrite that sums in another order (a folded product of two scales) moves an output by more
than the float32 default allows, though both orders are equally right."""
DEFAULT_TOLERANCE = (1e-3, 1e-5)


def tolerance(dtype: np.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The (rtol, atol) an output of ``dtype`` is compared at: what was given, else its type's default."""
    default = TOLERANCES.get(np.dtype(dtype).name, DEFAULT_TOLERANCE)
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def random_inputs(
    g: Graph, seed: int = 0, dims: Mapping[str, int] | None = None, sensible: bool = False, size: int | None = None
) -> dict[str, np.ndarray]:
    """Seeded random feeds for ``g``'s activation inputs: normal floats, bools, and integers 0 or 1 or, with
    ``sensible``, as the graph says they are used (`feeds.hints`: in-range indices, sizes of ``size``, by
    default the first of `feeds.sizes`). Unit timings draw plain ones; the check and the end-to-end timing
    guard try sensible ones first (`choose_inputs`)."""
    dims = dims or {}
    feeds.refuse_oversized(g, dims)
    rng = np.random.default_rng(seed)
    hints = feeds.hints(g, dims) if sensible else {}
    size = size or feeds.sizes(dims)[0]
    drawn = {}
    for name in g.inputs:
        t = g.types.get(name)
        if t is None:
            raise BadInput(f"input {name!r} has no tensor type; cannot draw random values for it")
        shape = concrete_shape(t, dims)
        dtype = np.dtype(t.dtype)
        if dtype.kind == "f":
            drawn[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            drawn[name] = feeds.integers(hints.get(name), shape, rng, size).astype(dtype)
        elif dtype.kind == "b":
            drawn[name] = rng.integers(0, 2, shape).astype(bool)
        else:  # a string tensor is numpy's object dtype: named as ONNX names it
            kind = "string" if dtype.kind == "O" else t.dtype
            raise BadInput(
                f"input {name!r} is a {kind} tensor, for which the check cannot draw random values; skip the "
                "check with --no-check"
            )
    return drawn


def ort_message(e: BaseException) -> str:
    """onnxruntime's error without its status prefix and C++ source location: the sentence a user needs."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+ (?:[\w:<>~]+\([^)]*\)\s*)?", "", text)
    text = re.sub(
        r"Non-zero status code returned while running (\S+) node\. Name:'([^']*)' Status Message: ",
        r"\1 node '\2': ",
        text,
    )
    return text[:300]


class RunError(Exception):
    """onnxruntime could not load or run a model; the message is `ort_message`'s."""


class Runner:
    """One CPU onnxruntime session on a model file, reused across input sets; ``optimized=False`` runs the
    graph as written (onnxruntime's DISABLE_ALL), the other float32 answer the original has."""

    def __init__(self, path: str | os.PathLike[str], optimized: bool = True) -> None:
        import onnxruntime as ort

        opts = ortlog.session_options()  # its errors come back as exceptions: logged too, they made a second line
        if not optimized:
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            self.session = ort.InferenceSession(os.fspath(path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own exception types per failure kind
            raise RunError(ort_message(e)) from None
        self.names = [o.name for o in self.session.get_outputs()]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return dict(zip(self.names, self.session.run(self.names, dict(feeds))))
        except Exception as e:
            raise RunError(ort_message(e)) from None


FACTOR = 8.0
"""How many times the original's own float32 error a rewrite's may reach. A correct rewrite rounds
differently, not more: the folds that fail the element-wise test on DenseNet-121 stay within 2x."""
FLOOR_ULPS = 16
"""Errors below this many units of the output type's precision pass whatever the original's error: a model
that float32 computes exactly (a Concat, one Relu) would otherwise allow no rounding at all."""
SANE_ULPS = 2**12
"""An original this many ulps from the reference is not rounding off it (an op the reference reads otherwise,
or a float32 computation that cancels catastrophically): its error is no yardstick, and the check falls back to
element-wise."""


def errors(y: np.ndarray, exact: np.ndarray, finite: np.ndarray) -> Errors:
    """`Errors` of ``y`` against ``exact`` over the elements ``finite`` selects."""
    e = y[finite].astype(np.float64) - exact[finite]
    scale = _norm(exact[finite])
    if not e.size:
        return Errors()
    if scale == 0.0:
        return Errors(_norm(e), float(np.max(np.abs(e))))
    return Errors(_norm(e) / scale, float(np.max(np.abs(e)) * np.sqrt(e.size)) / scale)


def _norm(x: np.ndarray) -> float:
    """The 2-norm of ``x``, taken over ``x`` divided by its largest magnitude: squaring values past 1e154 overflows
    float64, and an infinite scale would make any error relatively nothing."""
    top = float(np.max(np.abs(x))) if x.size else 0.0
    return top * float(np.linalg.norm(x / top)) if top and np.isfinite(top) else top


def _same_nonfinite(a: np.ndarray, b: np.ndarray) -> bool:
    """NaN and infinities in the same places (with the same signs), as an element-wise test with equal_nan."""
    fa = np.isfinite(a)
    return bool(np.array_equal(fa, np.isfinite(b)) and np.array_equal(a[~fa], b[~fa], equal_nan=True))


def _limit(own: Errors, dtype: np.dtype) -> Errors:
    floor = FLOOR_ULPS * float(np.finfo(dtype).eps)
    return Errors(max(FACTOR * own.norm, floor), max(FACTOR * own.worst, floor))


class _Judge:
    """Judges outputs one at a time over the input sets, remembering the original's own error on each."""

    def __init__(self, rtol: float | None, atol: float | None) -> None:
        self.rtol, self.atol = rtol, atol
        self.explicit = rtol is not None or atol is not None
        self.used = tolerance(np.dtype("float32"), rtol, atol)
        self.worst, self.worst_name = 0.0, ""
        self.bad: list[str] = []
        self.notes: list[str] = []
        self.own: dict[str, Errors] = {}  # per output, the original's own error against the reference
        self.rewrite, self.original, self.limit = Errors(), Errors(), Errors()

    def output(
        self, name: str, want: np.ndarray, got: np.ndarray, plain: np.ndarray | None, exact: np.ndarray | None
    ) -> None:
        """Judge the candidate's ``got`` against the original's ``want``; ``plain`` is the original run
        unoptimized and ``exact`` the float64 reference, where this input set has them."""
        if want.shape != got.shape or want.dtype != got.dtype:
            self.bad.append(f"{name} (shape {got.shape} vs {want.shape})")
            return
        if want.dtype.kind not in "fc":
            self._record(name, float(np.count_nonzero(want != got)))
            if not np.array_equal(want, got):
                self.bad.append(name)
            return
        if want.size and not np.isfinite(want).any():
            self.bad.append(f"{name} (the original gives no finite values on random inputs: nothing to compare)")
            return
        self._record(name, float(np.max(np.abs(want.astype(np.float64) - got), initial=0.0)))
        r, a = tolerance(want.dtype, self.rtol, self.atol)
        self.used = max(self.used[0], r), max(self.used[1], a)
        if exact is not None and plain is not None:
            self._measure(name, want, got, plain, exact)
        if name in self.own and not self.explicit:
            ok = _same_nonfinite(want, got) and self._within(name, want, got, exact)
        else:
            ok = np.allclose(got, want, rtol=r, atol=a, equal_nan=True)
        if not ok:
            self.bad.append(name)

    def _measure(self, name: str, want: np.ndarray, got: np.ndarray, plain: np.ndarray, exact: np.ndarray) -> None:
        if exact.shape != want.shape:
            self.notes.append(f"the float64 reference gives {name} shape {exact.shape}, onnxruntime {want.shape}")
            return
        finite = np.isfinite(want) & np.isfinite(exact)
        own = errors(want, exact, finite).worse(errors(plain, exact, finite))
        if own.norm > SANE_ULPS * float(np.finfo(want.dtype).eps):
            self.notes.append(f"the float64 reference is {own.norm:.2g} off onnxruntime's {name}: not rounding")
            return
        self.own[name] = own.worse(self.own.get(name, Errors()))
        self.original = self.original.worse(own)
        self.rewrite = self.rewrite.worse(errors(got, exact, finite))
        self.limit = self.limit.worse(_limit(own, want.dtype))

    def _within(self, name: str, want: np.ndarray, got: np.ndarray, exact: np.ndarray | None) -> bool:
        """Against the reference where this input set has one; else against the original's float32 output,
        which is itself off by about the original's error on the first set, so that much more is allowed."""
        own, limit = self.own[name], _limit(self.own[name], want.dtype)
        if exact is not None:
            return errors(got, exact, np.isfinite(want) & np.isfinite(exact)).within(limit)
        return errors(got, want, np.isfinite(want)).within(Errors(limit.norm + own.norm, limit.worst + own.worst))

    def _record(self, name: str, diff: float) -> None:
        if diff > self.worst or not self.worst_name:
            self.worst, self.worst_name = diff, name

    def result(self, outputs: int, runs: int, reference: Reference | None, failure: str = "") -> CheckResult:
        measured = bool(self.own)
        mode = "given tolerance" if self.explicit else "reference" if measured and not self.notes else "element-wise"
        notes = list(dict.fromkeys(self.notes))
        if reference is not None and reference.float32_ops and measured:
            notes.append(f"the reference ran {', '.join(sorted(reference.float32_ops))} in float32 (no double kernel)")
        return CheckResult(
            not failure and not self.bad,
            outputs,
            float("inf") if failure else self.worst,
            self.worst_name,
            *self.used,
            runs,
            (failure,) if failure else tuple(dict.fromkeys(self.bad)),
            mode,
            self.rewrite if measured else None,
            self.original if measured else None,
            self.limit if measured else None,
            "".join(f"; {n}" for n in notes),
        )


@dataclass(frozen=True)
class Inputs:
    """The input sets a check runs on, each one the original model was seen to run on, and whose they are."""

    sets: tuple[dict[str, np.ndarray], ...]
    given: bool = False
    outputs: tuple[dict[str, np.ndarray], ...] = ()
    """The original's outputs on each set, as `choose_inputs` ran it: `compare` need not open a session of the
    original and run it again (ResNet-50 on the 2-core CPU: 1 s of a 5 s check)."""


def choose_inputs(
    original: str | os.PathLike[str],
    graph: Graph,
    seeds: Sequence[int] = (0, 1),
    dims: Mapping[str, int] | None = None,
    given: Sequence[Sample] = (),
) -> Inputs:
    """The input sets to check on: the ``given`` ones (`feeds.given`) where there are any, else one drawn from
    ``graph``'s input types per seed, the first draw the original runs on (`_run_drawn`). Chosen before any
    search, so a model that runs on none is refused in a second, not after minutes of search. Raises
    `BadInput` where onnxruntime cannot load the original or run it on them (`feeds.refusal` says which inputs
    likely need given values)."""
    if not given:  # refused before onnxruntime loads the model, and with what the check can do about it
        feeds.refuse_oversized(graph, dims or {}, "give smaller sizes (--dim), or skip the check (--no-check)")
    run = _load(original)
    if given:
        outputs = tuple(_run_original(run, sample.arrays, sample.label) for sample in given)
        return Inputs(tuple(dict(sample.arrays) for sample in given), given=True, outputs=outputs)
    drawn = [_run_drawn(run, graph, seed, dims or {}) for seed in seeds]
    return Inputs(tuple(feed for feed, _ in drawn), outputs=tuple(out for _, out in drawn))


def compare(
    original: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    graph: Graph,
    rtol: float | None = None,
    atol: float | None = None,
    seeds: Sequence[int] = (0, 1),
    dims: Mapping[str, int] | None = None,
    inputs: Inputs | None = None,
) -> CheckResult:
    """Run both files on the same inputs and judge the candidate: on ``inputs`` (`choose_inputs`), by default
    on random ones drawn from ``graph``'s input types, one per seed.

    On the first input set every float output is measured against a float64 evaluation of ``graph``
    (`taso.reference`), as are the original's own two float32 runs (onnxruntime optimized and not): the
    candidate's error may reach `FACTOR` times the original's. Later sets judge the candidate against the
    original's float32 output with that allowance (the float64 evaluation is the check's costly part); one
    that fails so is measured against its own reference, and the worst allowance of any set applies. With
    ``rtol`` or ``atol`` given, the element-wise test at those tolerances decides instead, the errors still
    reported; where no reference can be computed, the element-wise test at each element type's `tolerance`
    decides and the summary says why. Other outputs must be equal. A candidate whose outputs are the
    original's bit for bit on every set passes without a reference (mode "identical"): none could fail it.
    The original's outputs are taken from ``inputs`` where `choose_inputs` kept them. Raises `BadInput`
    where onnxruntime cannot load or run the original (as `choose_inputs`)."""
    judge = _Judge(rtol, atol)
    if inputs is not None and inputs.outputs:
        chosen = list(zip(inputs.sets, inputs.outputs))
    else:
        original_run = _load(original)
        if inputs is None:
            chosen = [_run_drawn(original_run, graph, seed, dims or {}) for seed in seeds]
        else:
            chosen = [(s, _run_original(original_run, s, "the check's inputs")) for s in inputs.sets]
    outputs = len(chosen[0][1])
    try:
        run = Runner(candidate)
    except RunError as e:
        return judge.result(outputs, 0, None, f"onnxruntime: {e}")
    got_all = []
    for feed, want in chosen:
        try:
            got = run(feed)
        except RunError as e:
            return judge.result(outputs, len(chosen), None, f"onnxruntime: {e}")
        if set(want) != set(got):
            return judge.result(outputs, len(chosen), None, "output names differ")
        got_all.append(got)
    identical = all(_bit_identical(w, got[name]) for (_, want), got in zip(chosen, got_all) for name, w in want.items())
    reference = None if identical else Reference.of(graph)
    for k, ((feed, want), got) in enumerate(zip(chosen, got_all)):
        exact, plain = _exact(reference, original, feed, judge) if k == 0 else ({}, {})
        failed = len(judge.bad)
        for name, w in want.items():
            judge.output(name, w, got[name], plain.get(name), exact.get(name))
        if k and len(judge.bad) > failed and reference is not None:
            # A later set can be worse conditioned than the first (FastViT's second draw: the original's own
            # error 10x the first's); judged against its own reference, not the first set's allowance.
            exact, plain = _exact(reference, original, feed, judge)
            if exact:
                del judge.bad[failed:]
                for name, w in want.items():
                    judge.output(name, w, got[name], plain.get(name), exact.get(name))
    result = judge.result(outputs, len(chosen), reference)
    if identical and result.ok:
        result = replace(result, mode="identical")
    return replace(result, inputs="given") if inputs is not None and inputs.given else result


def _exact(
    reference: Reference | None, original: str | os.PathLike[str], feed: Mapping[str, np.ndarray], judge: _Judge
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The float64 reference's outputs on ``feed`` and the original's unoptimized ones; none (and a note on
    ``judge``) where either cannot be had."""
    if reference is None:
        return {}, {}
    try:
        return reference(feed), Runner(original, optimized=False)(feed)
    except (NoReference, RunError) as e:
        judge.notes.append(f"no float64 reference: {e}")
        return {}, {}


def _bit_identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``b`` is ``a`` bit for bit: same type, same shape, same bytes (NaNs with their payloads, the sign
    of zero); arrays of Python objects (strings) element by element."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.array_equal(a, b)) if a.dtype.kind == "O" else a.tobytes() == b.tobytes()


def _load(original: str | os.PathLike[str]) -> Runner:
    try:
        return Runner(original)
    except RunError as e:
        raise BadInput(f"onnxruntime cannot load the original model ({e}); --no-check skips the check") from None


def _run_original(original: Runner, inputs: Mapping[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    try:
        return original(inputs)
    except RunError as e:
        raise BadInput(
            f"onnxruntime cannot run the original model on {what} ({e}); --no-check skips the check"
        ) from None


def _run_drawn(
    original: Runner, graph: Graph, seed: int, dims: Mapping[str, int]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Inputs drawn for ``seed`` and the original's outputs on them: the first draw the original runs on, of
    integers as the graph says they are used (with each of `feeds.sizes` in turn), then 0 and 1 as before such
    hints. Raises `BadInput` (`feeds.refusal`, on the first draw's error) where it runs on none."""
    tried: list[dict[str, np.ndarray]] = []
    error = ""
    for how in [{"sensible": True, "size": size} for size in feeds.sizes(dims)] + [{}]:
        inputs = random_inputs(graph, seed, dims, **how)  # type: ignore[arg-type]
        if any(all(np.array_equal(inputs[v], t[v]) for v in inputs) for t in tried):
            continue
        tried.append(inputs)
        try:
            return inputs, original(inputs)
        except RunError as e:
            error = error or str(e)
    raise BadInput(feeds.refusal(graph, error))
