"""What trusting the shipped store's proofs costs a cold `subst optimize` (issue 46), here and in a baseline tree.

    .venv/bin/python bench/bench_trust.py --baseline /tmp/main-tree --rounds 5 --result

Each timing is a fresh process reading the shipped rules as `taso.optimize.rewrites.read_rules` does (the
store opened, the specs' basis, `rulecache.proved_rules`, `provenance.trusted`; imports not timed), the
``trusted`` call timed alone too; then the wall of ``subst optimize models/bert_tiny.onnx`` in each tree. The
two trees take turns within each round, so that they share the machine's load; the best of the rounds is read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import layout  # noqa: E402

CHILD = """
import inspect, json, time
from taso.rules import provenance, store
from taso.search import rulecache
from taso.verify import basis
start = time.perf_counter()
db = store.open_store(store.DEFAULT_PATH)
proofs = basis.for_folder(provenance.SPECS_DIR)
rules = rulecache.proved_rules(db)
mid = time.perf_counter()
pinned = "db" in inspect.signature(provenance.trusted).parameters  # a tree before the pinned path: no store
kept, skipped = provenance.trusted(rules, proofs.digest_of, *([db] if pinned else []))
end = time.perf_counter()
print(json.dumps({"read_s": end - start, "trusted_s": end - mid, "kept": len(kept), "skipped": sum(skipped.values())}))
"""
OPTIMIZE = "import sys; from cli.main import main; sys.argv[0] = 'subst'; sys.exit(main())"


def one(tree: Path) -> dict:
    """One cold read of the shipped rules and one optimize of bert_tiny, in ``tree`` (with this .venv's Python)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, cwd=tree, env=env)
    row = json.loads(out.stdout)
    with tempfile.TemporaryDirectory() as tmp:
        args = ["optimize", "models/bert_tiny.onnx", "-o", f"{tmp}/x.onnx", "--dim", "batch=1", "--dim", "seq=32"]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", OPTIMIZE, *args], capture_output=True, check=True, cwd=tree, env=env)
    return {**row, "optimize_wall_s": time.perf_counter() - start}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="Another checkout of subst (its tree alone).")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--result", action="store_true", help="write bench/results/<today>/trust-cpu.json")
    args = ap.parse_args()
    rounds = [
        {"load": os.getloadavg()[0], "before": one(args.baseline.resolve()), "after": one(ROOT)}
        for _ in range(args.rounds)
    ]
    best = {
        side: {k: min(r[side][k] for r in rounds) for k in ("read_s", "trusted_s", "optimize_wall_s")}
        for side in ("before", "after")
    }
    print(json.dumps(best, indent=1))
    if args.result:
        layout.write(layout.result_path("trust", "cpu"), {"meta": layout.meta(), "best": best, "rounds": rounds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
