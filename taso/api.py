"""The Python API behind `taso.optimize`, `taso.load`, `taso.save`, `taso.verify` and `taso.generate`: each a thin
call into the library code the `subst` commands run, taking a ModelProto or a path where a model goes in.

A ModelProto goes through the pipeline as a file does: written to a temp folder and read from there, so it is
validated, upgraded and checked exactly as `subst optimize` treats a file, and the same model handed over as a
proto or as a path comes back as the same bytes. Heavy modules (onnx, onnxruntime, z3) are imported at the first
call, so ``import taso`` stays quick.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taso.errors import BadInput, CheckFailed

if TYPE_CHECKING:
    from taso.generate import Result
    from taso.ir import Graph
    from taso.onnx import ModelProto
    from taso.optimize import Progress, Report
    from taso.verify import Summary

PROTO = "<ModelProto>"
"""How reports and errors name a model handed over or back as a proto rather than a file."""
_PROTO_FILE = "model.onnx"


@contextmanager
def _scratch() -> Iterator[Path]:
    """A temp folder for models that pass as protos; a `BadInput` about the proto's file names the proto."""
    with tempfile.TemporaryDirectory(prefix="subst-api-") as tmp:
        try:
            yield Path(tmp)
        except BadInput as e:
            raise BadInput(str(e).replace(str(Path(tmp) / _PROTO_FILE), PROTO)) from None


def _is_path(model: object) -> bool:
    return isinstance(model, str | os.PathLike)


def _source(model: ModelProto | str | os.PathLike[str], folder: Path) -> Path:
    """``model``'s file: its path, or the ModelProto written into ``folder``."""
    if _is_path(model):
        return Path(model)  # type: ignore[arg-type]
    from taso import onnx as onnx_io

    return onnx_io.write_proto(model, folder / _PROTO_FILE)


def _label(report: Report, model: object) -> Report:
    """The report names the caller's model, not the temp files it went through."""
    report.input = str(model) if _is_path(model) else PROTO
    report.output = PROTO
    return report


def optimize(
    model: ModelProto | str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] | None = None,
    check: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    **settings: Any,
) -> tuple[ModelProto, Report]:
    """Rewrite ``model`` with the store's proved rules: the rewritten ModelProto and the `taso.optimize.Report`.

    The keywords are `subst optimize`'s options: ``store`` (the shipped substitutions.db by default), ``check``
    (False: ``--no-check``), ``rtol``/``atol``, ``seed``, and any field of `taso.optimize.Settings` (``alpha``,
    ``budget``, ``time_limit``, ``measure_limit``, ``device``, ``dims``, ``costs``, ``pet``, ``refresh``,
    ``cuda_graph`` (cost and guard under CUDA graph capture, with ``device="cuda"``),
    ``standard_onnx`` (True: no rule writes an onnxruntime-only fused kernel, ``--standard-onnx``), and
    ``check_inputs``: the check's input sets, each an npz path or a dict of arrays by input name, as
    ``--check-inputs`` gives them). Raises `BadInput` (a model or option it cannot use) or `CheckFailed` (the
    rewrite's outputs differ; its ``report`` says how).
    ``model`` is not modified, and the store is only read: unit costs measured on a device are cached in the
    user's cost cache (`taso.cachedir.cost_cache`), as `subst optimize` does.
    """
    from taso import onnx as onnx_io
    from taso.optimize import Settings
    from taso.optimize import optimize as run
    from taso.rules import store as stores

    with _scratch() as tmp:
        src, dst = _source(model, tmp), tmp / "optimized.onnx"
        try:
            rules = store or stores.DEFAULT_PATH
            report = run(src, dst, rules, check, rtol, atol, seed, settings=Settings(**settings), progress=progress)
        except CheckFailed as e:
            _label(e.report, model)  # type: ignore[arg-type]
            raise
        return onnx_io.read_model_proto(dst), _label(report, model)


def load(model: ModelProto | str | os.PathLike[str]) -> Graph:
    """The IR of ``model``, validated and upgraded to opset 13+ as `optimize` reads it; raises `BadInput`."""
    from taso import onnx as onnx_io

    with _scratch() as tmp:
        return onnx_io.load_model(_source(model, tmp))


def save(graph: Graph, path: str | os.PathLike[str], external_data: bool | None = None) -> Path:
    """Write ``graph`` to ``path`` through a temp file and a rename; weights go to ``<name>.data`` when asked,
    when the source had external data, or past protobuf's 2 GB."""
    from taso import onnx as onnx_io

    return onnx_io.save_model(graph, path, external_data)


def verify(
    store: str | os.PathLike[str],
    *,
    specs: str | os.PathLike[str] | None = None,
    budget: int | None = None,
    timeout: float | None = None,
    workers: int | None = None,
    force: bool = False,
) -> Summary:
    """Decide the candidate rules in ``store`` (every rule with ``force``), as `subst verify` does: the verdicts
    are written into it, and the `taso.verify.Summary` counts them. ``specs`` defaults to the shipped specs/,
    ``budget`` and ``timeout`` to the CLI's, ``workers`` to every core."""
    from taso.rules import SPECS_DIR
    from taso.rules import store as stores
    from taso.verify import DEFAULT_BUDGET, DEFAULT_TIMEOUT, load_specs, pending, verify_rows

    path = Path(store)
    stores.require_writable(path)
    db = stores.open_store(path)
    rows = pending(db, force)
    return verify_rows(
        db,
        rows,
        load_specs(Path(specs) if specs is not None else SPECS_DIR),
        budget or DEFAULT_BUDGET,
        timeout or DEFAULT_TIMEOUT,
        workers or os.cpu_count() or 1,
    )


def generate(
    *,
    max_ops: int | None = None,
    ops: str | Sequence[str] | None = None,
    config: str | os.PathLike[str] | dict | None = None,
    seed: int | None = None,
    workers: int | None = None,
    store: str | os.PathLike[str] | None = None,
) -> Result:
    """Enumerate and pair small graphs as `subst generate` does: the `taso.generate.Result`, whose ``rules`` are
    candidates for `verify`. ``ops`` takes the CLI's forms (``"+bias"``, ``["matmul", "add"]``), ``config`` a
    JSON/TOML file or its dict. With ``store`` the rules are added there (made if missing); without, nothing is
    written."""
    from taso.generate import generate as run
    from taso.generate import load_config, settings_from
    from taso.generate import save as add_to_store

    cfg = load_config(Path(config)) if _is_path(config) else config
    forms = ops if ops is None or isinstance(ops, str) else ",".join(ops)
    settings = settings_from(cfg, forms, max_ops, seed)  # type: ignore[arg-type]
    if store is not None:
        from taso.rules import require_writable

        require_writable(Path(store))
    result = run(settings, workers)
    if store is not None:
        add_to_store(result, store)
    return result
