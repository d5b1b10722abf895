"""Numerical equivalence of two ONNX files, run in real onnxruntime sessions on the same random inputs.

This is subst's last line of defence: `optimize` writes nothing unless the rewritten model reproduces the
original's outputs here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from taso.errors import BadInput
from taso.ir import Graph, TensorType

DEFAULT_DIM = 2
"""Size given to symbolic and unknown dims when drawing inputs (2, not 1, so batch mixing shows)."""


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    outputs: int
    max_abs_diff: float
    worst_output: str
    rtol: float
    atol: float
    runs: int = 1
    mismatches: tuple[str, ...] = field(default_factory=tuple)

    def summary(self) -> str:
        verdict = "match" if self.ok else "MISMATCH in " + ", ".join(self.mismatches)
        return (
            f"{verdict}: {self.outputs} output(s) on {self.runs} random input set(s), max |diff| "
            f"{self.max_abs_diff:.3g} (rtol {self.rtol:g}, atol {self.atol:g})"
        )


TOLERANCES: dict[str, tuple[float, float]] = {"float16": (1e-2, 1e-3)}
"""Default (rtol, atol) by output element type; others get `DEFAULT_TOLERANCE`. float16 resolves about 1 part
in 2,000, so a rewrite that sums in another order (a folded product of two scales) moves an output by more
than the float32 default allows, though both orders are equally right."""
DEFAULT_TOLERANCE = (1e-3, 1e-5)


def tolerance(dtype: np.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The (rtol, atol) an output of ``dtype`` is compared at: what was given, else its type's default."""
    default = TOLERANCES.get(np.dtype(dtype).name, DEFAULT_TOLERANCE)
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def concrete_shape(t: TensorType, dims: Mapping[str, int]) -> tuple[int, ...]:
    if t.shape is None:
        raise BadInput("cannot draw random inputs for an input of unknown rank; give its shape in the model")
    return tuple(d if isinstance(d, int) else dims.get(d or "", DEFAULT_DIM) for d in t.shape)


def random_inputs(g: Graph, seed: int = 0, dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded random feeds for ``g``'s activation inputs: normal floats, small non-negative ints, bools."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in g.inputs:
        t = g.types.get(name)
        if t is None:
            raise BadInput(f"input {name!r} has no tensor type; cannot draw random values for it")
        shape = concrete_shape(t, dims or {})
        dtype = np.dtype(t.dtype)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise BadInput(f"input {name!r} has element type {t.dtype}, which the check cannot draw")
    return feeds


def ort_message(e: BaseException) -> str:
    """onnxruntime's error without its status prefix and C++ source location: the sentence a user needs."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+ (?:[\w:<>~]+\([^)]*\)\s*)?", "", text)
    return text[:300]


class RunError(Exception):
    """onnxruntime could not load or run a model; the message is `ort_message`'s."""


class Runner:
    """One CPU onnxruntime session on a model file, reused across input sets."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
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


def compare(
    original: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    graph: Graph,
    rtol: float | None = None,
    atol: float | None = None,
    seeds: Sequence[int] = (0, 1),
    dims: Mapping[str, int] | None = None,
) -> CheckResult:
    """Run both files on the same random inputs (drawn from ``graph``'s input types) and compare outputs, each
    at ``rtol`` and ``atol`` or, where not given, its element type's `tolerance`; the result reports the
    loosest tolerance used."""
    worst, worst_name, bad = 0.0, "", []
    outputs = 0
    used = tolerance(np.dtype("float32"), rtol, atol)

    def failed(reason: str, n_outputs: int, runs: int) -> CheckResult:
        return CheckResult(False, n_outputs, float("inf"), "", *used, runs, (reason,))

    try:
        reference = Runner(original)
    except RunError as e:
        raise BadInput(f"onnxruntime cannot load the original model ({e}); --no-check skips the check") from None
    try:
        result = Runner(candidate)
    except RunError as e:
        return failed(f"onnxruntime: {e}", len(reference.names), 0)
    for seed in seeds:
        feeds = random_inputs(graph, seed, dims)
        try:
            want = reference(feeds)
        except RunError as e:
            raise BadInput(f"onnxruntime cannot run the original model ({e}); --no-check skips the check") from None
        try:
            got = result(feeds)
        except RunError as e:
            return failed(f"onnxruntime: {e}", len(want), len(seeds))
        if set(want) != set(got):
            return failed("output names differ", len(want), len(seeds))
        outputs = len(want)
        for name, w in want.items():
            g = got[name]
            if w.shape != g.shape or w.dtype != g.dtype:
                bad.append(f"{name} (shape {g.shape} vs {w.shape})")
                continue
            if w.dtype.kind in "fc" and w.size and not np.isfinite(w).any():
                bad.append(f"{name} (the original gives no finite values on random inputs: nothing to compare)")
                continue
            if w.dtype.kind in "fc":
                r, a = tolerance(w.dtype, rtol, atol)
                used = max(used[0], r), max(used[1], a)
                diff = float(np.max(np.abs(w.astype(np.float64) - g), initial=0.0)) if w.size else 0.0
                close = np.allclose(g, w, rtol=r, atol=a, equal_nan=True)
            else:
                diff = float(np.count_nonzero(w != g))
                close = diff == 0
            if diff > worst or not worst_name:
                worst, worst_name = diff, name
            if not close and name not in bad:
                bad.append(name)
    return CheckResult(not bad, outputs, worst, worst_name, *used, len(seeds), tuple(dict.fromkeys(bad)))
