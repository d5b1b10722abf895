"""Benchmark `subst verify` on a rule store, beside TASO's verifier (baselines.md), optionally against an earlier commit.

Each run is the CLI in a fresh process deciding every rule of a temporary copy of the store again (``--force``),
so it is repeatable and leaves the store's own verdicts alone; its wall time, the CPU of it and its workers, and
the machine's load before and after are recorded. ``--baseline REV`` runs an export of that commit the same way,
in turn with this tree (``--repeat`` pairs), and compares the verdicts rule by rule (by rule id): a speed-up must
leave every status as it was. A pair of one run, on one machine, under one load, gives ratios that can be compared
where times cannot. Before timing, each tree decides one rule untimed, so the spec check it remembers per user
(`taso.verify.run.require_sound`) is not in the first run's time. Prints a markdown table and writes
bench/results/<today>/verify-cpu.json (``--result``).

    .venv/bin/python bench/bench_verify.py                                    # the shipped substitutions.db
    .venv/bin/python bench/bench_verify.py --store build/t3.db --label "TASO's 3-op set" --baseline main
    .venv/bin/python bench/bench_verify.py --store /tmp/g3.db --workers 1 --budget 3000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import layout

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STORE = ROOT / "substitutions.db"
TASO = {"rules": 619, "proved": 592, "refuted": 0, "unknown": 27, "seconds": 390.0, "timeout": 10.0}
"""TASO's verifier on its 3-op rules, same 2-core machine (shared/reference/baselines.md)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=DEFAULT_STORE)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget", type=int, help="z3 resource units per rule (default: the verifier's)")
    ap.add_argument("--timeout", type=float, help="wall-clock safety net per rule (default: the verifier's)")
    ap.add_argument("--label", default="", help="what the store holds, for the table (e.g. '3-op set')")
    ap.add_argument("--baseline", metavar="REV", help="also run an export of this commit, in turn with this tree")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each tree (in turn with the baseline's)")
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/verify-cpu.json)")
    args = ap.parse_args()
    if not args.store.is_file():
        ap.error(f"{args.store}: no such store")
    flags = []
    for k in ("budget", "timeout"):
        if getattr(args, k) is not None:
            flags += [f"--{k}", str(getattr(args, k))]
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        trees = {"this": ROOT}
        if args.baseline:
            trees["baseline"] = _export(args.baseline, Path(tmp) / "baseline")
        env = {**os.environ, "XDG_CONFIG_HOME": str(Path(tmp) / "config")}  # a signing key of the run's own
        for root in trees.values():
            _warm(root, args.store, Path(tmp), env)
        runs, statuses = [], {}
        for k in range(args.repeat):
            order = list(trees) if k % 2 == 0 else list(reversed(trees))
            for name in order:
                row, statuses[name] = _run(trees[name], args.store, Path(tmp), args.workers, flags, env)
                runs.append({"tree": name, **row})
                print(f"{name}: {row['wall_s']} s wall, {row['cpu_s']} s CPU, load {row['load_before']}", flush=True)
    changed = _changed(statuses)
    record = {
        "meta": layout.meta() | ({"baseline": args.baseline} if args.baseline else {}),
        "store": {"path": str(args.store), "label": args.label, "rules": runs[0]["total"]},
        "workers": args.workers,
        "runs": runs,
        "verdicts_changed": changed,
        "taso": {k: TASO[k] for k in ("rules", "proved", "unknown", "seconds")} | {"source": "baselines.md"},
    }
    if args.baseline:
        record["speedup"] = _speedup(runs)
    _table(record)
    layout.write(args.result or layout.result_path("verify", "cpu"), record)


def _export(rev: str, into: Path) -> Path:
    """The tree of commit ``rev`` (`git archive`) in ``into``: its CLI, run from there, imports its own code."""
    into.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _verify(root: Path, store: Path, workers: int, flags: list[str], env: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "cli.main", "verify", "--store", str(store), "--force", "--json"]
    done = subprocess.run([*cmd, "--workers", str(workers), *flags], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: verify in {root} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done


def _warm(root: Path, store: Path, tmp: Path, env: dict) -> None:
    """Decide one rule with the tree at ``root``: it checks the specs once and remembers it, as a user's first
    verify does, so no timed run pays for it."""
    one = tmp / "warm.db"
    shutil.copyfile(store, one)
    with sqlite3.connect(one) as db:
        db.execute("DELETE FROM rules WHERE id > (SELECT MIN(id) FROM rules)")
    _verify(root, one, 1, [], env)
    one.unlink()


def _run(root: Path, store: Path, tmp: Path, workers: int, flags: list[str], env: dict) -> tuple[dict, dict]:
    """One timed verify of a copy of ``store`` by the tree at ``root``: its figures, and each rule's status."""
    copy = tmp / "rules.db"
    shutil.copyfile(store, copy)
    load, cpu0 = os.getloadavg()[0], _children_cpu()
    t0 = time.perf_counter()
    done = _verify(root, copy, workers, flags, env)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    summary = json.loads(done.stdout)
    with sqlite3.connect(copy) as db:
        statuses = dict(db.execute("SELECT rule_id, status FROM rules"))
    copy.unlink()
    total = summary["proved"] + summary["refuted"] + summary["unknown"]
    row = {"total": total, "proved": summary["proved"], "refuted": summary["refuted"], "unknown": summary["unknown"]}
    row |= {"unknown_reasons": summary["unknown_reasons"], "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    row |= {"rules_per_s": round(total / wall, 1), "load_before": round(load, 1)}
    return row | {"load_after": round(os.getloadavg()[0], 1)}, statuses


def _children_cpu() -> float:
    """User + system seconds of the finished child processes (the CLI and its workers)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _changed(statuses: dict[str, dict[str, str]]) -> list[dict]:
    """The rules whose status differs between the trees (by rule id)."""
    if len(statuses) < 2:
        return []
    this, base = statuses["this"], statuses["baseline"]
    ids = sorted(set(this) | set(base))
    return [{"rule_id": i, "baseline": base.get(i), "this": this.get(i)} for i in ids if this.get(i) != base.get(i)]


def _speedup(runs: list[dict]) -> dict:
    """Baseline over this tree, of the wall and the CPU seconds summed over the runs."""
    total = {t: [sum(r[k] for r in runs if r["tree"] == t) for k in ("wall_s", "cpu_s")] for t in ("this", "baseline")}
    return {
        "wall": round(total["baseline"][0] / total["this"][0], 2),
        "cpu": round(total["baseline"][1] / total["this"][1], 2),
    }


def _table(record: dict) -> None:
    store = record["store"]
    print(f"\nstore {store['path']} ({store['label'] or 'rules'}): {store['rules']} rules; {record['meta']['machine']}")
    print("| verifier | rules | proved | refuted | unknown | wall | CPU (all processes) | rules/s | load before |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    t = record["taso"]
    print(f"| TASO (baselines.md) | {t['rules']} | {t['proved']} | 0 | {t['unknown']} | {t['seconds']:.0f} s | | | |")
    for r in record["runs"]:
        print(
            f"| subst verify, {r['tree']} ({record['workers']} workers) | {r['total']} | {r['proved']} | {r['refuted']} "
            f"| {r['unknown']} | {r['wall_s']} s | {r['cpu_s']} s | {r['rules_per_s']} | {r['load_before']} |"
        )
    if "speedup" in record:
        print(f"\nbaseline / this: wall x{record['speedup']['wall']}, CPU x{record['speedup']['cpu']}; ", end="")
        print(f"{len(record['verdicts_changed'])} status(es) changed")


if __name__ == "__main__":
    main()
