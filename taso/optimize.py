"""`optimize`: import a model, rewrite it with proved rules, export, check in onnxruntime, then write.

The output file appears only after the check passed: the model is staged in a temp folder beside the target
and moved into place at the end, so a failure of any kind leaves nothing half-written.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from taso import check, onnx_io, store
from taso.errors import BadInput, CheckFailed
from taso.ir import Graph

Rewrite = Callable[[Graph], tuple[Graph, dict[str, int]]]
"""A rewrite step: the new graph and how often each rule fired."""


def no_rewrite(g: Graph) -> tuple[Graph, dict[str, int]]:
    return g, {}


@dataclass
class Report:
    """What `optimize` did, for humans (`lines`) and scripts (`as_dict`)."""

    input: str
    output: str
    nodes_before: int
    nodes_after: int
    opaque_nodes: int
    proved_rules: int
    rules_applied: dict[str, int] = field(default_factory=dict)
    check: check.CheckResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        applied = ", ".join(f"{k} x{v}" for k, v in sorted(self.rules_applied.items())) or "none"
        return [
            f"input     {self.input}",
            f"output    {self.output}",
            f"nodes     {self.nodes_before} -> {self.nodes_after} ({self.opaque_nodes} passed through untouched)",
            f"rules     {self.proved_rules} proved in store; applied: {applied}",
            f"check     {self.check.summary() if self.check else 'skipped (--no-check)'}",
            "time      " + ", ".join(f"{k} {v:.2f}s" for k, v in self.seconds.items()),
        ]


def optimize(
    src: str | Path,
    dst: str | Path,
    store_path: str | Path = store.DEFAULT_PATH,
    run_check: bool = True,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    seed: int = 0,
    rewrite: Rewrite = no_rewrite,
) -> Report:
    """Optimize ``src`` into ``dst``; raises `BadInput` (nothing read or written) or `CheckFailed`."""
    src, dst = Path(src), Path(dst)
    if dst.resolve() == src.resolve():
        raise BadInput(f"{dst}: output would overwrite the input; choose another path")
    if not dst.parent.exists():
        raise BadInput(f"{dst}: folder {dst.parent} does not exist")
    if not dst.parent.is_dir():
        raise BadInput(f"{dst}: {dst.parent} is not a folder")
    if dst.is_dir():
        raise BadInput(f"{dst}: is a folder; the output would replace it")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    rules = store.proved_rule_count(store.open_store(store_path))
    graph = onnx_io.load_model(src)
    times["import"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result, applied = rewrite(graph)
    times["rewrite"] = time.perf_counter() - t0
    report = Report(
        str(src), str(dst), len(graph.nodes), len(result.nodes), sum(n.is_opaque for n in result.nodes), rules, applied
    )
    try:
        staging = tempfile.TemporaryDirectory(prefix=".subst-", dir=dst.parent)
    except OSError as e:
        raise BadInput(f"{dst}: cannot write to {dst.parent} ({e.strerror})") from None
    with staging as tmp:
        t0 = time.perf_counter()
        staged = onnx_io.save_model(result, Path(tmp) / dst.name)
        times["export"] = time.perf_counter() - t0
        if run_check:
            t0 = time.perf_counter()
            report.check = check.compare(src, staged, graph, rtol=rtol, atol=atol, seeds=(seed, seed + 1))
            times["check"] = time.perf_counter() - t0
            if not report.check.ok:
                report.seconds = times
                raise CheckFailed(
                    f"rewritten model differs from the original: {report.check.summary()}; nothing written", report
                )
        onnx_io.move_model(staged, dst)
    report.seconds = times
    return report
