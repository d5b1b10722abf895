"""Cold and warm `subst optimize` wall time per corpus model, with the report's own breakdown of where it went.

    PYTHONPATH=. python3 bench/bench_cold.py --device cpu --models resnet50_ts,bert_ts --baseline 1fea2b8
    PYTHONPATH=. python3 bench/bench_cold.py --device cuda --cold-only --stop-after 540 --result $OUT/cold-h100.json

For each model (models/corpus/, seeded weights, costed at batch 1 and sequences of 16 as `corpus.dims` says):
a *cold* run, as a new user's first: an empty per-user cache (a fresh XDG_CACHE_HOME: the rule index is built
again, no measured costs, no calibration) and the shipped store; then a *warm* run on the same cache. Each is the
installed CLI in a fresh process with the defaults (`--device` aside), timed wall to wall; its --report JSON gives
the stages (`seconds`), the units measured (the model's own, then the search's), those left estimated because
no rewrite touches them, and those taken from a shipped prior. Writes
bench/results/<today>/cold-<device>.json (``--result``) after every model, so a run cut short keeps what it
finished (``--resume`` then runs only the models it lacks); prints a table. The machine's load is recorded beside
each run: on a shared host it moves the times.

``--baseline REV`` runs the same for an export of an earlier commit, model by model in turn with this tree (which
goes first alternates), each with a cache of its own: a before/after pair of one run, on one machine, under one
load, whose ratios can be compared where the times cannot. ``--cold-only`` skips the warm runs (the GPU target is
a cold one) and ``--stop-after`` starts no model past that many seconds, so a machine lent in 10-minute calls
runs the corpus in a few ``--resume`` calls without one cut off mid-model. ``--cuda-graph`` runs each
`subst optimize --cuda-graph` (costs and guard under CUDA graph capture); each row keeps the report's capture
facts, its verdict and where its prior came from (on a GPU no shipped table is of, "scaled_from" names the table's).
``--no-prior`` runs each `subst optimize --no-prior` (every unit measured here, the shipped tables ignored), so that
``--export-costs`` writes every unit the run met: the makings of a device's own table (bench/h200-table.sh, which
also stops a run still going at ``--cut-at``, unrecorded, for the next call's ``--resume``). ``--profile`` runs each
under cProfile and keeps where its measuring went (`MEASURING`: sessions, warm-up, samples, the fusion check,
store writes, the units' own timing): issue 49's question of what a unit's 0.3 s on a GPU is.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import sqlite_utils  # noqa: E402

from taso import cachedir, cost  # noqa: E402
from taso.cost import profiler  # noqa: E402

TARGETS = {"cpu": (60.0, 10.0), "cuda": (30.0, None)}
"""Issue 32's targets in seconds: (cold, warm); None where it sets none."""


GIVEN = re.compile(r"(\w+=[1-9]\d*(,\w+=[1-9]\d*)*)?")
"""What ``--dim`` takes: NAME=SIZE,... (or nothing)."""


def sizes(name: str, given: str) -> dict[str, int]:
    """The sizes model ``name`` is costed and timed at: `corpus.dims` (batch 1, sequences of 16), but for each
    dim of ``given`` (``--dim``'s "batch=8,seq=128", `GIVEN`) the model has, at the size given there."""
    dims = corpus.dims(name)
    for d, n in (part.split("=") for part in given.split(",") if part):
        if d in dims:
            dims[d] = int(n)
    return dims


_PROFILED = """import cProfile, sys
from cli.main import main
p, code = cProfile.Profile(), 0
try:
    p.runcall(main, sys.argv[2:])
except SystemExit as e:
    code = e.code
finally:
    p.dump_stats(sys.argv[1])
sys.exit(code)"""
"""The CLI under cProfile, its stats written however it exits: ``python -m cProfile`` writes none when the program
calls sys.exit, as the CLI always does (the measuring split read 0 everywhere until this)."""


def optimize_cli(
    model: Path,
    out: Path,
    cache: Path,
    device: str,
    timeout: float,
    dims: dict[str, int],
    root: Path = ROOT,
    flags: tuple[str, ...] = (),
    profile: Path | None = None,
) -> tuple[dict, dict | None]:
    """One `subst optimize` of the tree at ``root`` in a fresh process with the per-user cache under ``cache``
    (an XDG_CACHE_HOME): wall seconds, exit code and the last line of stderr where it failed; and its report, as
    ``--json`` prints it (also on a failed check, where ``--report`` writes nothing), or None. With ``profile``,
    run under cProfile, its stats written there."""
    dim_args = [a for d, n in dims.items() for a in ("--dim", f"{d}={n}")]
    run = ["-c", _PROFILED, str(profile)] if profile is not None else ["-m", "cli.main"]
    cmd = [sys.executable, *run, "optimize", str(model), "-o", str(out)]
    cmd += [*dim_args, "--device", device, "--json", *flags]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    stdout = ""
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        code, err = done.returncode, done.stderr.strip().splitlines()[-1:] if done.returncode else []
        stdout = done.stdout
    except subprocess.TimeoutExpired:
        code, err = None, [f"timed out after {timeout:.0f} s"]
    row: dict = {"wall_s": round(time.perf_counter() - t0, 2), "exit": code, "load_before": round(load, 2)}
    if err:
        row["error"] = err[0][:300]
    try:
        report = json.loads(stdout) if stdout.strip() else None
    except ValueError:  # an older tree (--baseline) that prints no report on a failed check, or a stray line
        report = None
    return row, report


def _run(
    model: Path,
    out: Path,
    cache: Path,
    device: str,
    timeout: float,
    root: Path = ROOT,
    flags: tuple[str, ...] = (),
    given: str = "",
    profile: bool = False,
) -> dict:
    """One `subst optimize` of corpus model ``model`` (`optimize_cli`) at the ``given`` dims (`sizes`), with the
    report's facts; the report itself is written beside ``out`` (for ``--keep``). With ``profile``, under
    cProfile, with where its measuring went (`measuring_split`)."""
    stats = out.with_suffix(".prof") if profile else None
    row, r = optimize_cli(model, out, cache, device, timeout, sizes(model.stem, given), root, flags, stats)
    if stats is not None and stats.exists():
        row["measuring_split_s"] = {k: round(v, 3) for k, v in measuring_split(stats).items()}
    if r is not None:
        out.with_suffix(".report.json").write_text(json.dumps(r))
        search, cost = r.get("search") or {}, r.get("cost") or {}
        row |= {
            "seconds": {k: round(v, 2) for k, v in r["seconds"].items()},
            "profiled_units": cost.get("profiled_units"),
            "measured_units": search.get("measured_units"),
            "untouched_units": cost.get("untouched_units"),
            "estimated_units": cost.get("estimated_units"),
            "prior_units": (cost.get("prior") or {}).get("units", 0),
            "prior_scaled_from": (cost.get("prior") or {}).get("scaled_from"),
            "cuda_graph": cost.get("cuda_graph"),
            "measured": cost.get("measured"),
            "speedup_predicted": round(cost["before_ms"] / cost["after_ms"], 3) if cost else None,
            "rules_applied": sum(v["count"] for v in r["rules_applied"].values()),
        }
    return row


MEASURING = {
    "measure_marginals": ("measure.py", "measure_marginals"),
    "fusion_check": ("measure.py", "fused_when_read"),
    "sessions": ("profiler.py", "runner"),
    "warm_up": ("profiler.py", "_warm_up"),
    "samples": ("profiler.py", "_side_by_side"),
    "store_writes": ("cache.py", "keep_cost"),
}
"""Where a run's measuring spends its time (``--profile``): (file, function) whose cumulative seconds tell.
`measure_marginals` is the units' measuring, `fused_when_read` part of it (two CPU sessions a unit); sessions
(opened in `runner`), warm-up and samples are every timing's: the units', the calibration's and the end-to-end
guard's. ``units_timing`` (`MEASURING` aside) is the units' timing alone: `time_models` called by
`measure_marginals`."""


def measuring_split(stats: Path) -> dict[str, float]:
    """Cumulative seconds of each of `MEASURING`'s functions in the cProfile ``stats`` (0 where not called), and
    ``units_timing``."""
    found = pstats.Stats(str(stats)).stats  # type: ignore[attr-defined]
    split = dict.fromkeys([*MEASURING, "units_timing"], 0.0)
    for (path, _, func), (_, _, _, cum, callers) in found.items():
        for part, (file, name) in MEASURING.items():
            if func == name and path.endswith(f"cost/{file}"):
                split[part] += cum
        if func == "time_models" and path.endswith("cost/profiler.py"):
            split["units_timing"] += sum(c[3] for (_, _, f), c in callers.items() if f == "measure_marginals")
    return split


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--models", help="comma-separated corpus names (default: the whole corpus)")
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/cold-<device>.json)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take before it is stopped")
    ap.add_argument("--resume", action="store_true", help="keep the models already in --result and run only the rest")
    ap.add_argument("--baseline", metavar="REV", help="also time an export of this commit, in turn with this tree")
    ap.add_argument("--cold-only", action="store_true", help="no warm runs")
    ap.add_argument("--stop-after", type=float, metavar="S", help="start no model after S seconds")
    ap.add_argument(
        "--export-costs",
        type=Path,
        metavar="DIR",
        help="write the units each cold run measured as DIR/<model>.json (a reference table for models/merge_costs.py)",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each cold run's output as DIR/<model>.onnx (its report as DIR/<model>.report.json): what a user of "
        "this device gets, for bench_corpus --device-made",
    )
    ap.add_argument("--cuda-graph", action="store_true", help="run `subst optimize --cuda-graph` (--device cuda)")
    ap.add_argument(
        "--no-prior",
        action="store_true",
        help="run `subst optimize --no-prior`: measure every unit here (with --export-costs, a device's whole table)",
    )
    ap.add_argument("--measure-limit", type=float, metavar="S", help="pass `--measure-limit S` to every run")
    ap.add_argument(
        "--dim",
        default="",
        metavar="NAME=SIZE,...",
        help="cost each model at these dims where it has them (default: batch 1, sequences of 16)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="run each `subst optimize` under cProfile and record where its measuring went (sessions, warm-up, ...)",
    )
    ap.add_argument(
        "--cut-at",
        type=float,
        metavar="S",
        help="stop a run still going S seconds after the start and record nothing of it (--resume runs it again)",
    )
    args = ap.parse_args()
    if not GIVEN.fullmatch(args.dim):
        print(f"bench_cold: --dim {args.dim!r}: NAME=SIZE,... expected (sizes positive)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    names = args.models.split(",") if args.models else corpus.NAMES
    unknown = sorted(set(names) - set(corpus.NAMES))
    if unknown:
        print(f"bench_cold: not in the corpus: {', '.join(unknown)}", file=sys.stderr)
        return 2
    device = profiler.pick_device(args.device).key
    path = args.result or layout.result_path("cold", device)
    result = {"meta": layout.meta(device), "targets_s": dict(zip(("cold", "warm"), TARGETS[args.device])), "models": {}}
    kinds = ("cold",) if args.cold_only else ("cold", "warm")
    flags = ("--cuda-graph",) * args.cuda_graph + ("--no-prior",) * args.no_prior
    flags += ("--measure-limit", str(args.measure_limit)) if args.measure_limit is not None else ()
    baseline = tempfile.TemporaryDirectory(prefix="bench-cold-baseline-") if args.baseline else None
    trees = {"this": ROOT}
    if baseline is not None:
        trees["baseline"] = _export(args.baseline, Path(baseline.name))
        result["meta"]["baseline"] = args.baseline
    if args.resume and path.exists():  # a machine lent in 10-minute calls runs the corpus over several
        result["models"] = json.loads(path.read_text())["models"]
        names = [n for n in names if n not in result["models"]]

    def limit() -> float:
        """Seconds the next run may take: --timeout, and no later than --cut-at."""
        return args.timeout if args.cut_at is None else min(args.timeout, args.cut_at - (time.perf_counter() - started))

    print(f"{'model':<26}{'tree':<10}{'cold s':>9}{'warm s':>9}  cold breakdown")
    for i, name in enumerate(names):
        if args.stop_after is not None and time.perf_counter() - started > args.stop_after:
            print(f"stopped after {args.stop_after:.0f} s: --resume runs the rest")
            break
        runs: dict[str, dict] = {}
        with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
            t = Path(tmp)
            model = corpus.write(name, t / f"{name}.onnx")
            for tree in list(trees)[:: 1 if i % 2 == 0 else -1]:  # which tree goes first alternates
                cache = t / f"cache-{tree}"
                runs[tree] = {
                    kind: _run(
                        model,
                        t / f"{name}.{kind}.onnx",
                        cache,
                        args.device,
                        limit(),
                        trees[tree],
                        flags,
                        args.dim,
                        args.profile,
                    )
                    for kind in kinds
                }
            stopped = any(r["exit"] is None for tree_runs in runs.values() for r in tree_runs.values())
            if stopped and args.cut_at is not None and time.perf_counter() - started >= args.cut_at:
                print(f"cut at {args.cut_at:.0f} s: {name} not recorded, --resume runs it again")
                break
            if args.keep and runs["this"]["cold"].get("exit") == 0:  # with its report: what the run predicted
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.move(t / f"{name}.cold.onnx", args.keep / f"{name}.onnx")
                shutil.move(t / f"{name}.cold.report.json", args.keep / f"{name}.report.json")
                if (t / f"{name}.cold.prof").exists():  # --profile: the stats, for pstats
                    shutil.move(t / f"{name}.cold.prof", args.keep / f"{name}.prof")
            if args.export_costs:
                args.export_costs.mkdir(parents=True, exist_ok=True)
                runs["this"]["exported_units"] = _export_costs(
                    t / "cache-this", args.device, args.export_costs / f"{name}.json"
                )
        row = runs["this"] | ({"baseline": runs["baseline"]} if "baseline" in runs else {})
        result["models"][name] = row
        layout.write(path, result)
        for tree, r in runs.items():
            stages = ", ".join(f"{k} {v:.1f}" for k, v in r["cold"].get("seconds", {}).items() if k != "total")
            c = r["cold"]
            stages += f"; units measured {c.get('profiled_units')} + {c.get('measured_units')} in the search"
            stages += f", {c.get('untouched_units')} no rewrite touches estimated"
            if "measuring_split_s" in c:
                stages += "; measuring: " + ", ".join(f"{k} {v:.1f}" for k, v in c["measuring_split_s"].items())
            warm = f"{r['warm']['wall_s']:>9.1f}" if "warm" in r else f"{'-':>9}"
            print(f"{name:<26}{tree:<10}{r['cold']['wall_s']:>9.1f}{warm}  {stages}", flush=True)
    if baseline is not None:
        baseline.cleanup()
    print(f"wrote {path}")
    return 0


def _export_costs(cache: Path, device: str, path: Path) -> int:
    """The units measured into the per-user cache under ``cache`` (an XDG_CACHE_HOME), written as a reference
    table at ``path``: how a lease's cold runs grow the shipped prior. Returns how many units it holds."""
    db = sqlite_utils.Database(cache / "subst" / cachedir.COSTS)
    return cost.export_reference(cost.CostModel(profiler.pick_device(device), db, measure=False), str(path))


def _export(rev: str, into: Path) -> Path:
    """The tree of commit ``rev`` (`git archive`) in ``into``: its CLI, run from there, imports its own code."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


if __name__ == "__main__":
    sys.exit(main())
