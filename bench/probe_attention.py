"""Does onnxruntime's MultiHeadAttention pay where subst's proved attention rules put it (issue 48)? Each corpus
model is read as `subst optimize` reads it (weight-only nodes precomputed, shape arithmetic folded at the corpus's
dims, repeats merged, idle operations dropped, chains of axis moves composed: "prepared"), then every attention
block a rule of tests/data/attention-hand-written.rules matches is rewritten ("attention"; each rule proved by z3 here first,
so a stale rule cannot slip in); the outputs are compared on the device, and original, prepared, prepared again
and attention are timed side by side as bench_corpus.py times them, without and under CUDA graph capture. The
row says how many blocks each rule rewrote, of how many softmaxes the model has.

    PYTHONPATH=/tmp/site:. python3 bench/probe_attention.py whisper_encoder_ts deit_tiny_ts --result $OUT/attention.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
from bench_corpus import time_captured, time_variants  # noqa: E402

from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute import check  # noqa: E402
from taso.execute.precompute import precompute  # noqa: E402
from taso.ir import Graph  # noqa: E402
from taso.optimize.dedup import merge_duplicates  # noqa: E402
from taso.optimize.idle import drop_idle  # noqa: E402
from taso.optimize.shapefold import fold_shapes  # noqa: E402
from taso.optimize.views import compose_views  # noqa: E402
from taso.rules import SPECS_DIR, Rule, parse_rules  # noqa: E402
from taso.search import apply_everywhere  # noqa: E402
from taso.verify import Prover, load_specs  # noqa: E402

RULES = ROOT / "tests" / "data" / "attention-hand-written.rules"  # the generated store rules include each


def proved_rules() -> list[Rule]:
    """The attention rules, each proved by z3 now (a probe must not time a rewrite the specs no longer prove)."""
    prover = Prover(load_specs(SPECS_DIR), precheck=True)
    rules = parse_rules(RULES.read_text())
    for r in rules:
        verdict = prover.verdict(r)
        if verdict.status != "proved":
            raise SystemExit(f"{r.name}: {verdict.status} ({verdict.detail.get('reason')})")
    return rules


def prepared(name: str, src: Path) -> Graph:
    """The model as the optimizer reads it before its search, at the corpus's dims."""
    g, _ = onnx_io.import_model(src)
    g = onnx_io.concretize(g, corpus.dims(name))
    for rewrite in (precompute, fold_shapes, merge_duplicates, drop_idle, compose_views):
        g = rewrite(g)[0]
    return g


def probe(name: str, rules: list[Rule], device: profiler.Device, rounds: int) -> dict:
    src = Path(f"/tmp/probe_{name}.onnx")
    corpus.write(name, src)
    base = prepared(name, src)
    fused, applied = apply_everywhere(base, rules)
    titles = {r.id: r.name for r in rules}
    row: dict = {
        "softmaxes": sum(n.op == "Softmax" for n in base.nodes),
        "rewritten": {titles[k.split("~")[0]]: n for k, n in applied.items()},
        "attention_nodes": sum(n.op == "MultiHeadAttention" for n in fused.nodes),
    }
    paths = {"original": str(src), "prepared": f"/tmp/probe_{name}.prepared.onnx"}
    onnx_io.save_model(base, paths["prepared"])
    if row["attention_nodes"]:
        paths["attention"] = f"/tmp/probe_{name}.attention.onnx"
        onnx_io.save_model(fused, paths["attention"])
    feeds = check.random_inputs(onnx_io.load_model(src), seed=0, dims=corpus.dims(name))
    providers = [profiler.CUDA] if device.is_cuda else [profiler.CPU]
    outs = {k: ort.InferenceSession(p, providers=providers).run(None, feeds) for k, p in paths.items()}
    row["max_rel_err"] = {
        k: max(float(np.abs(x - y).max() / (np.abs(x).max() + 1e-9)) for x, y in zip(outs["original"], v))
        for k, v in outs.items()
        if k != "original"
    }
    variants = {"original": paths["original"], "prepared": paths["prepared"], "again": paths["prepared"]}
    variants |= {"attention": paths["attention"]} if "attention" in paths else {}
    ms = time_variants(name, variants, device, rounds)
    row |= {"ms": ms, "noise": ms["prepared"] / ms["again"]}
    if "attention" in ms:
        row["speedup_over_prepared"] = ms["prepared"] / ms["attention"]
    if device.is_cuda:
        captured, refused = time_captured(name, variants, device, rounds)
        row |= {"ms_graph": captured, "refused": refused}
        if "attention" in captured:
            row["speedup_graph_over_prepared"] = captured["prepared"] / captured["attention"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="corpus names")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--result", type=Path, required=True)
    args = ap.parse_args()
    device = profiler.pick_device(args.device)
    rules = proved_rules()
    rows = {}
    for name in args.models:
        try:
            rows[name] = probe(name, rules, device, args.rounds)
        except Exception as e:  # noqa: BLE001 (one model's failure, onnxruntime's kernel refusing, is its row)
            rows[name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, json.dumps(rows[name]), flush=True)
        args.result.write_text(json.dumps({"device": device.key, "models": rows}, indent=1))
    totals: Counter = Counter()
    for row in rows.values():
        totals.update(row.get("rewritten", {}))
    print("blocks rewritten per rule:", json.dumps(totals), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
