"""Benchmark `subst verify` on a generated rule store, beside TASO's verifier (baselines.md).

Works on a temporary copy of the store and decides every rule again (as --force does), so it is repeatable and
leaves the store's own verdicts alone. Prints a markdown table and writes
bench/results/<today>/verify-cpu.json (``--result``).

    .venv/bin/python bench/bench_verify.py                          # the shipped substitutions.db
    .venv/bin/python bench/bench_verify.py --store /tmp/g3.db --workers 2 --budget 3000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import layout
import z3

from taso.rules import SPECS_DIR, store
from taso.verify import DEFAULT_BUDGET, DEFAULT_TIMEOUT, load_specs, pending, verify_rows

TASO = {"rules": 619, "proved": 592, "refuted": 0, "unknown": 27, "seconds": 390.0, "timeout": 10.0}
"""TASO's verifier on its 3-op rules, same 2-core machine (shared/reference/baselines.md)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=store.DEFAULT_PATH)
    ap.add_argument("--specs", type=Path, default=SPECS_DIR)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="z3 resource units per rule")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="wall-clock safety net per rule")
    ap.add_argument("--label", default="", help="what the store holds, for the table (e.g. '3-op set')")
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/verify-cpu.json)")
    args = ap.parse_args()
    cpu0 = _cpu()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "rules.db"
        shutil.copyfile(args.store, copy)
        db = store.open_store(copy)
        rows = pending(db, force=True)
        summary = verify_rows(db, rows, load_specs(args.specs), args.budget, args.timeout, args.workers)
        by_ops = Counter((r["src_ops"], r["status"]) for r in db["rules"].rows)
        slow = sorted(db["rules"].rows, key=lambda r: -json.loads(r["detail"]).get("seconds", 0))[:5]
        unknown = [r for r in db["rules"].rows_where("status = 'unknown'")]
    cpu = _cpu() - cpu0
    s = summary.as_dict()
    n = len(rows)
    print(f"store {args.store} ({args.label or 'rules'}): {n} rules; {os.cpu_count()} cores, {platform.machine()}")
    print(
        f"workers {args.workers}, budget {args.budget:,} z3 units per rule (safety net {args.timeout:g} s), "
        f"z3 {z3.get_full_version()}, load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| verifier | rules | proved | refuted | unknown | unknown % | wall | CPU (all processes) | limit per rule |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| TASO (Python + z3, baselines.md) | {TASO['rules']} | {TASO['proved']} | {TASO['refuted']} | "
        f"{TASO['unknown']} | {100 * TASO['unknown'] / TASO['rules']:.1f} % | {TASO['seconds']:.0f} s | | "
        f"{TASO['timeout']:g} s |"
    )
    print(
        f"| subst verify ({args.workers} workers) | {n} | {s['proved']} | {s['refuted']} | {s['unknown']} | "
        f"{100 * s['unknown'] / max(n, 1):.1f} % | {s['seconds']:.1f} s | {cpu:.1f} s | {args.budget:,} units |"
    )
    print("\nby source size (ops): " + ", ".join(f"{k[0]} ops {k[1]}: {v}" for k, v in sorted(by_ops.items())))
    print("unknown reasons: " + (json.dumps(s["unknown_reasons"]) if unknown else "none"))
    print("slowest rules: " + ", ".join(f"#{r['id']} {json.loads(r['detail']).get('seconds', 0):.2f} s" for r in slow))
    row = {"rules": args.label or str(args.store), "total": n, "proved": s["proved"], "refuted": s["refuted"]}
    row |= {"unknown": s["unknown"], "wall_s": round(s["seconds"], 1), "cpu_s": round(cpu, 1)}
    record = {"meta": layout.meta(), "rows": [row], "workers": args.workers, "budget": args.budget}
    layout.write(args.result or layout.result_path("verify", "cpu"), record | {"z3": z3.get_full_version()})


def _cpu() -> float:
    """User + system seconds of this process and its finished children (the pool's workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    main()
