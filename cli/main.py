"""The `subst` command line: a thin click layer over `taso`.

Exit codes: 0 ok, 1 a check failed (nothing written), 2 bad input (one line on stderr, nothing written).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from types import FrameType
from typing import Any

import click

from cli.certify import certify
from cli.generate import generate as generate_command
from cli.generate import rules as rules_group
from cli.options import Finite, dim_option, parse_dims, store_option, verbose_option
from cli.profile import profile
from cli.progress import StageBars
from cli.verify import verify
from taso import cost
from taso import onnx as onnx_io
from taso.errors import BadInput, CheckFailed
from taso.execute import ortlog
from taso.ir import Kind
from taso.ops import OPS
from taso.optimize import Settings
from taso.optimize import optimize as run_optimize

EXIT_OK, EXIT_CHECK, EXIT_BAD_INPUT = 0, 1, 2


def write_text_atomic(path: Path, text: str) -> None:
    """Write a small text file through a temp file and rename, so a failure leaves no half-written file."""
    if not path.parent.is_dir():
        raise BadInput(f"{path}: folder {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise BadInput(f"{path}: cannot write ({e.strerror})") from None


def _refuse_unwritable(path: Path, flag: str) -> None:
    """Refuse a file argument that cannot be written before any work: found only after the model was written,
    a --report into a missing folder left the run half done."""
    if path.is_dir():
        raise BadInput(f"{flag} {path}: is a folder")
    if not path.parent.is_dir():
        raise BadInput(f"{flag} {path}: folder {path.parent} does not exist")
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        raise BadInput(f"{flag} {path}: cannot write to {path.parent} ({e.strerror})") from None


def _emit(as_json: bool, data: Any, lines: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo("\n".join(lines))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="subst", message="subst %(version)s")
def cli() -> None:
    """subst: a verified tensor-graph superoptimizer for ONNX models.

    \b
    The pipeline, in the order you would run it:
      subst generate --max-ops 3     enumerate small graphs, store candidate rewrite rules
      subst verify                   prove each candidate with z3; only proved rules are ever used
      subst optimize IN -o OUT       rewrite a model with proved rules, check it in onnxruntime, write it
      subst certify IN OUT           check every step of that rewrite again (optimize --certificate)
    \b
    Stores: generate, verify and rules add write ./substitutions.db unless given --store; optimize and
    rules list/show/stats read the shipped store (read-only) unless given --store (`--store substitutions.db`
    for the rules made above). Measured op costs are cached per user in $XDG_CACHE_HOME/subst
    (else ~/.cache/subst); nothing is ever written into the installed package.
    \b
    Look around:
      subst info MODEL               op census, catalogue coverage, inputs and outputs

    Exit codes: 0 ok, 1 a check failed (nothing written), 2 bad input (nothing written).
    """


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Where to write the result.")
@store_option("Rule store to read proved rules from.")
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="Run original and result in onnxruntime on random inputs (or --check-inputs); refuse to write on a mismatch.",
)
@click.option(
    "--rtol",
    type=Finite(min=0),
    help="Compare outputs element-wise at this relative tolerance, not against a float64 reference of the "
    "original.  [default: the reference decides; 1e-3, 1e-2 for float16 outputs, where there is none]",
)
@click.option(
    "--atol",
    type=Finite(min=0),
    help="Compare outputs element-wise at this absolute tolerance, not against a float64 reference of the "
    "original.  [default: the reference decides; 1e-5, 1e-3 for float16 outputs, where there is none]",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the check's random inputs."
)
@click.option(
    "--check-inputs",
    "check_inputs",
    multiple=True,
    metavar="FILE.npz",
    help="Check on these inputs, not random ones: one array per model input, by name (numpy.savez(FILE, "
    "name=array, ...)); repeat for more input sets. For a model that runs only on meaningful values (a sample "
    "rate of 8000 or 16000). Their shapes bind the symbolic dims they fill. The check is as strong as these "
    "values: give varied ones (all-zero audio passes a wrong rewrite that keeps zero).",
)
@click.option(
    "--alpha",
    type=Finite(min=0, min_open=True),
    default=1.05,
    show_default=True,
    help="Search relaxation: keep exploring graphs up to alpha x the best cost (1.0 = greedy).",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=Settings.budget,
    show_default=True,
    help="Graphs a region's search expands per pass: the search's work, which alone decides its result (the same "
    "model, store and cost table give the same output on any machine).",
)
@click.option(
    "--time-limit",
    type=Finite(min=0),
    default=60.0,
    show_default=True,
    help="Safety net: search seconds at most, not counting op costs measured on the way. If it fires, the "
    "report warns: the result then depends on the machine's speed.",
)
@click.option(
    "--measure-limit",
    type=Finite(min=0),
    default=60.0,
    show_default=True,
    help="Seconds the run may spend measuring what the cost cache lacks: the device's calibration (once per "
    "store), the model's op costs and the search's (not counted in --time-limit); past it they are estimated, "
    "and measured by a later run.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "cpu", "estimate"]),
    default="auto",
    show_default=True,
    help="Where op costs are measured (cached per user, whatever the store; on an H100 the shipped table of its "
    "costs stands in for those the cache lacks); estimate: analytic costs, nothing measured or read from the cache.",
)
@click.option(
    "--no-prior",
    is_flag=True,
    help="Measure every unit here and ignore the shipped cost tables (of this GPU, or another's scaled): for "
    "building a cost table of this device. Give a --measure-limit long enough for every unit.",
)
@dim_option(
    "Size of one of the inputs' symbolic dims (`subst info` shows them) for costing and for the check's random "
    "inputs (default 1 for costing, 2 for the check); the report says the sizes used."
)
@click.option(
    "--costs",
    "costs_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cost with a reference table (measured on another device) and measure nothing; CI uses one.",
)
@click.option(
    "--pet/--no-pet",
    default=False,
    show_default=True,
    help="Also try PET mutants of convolutions and matmuls (layout and dilation changes, sibling merges) with an "
    "exact correction of the part of the output they get wrong; the cost model decides whether one pays.",
)
@click.option(
    "--cuda-graph",
    is_flag=True,
    help="Measure op costs and time the original and the rewrite under CUDA graph capture, as a deployment that "
    "captures runs them (needs --device cuda); the report says whether the output can be captured at the dims, "
    "or which nodes prevent it. Without it, a run on the GPU says what capture would give the output.",
)
@click.option(
    "--refresh",
    is_flag=True,
    help="Time the original and the rewrite end to end again instead of recalling an earlier run's verdict on "
    "them (a verdict is cached per device with its noise band and what it was measured on).",
)
@click.option(
    "--standard-onnx",
    is_flag=True,
    help="Keep the result in standard ONNX, loadable by any runtime: use no rule that writes one of onnxruntime's "
    "fused kernels (its com.microsoft ops such as FastGelu, SkipLayerNormalization or FusedMatMul, and its RMSNorm, "
    "SimplifiedLayerNormalization). By default they are rewrite targets, used where they cost less on onnxruntime.",
)
@click.option(
    "--report", "report_path", type=click.Path(path_type=Path), help="Also write the JSON report to this file."
)
@click.option(
    "--certificate",
    "certificate_path",
    type=click.Path(path_type=Path),
    help="Also write the certificate of every step of the rewrite (JSON), for `subst certify`.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@verbose_option()
def optimize(
    model: Path,
    output: Path,
    store_path: Path,
    check: bool,
    rtol: float | None,
    atol: float | None,
    seed: int,
    check_inputs: tuple[str, ...],
    alpha: float,
    budget: int,
    time_limit: float,
    measure_limit: float,
    device: str,
    no_prior: bool,
    dims: tuple[str, ...],
    costs_path: Path | None,
    pet: bool,
    cuda_graph: bool,
    refresh: bool,
    standard_onnx: bool,
    report_path: Path | None,
    certificate_path: Path | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Rewrite MODEL with proved substitutions and write it to OUTPUT.

    Ops subst does not rewrite (custom domains, If/Loop with their subgraphs, anything outside the catalogue)
    pass through unchanged, as do names, doc strings, metadata and dynamic dims. Models older than opset 13
    are upgraded with onnx's version converter first.

    The check runs on random inputs; integer inputs get values the graph says the model runs on (token ids
    within their embedding, positive lengths). An input no graph can explain (a sample rate that must be 8000
    or 16000) needs --check-inputs.

    \b
    Example:
      subst optimize resnet.onnx -o resnet.opt.onnx
      subst optimize bert.onnx -o bert.opt.onnx --json > report.json
      python -c "import numpy as np; np.savez('in.npz', x=np.random.randn(1, 512).astype('f4'), sr=np.array(16000))"
      subst optimize vad.onnx -o vad.opt.onnx --check-inputs in.npz
    """
    ortlog.set_verbose(verbose)
    if report_path is not None:
        _refuse_unwritable(report_path, "--report")
        if report_path.resolve() in (output.resolve(), model.resolve()):
            raise BadInput(f"--report {report_path}: is a model this run reads or writes; choose another path")
    costs = str(costs_path) if costs_path else None
    if no_prior and (costs is not None or device == "estimate"):
        raise BadInput("--no-prior: measures every unit; --costs and --device estimate measure none")
    if costs is not None:
        cost.reference_model(costs)  # read once up front: a file that is no cost table is refused before any work
    settings = Settings(
        alpha,
        budget,
        time_limit,
        device,
        parse_dims(dims),
        costs,
        pet,
        measure_limit,
        check_inputs=check_inputs,
        refresh=refresh,
        cuda_graph=cuda_graph,
        standard_onnx=standard_onnx,
        prior=not no_prior,
    )
    try:
        bars = StageBars()
        try:
            report = run_optimize(
                model,
                output,
                store_path,
                check,
                rtol,
                atol,
                seed,
                settings=settings,
                progress=bars.update,
                certificate=certificate_path,
            )
        finally:
            bars.close()
    except CheckFailed as e:
        if as_json and e.report is not None:
            click.echo(json.dumps(e.report.as_dict(), indent=2, default=str))  # type: ignore[attr-defined]
        raise
    if report_path is not None:
        write_text_atomic(report_path, json.dumps(report.as_dict(), indent=2, default=str) + "\n")
    _emit(as_json, report.as_dict(), report.lines())


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
def info(model: Path, as_json: bool) -> None:
    """Describe MODEL: inputs and outputs, op census, and which ops subst's catalogue covers (and why not).

    \b
    Example:
      subst info squeezenet.onnx
    """
    g, upgrade = onnx_io.import_model(model)
    opaque = onnx_io.opaque_reasons(model)
    census: dict[str, dict[str, int]] = {}
    for n in g.nodes:
        label = f"{n.domain}::{n.op}" if n.domain else n.op
        row = census.setdefault(label, {"count": 0, "covered": 0})
        row["count"] += 1
        row["covered"] += not n.is_opaque
    reasons: dict[str, dict[str, int]] = {}
    for o in opaque:
        reasons.setdefault(o.op, {}).setdefault(o.reason, 0)
        reasons[o.op][o.reason] += 1
    weight_bytes = sum(d.array.nbytes for d in g.data.values())
    own = (
        {"opset": upgrade.opset, "nodes": upgrade.nodes}
        if upgrade
        else {"opset": g.meta.opset(""), "nodes": len(g.nodes)}
    )
    data = {
        "model": str(model),
        "ir_version": g.meta.ir_version,
        "opsets": dict(g.meta.opsets),
        "producer": f"{g.meta.producer_name} {g.meta.producer_version}".strip(),
        "file": {**own, "upgrade": str(upgrade) if upgrade else None},
        "inputs": {i: str(g.types.get(i, "?")) for i in g.inputs},
        "outputs": {o: str(g.types.get(o, "?")) for o in g.outputs},
        "weights": {"count": len(g.weights), "bytes": weight_bytes},
        "nodes": len(g.nodes),
        "covered": sum(not n.is_opaque for n in g.nodes),
        "constant_nodes": sum(g.kinds.get(n.outputs[0]) is Kind.CONSTANT for n in g.nodes if n.outputs),
        "census": census,
        "not_covered": reasons,
    }
    lines = [
        f"model     {model}  (IR {g.meta.ir_version}, opsets {dict(g.meta.opsets)}, {data['producer'] or 'unknown producer'})",
        f"file      opset {own['opset']}, {own['nodes']} nodes"
        + (f"; {upgrade} at import, which the rest describes" if upgrade else ""),
        *(f"input     {k}: {v}" for k, v in data["inputs"].items()),
        *(f"output    {k}: {v}" for k, v in data["outputs"].items()),
        f"weights   {len(g.weights)} tensors, {weight_bytes / 2**20:.1f} MiB",
        f"nodes     {data['nodes']}, {data['covered']} covered by the catalogue ({len(OPS)} ops), "
        f"{data['constant_nodes']} computable from weights alone",
        "",
        f"{'op':<28}{'count':>7}{'covered':>9}  why not covered",
    ]
    for op, row in sorted(census.items(), key=lambda kv: -kv[1]["count"]):
        why = "; ".join(f"{r} ({c})" for r, c in reasons.get(op, {}).items())
        lines.append(f"{op:<28}{row['count']:>7}{row['covered']:>9}  {why}")
    _emit(as_json, data, lines)


cli.add_command(verify)
cli.add_command(profile)
cli.add_command(certify)


cli.add_command(generate_command)
cli.add_command(rules_group)


class Terminated(BaseException):
    """SIGTERM, raised where the program is: a BaseException, so no `except Exception` on the way swallows it."""


def _no_place_to_stop(frame: FrameType | None) -> bool:
    """Whether an exception raised here would be lost or leave files behind: in `tempfile` (between a temp
    folder's mkdir and the cleanup it registers, or in that cleanup), in a `__del__` or a weakref finalizer
    (whose exceptions Python prints and ignores)."""
    while frame is not None:
        if frame.f_code.co_filename in (tempfile.__file__, weakref.__file__) or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """`timeout` and process managers stop a run with SIGTERM, which by default kills Python on the spot and
    leaves its temp folders (a `.subst-XXXXXXXX/` beside the output) behind. Raised as an exception instead, it
    unwinds through every `with` and `finally`, which clean up; where it would not (`_no_place_to_stop`), it is
    sent again a moment later."""
    if _no_place_to_stop(frame):
        again = threading.Timer(0.01, os.kill, (os.getpid(), signum))
        again.daemon = True  # a run that ends meanwhile has cleaned up: it need not be stopped
        again.start()
        return
    signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    raise Terminated


def main(argv: list[str] | None = None) -> None:
    """Entry point: turns subst's and click's errors into one line and an exit code, never a traceback."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    # forked workers (generate's pool) keep the default: the pool stops them with SIGTERM wherever they are,
    # and a Python handler would run only once a blocking call in C returned (a worker stuck there hung the run)
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    code = EXIT_OK
    try:  # click's own `main` would exit 1 on a broken pipe; its parts are called here instead
        with cli.make_context("subst", sys.argv[1:] if argv is None else list(argv)) as ctx:
            cli.invoke(ctx)
    except BadInput as e:
        click.echo(f"subst: error: {e}", err=True)
        code = EXIT_BAD_INPUT
    except CheckFailed as e:
        click.echo(f"subst: check failed: {e}", err=True)
        code = EXIT_CHECK
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help() if e.ctx else str(e))
        code = EXIT_OK
    except click.ClickException as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if getattr(e, "ctx", None) else ""
        click.echo(f"subst: error: {e.format_message()}{hint}", err=True)
        code = EXIT_BAD_INPUT
    except click.exceptions.Exit as e:
        code = e.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("\nsubst: interrupted", err=True)
        code = 130
    except Terminated:
        click.echo("subst: terminated (SIGTERM); its temp files removed", err=True)
        code = 128 + signal.SIGTERM
    except BrokenPipeError:  # stdout's reader went away (`subst rules list | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit is quiet too
    sys.exit(code)


if __name__ == "__main__":
    main()
