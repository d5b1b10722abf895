"""The rule-index part of a cold `subst optimize`: the shipped store's proved rules and search index, ready.

    .venv/bin/python bench/bench_rulecache.py --rounds 3

Each timing is a fresh process with an empty per-user cache (a new XDG_CACHE_HOME), as a new user's first run,
timing `rulecache.proved_rules` and `rulecache.search_index` as `taso.optimize` calls them (the store opened
and its key digested included; imports not). Three ways, in turn within each round so that they share the
machine's load: ``shipped`` reads the package's form (rulecache.json), ``built`` passes it by (as when it is
stale, or for a store of the user's own) and parses, lifts and indexes the rules, ``warm`` reads the user cache
that ``built`` wrote (the rules alone, checked against the store; lifted and indexed anew). Writes bench/results/<today>/rulecache-cpu.json (``--result``) and prints the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import layout  # noqa: E402

CHILD = """
import json, sys, time
from pathlib import Path
from taso.rules import store
from taso.search import rulecache
if sys.argv[1] == "built":
    rulecache.SHIPPED = Path("/nonexistent/rulecache.json")
start = time.perf_counter()
db = store.open_store(store.DEFAULT_PATH)
rules = rulecache.proved_rules(db)
index = rulecache.search_index(rules)
print(json.dumps({"seconds": time.perf_counter() - start, "rules": len(rules), "variants": len(index.rules)}))
"""


def _time(way: str, cache: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    out = subprocess.run([sys.executable, "-c", CHILD, way], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{way}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--result", type=Path, help="where the JSON goes (default: bench/results/<today>/)")
    args = ap.parse_args()
    result: dict = {"meta": layout.meta(), "rounds": []}
    for k in range(args.rounds):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            ways = ("shipped", "built") if k % 2 == 0 else ("built", "shipped")  # which goes first alternates
            run = {way: _time(way, Path(a if way == "shipped" else b)) for way in ways}
            run["warm"] = _time("built", Path(b))
            run["load_average"] = os.getloadavg()[0]
        print(f"round {k + 1}: " + ", ".join(f"{w} {run[w]['seconds']:.2f} s" for w in ("shipped", "built", "warm")))
        result["rounds"].append(run)
    result["median_s"] = {
        w: round(statistics.median(r[w]["seconds"] for r in result["rounds"]), 2) for w in ("shipped", "built", "warm")
    }
    print("medians: " + ", ".join(f"{w} {s:.2f} s" for w, s in result["median_s"].items()))
    layout.write(args.result or layout.result_path("rulecache", "cpu"), result)


if __name__ == "__main__":
    main()
