"""Op counts of ONNX files as onnxruntime runs them (level ALL, CPU provider), side by side: what a file's node
count hides is what onnxruntime fuses on load (a SkipLayerNormalization it can only form where it can tell the
residual Add's operands alike, a Conv+Mul, an Identity), so subst's output and a peer's are compared here.

    python bench/ortcount.py [--json OUT] NAME=FILE ...     e.g. orig=m.onnx subst=m.subst.onnx slim=m.slim.onnx

Prints each file's node count before and after onnxruntime's optimization and the op types whose counts differ
between the files (after it); needs onnx and onnxruntime only, so it runs in a peers' venv too.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import onnx
import onnxruntime as ort


def counts(path: str) -> tuple[int, Counter[str]]:
    """``path``'s node count, and its op types counted as onnxruntime runs it on the CPU at level ALL."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.optimized_model_filepath = str(Path(tmp) / "ort.onnx")
        ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        after = Counter(n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node)
    return len(onnx.load(path, load_external_data=False).graph.node), after


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", metavar="NAME=FILE")
    ap.add_argument("--json", help="write the counts here too")
    args = ap.parse_args(argv)
    if not all("=" in f for f in args.files):
        print("each file is given as NAME=FILE", file=sys.stderr)
        return 2
    named = dict(f.split("=", 1) for f in args.files)
    missing = [p for p in named.values() if not Path(p).is_file()]
    if missing:
        print(f"no such file: {missing[0]}", file=sys.stderr)
        return 2
    got = {name: counts(path) for name, path in named.items()}
    print("  ".join(f"{name}: {nodes} -> {sum(c.values())}" for name, (nodes, c) in got.items()))
    for op in sorted(set().union(*(c for _, c in got.values()))):
        row = [c[op] for _, c in got.values()]
        if len(set(row)) > 1:
            print(f"  {op:28s}" + "".join(f"{k:6d}" for k in row))
    if args.json:
        out = {
            name: {"nodes": nodes, "ort_nodes": sum(c.values()), "ort_ops": dict(c)} for name, (nodes, c) in got.items()
        }
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
