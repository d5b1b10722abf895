"""Benchmark `subst generate`: wall time, peak memory, graphs, candidates, rules and what each pruning removed.

Each run is a fresh `subst generate --json` process into a scratch store. CPU is the user + system time of its
whole process tree; memory is the peak of the tree's summed PSS (main process and workers, pages they share
counted once), sampled every 0.1 s. Writes bench/results/<today>/generate-cpu-<N>ops.json (``--result``).

    .venv/bin/python bench/bench_generate.py                       # --max-ops 1, 2, 3 over TASO's set
    .venv/bin/python bench/bench_generate.py --max-ops 4 --config bench/configs/core4.json
    .venv/bin/python bench/bench_generate.py --max-ops 3 --executor ray    # on a Ray started here (subst[ray])
    .venv/bin/python bench/bench_generate.py --max-ops 3 --baseline /tmp/base  # and an older checkout, alternating
    sh bench/gen5-device.sh     # on the GPU machine: 5 ops over bench/configs/gen5-2d.json through Ray on 16 cores

With ``--baseline DIR`` (a checkout of other code, e.g. ``git archive <commit> | tar -x -C DIR``) every setting is
also run from DIR, right before this checkout's run, so ratios compare runs under the same load; its rows go to the
result's ``baseline``. Each run's cache folder (XDG_CACHE_HOME, where the generator spools its levels) is a fresh
temporary one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import layout  # noqa: E402

from taso.generate.executor import tree_memory  # noqa: E402

BARE = ["-c", "from cli.generate import generate; generate()"]
"""The generate command alone, without the rest of subst (z3 and onnxruntime): for a machine that lacks them."""


def run(
    max_ops: int,
    config: str | None,
    workers: int | None,
    seed: int,
    executor: str = "local",
    root: Path = ROOT,
    bare: bool = False,
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, *(BARE if bare else ["-m", "cli.main", "generate"])]
        cmd += ["--max-ops", str(max_ops), "--seed", str(seed)]
        cmd += ["--store", str(Path(tmp) / "bench.db"), "--json"]
        cmd += ["--config", str(Path(config).resolve())] if config else []
        cmd += ["--workers", str(workers)] if workers else []
        cmd += ["--executor", executor] if executor != "local" else []
        start, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        env = {**os.environ, "XDG_CACHE_HOME": tmp}
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, text=True)  # progress: our stderr
        peak = [0]

        def sample() -> None:
            while proc.poll() is None:
                peak[0] = max(peak[0], tree_memory(proc.pid))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        out, _ = proc.communicate()
        wall = time.perf_counter() - start
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
        sampler.join()
        if proc.returncode:
            raise SystemExit(f"generate failed with exit code {proc.returncode}")
        summary = json.loads(out)
        out = {"cmd": " ".join(cmd[1:]), **summary, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak[0] / 2**20}
        return {**out, "code": _commit(root)}


def _commit(root: Path) -> str:
    """The commit a checkout is at, else its folder (an exported tree has no git)."""
    git = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return git.stdout.strip() if git.returncode == 0 and root == ROOT else str(root)


def table(rows: list[dict]) -> str:
    head = "| code | max ops | wall (s) | CPU (s) | peak memory (MB) | graphs | candidates | rules |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['code']} | {r['settings']['max_ops']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_mb']:.0f} "
            f"| {r['graphs_total']:,} | {r['candidates']:,} | {r['rules']:,} |"
        )
    reasons = sorted({k for r in rows for k in r["pruned"]}, key=lambda k: -max(r["pruned"].get(k, 0) for r in rows))
    lines += ["", "| pruning | " + " | ".join(f"{r['settings']['max_ops']} ops" for r in rows) + " |"]
    lines.append("|---|" + "---:|" * len(rows))
    for k in reasons:
        lines.append(f"| {k} | " + " | ".join(f"{r['pruned'].get(k, 0):,}" for r in rows) + " |")
    lines += ["", "| graphs by op count | " + " | ".join(f"{r['settings']['max_ops']} ops" for r in rows) + " |"]
    lines.append("|---|" + "---:|" * len(rows))
    depth = max(len(r["graphs"]) for r in rows)
    for n in range(depth):
        cells = [f"{r['graphs'].get(f'{n} ops', 0):,}" if n < len(r["graphs"]) else "" for r in rows]
        lines.append(f"| {n} ops | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-ops", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--config", help="generate --config file (default: TASO's op set and input pool)")
    ap.add_argument("--workers", type=int, help="generate --workers (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--executor", choices=["local", "ray"], default="local", help="generate --executor")
    ap.add_argument(
        "--result", type=Path, help="the result file (default: bench/results/<today>/generate-cpu-<N>ops.json)"
    )
    ap.add_argument("--baseline", type=Path, help="a checkout of other code to run each setting from too, first")
    ap.add_argument("--bare", action="store_true", help="run the generate command alone (no z3 needed)")
    args = ap.parse_args()
    rows, baseline = [], []
    for n in args.max_ops:
        if args.baseline:
            baseline.append(run(n, args.config, args.workers, args.seed, args.executor, args.baseline.resolve()))
        rows.append(run(n, args.config, args.workers, args.seed, args.executor, bare=args.bare))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    for r in baseline + rows:
        print(f"  {r['code']}: {r['cmd']}")
    print(table(baseline + rows))
    for old, new in zip(baseline, rows):
        same = "same" if old["rules"] == new["rules"] else "DIFFERENT"
        print(
            f"{new['settings']['max_ops']} ops: wall {new['wall_s'] / old['wall_s']:.2f}x, peak memory "
            f"{new['peak_rss_mb'] / old['peak_rss_mb']:.2f}x of the baseline's; {same} rule count"
        )
    what = f"{max(args.max_ops)}ops" + (f"-{Path(args.config).stem}" if args.config else "")
    what += f"-{args.executor}" if args.executor != "local" else ""
    record = {"meta": layout.meta(), "rows": rows, **({"baseline": baseline} if baseline else {})}
    layout.write(args.result or layout.result_path("generate", "cpu", what), record)


if __name__ == "__main__":
    main()
