"""The zoo regression: every zoo model (models/build.py) and every corpus model (real exporter output,
models/corpus.py) optimized with the shipped store, judged against models/baseline.json.

    python models/regress.py             # the table, then exit 1 on any regression   (make zoo)
    python models/regress.py --update    # rewrite the baseline deliberately           (make zoo-update)
    python models/regress.py --only squeezenet,bert_base,gpt2_dynamo

Costs come from the committed reference table (taso/cost/reference_costs.json, measured on an H100), so the
run needs no GPU and gives the same decisions everywhere; the search is bounded by its budget, not by wall
time, for the same reason. The table gives two times: the whole `optimize` (import, search, export, check)
and the search alone. A regression is: a model whose predicted cost ratio got worse, a failed check, or a
store whose rule verdicts changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import corpus  # noqa: E402

from build import ZOO  # noqa: E402
from taso.errors import CheckFailed  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402
from taso.rules import (  # noqa: E402
    ID_LENGTH,
    REVERSE,
    store,  # noqa: E402
)

BASELINE = HERE / "baseline.json"
REFERENCE_COSTS = HERE.parent / "taso" / "cost" / "reference_costs.json"
SETTINGS = Settings(alpha=1.05, budget=20, time_limit=1e9, costs=str(REFERENCE_COSTS))
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {**ZOO, **{n: partial(corpus.load, n) for n in corpus.NAMES}}
"""Zoo and corpus names do not overlap (the corpus's end in their exporter: ``resnet50_ts``)."""
DIMS = {n: corpus.dims(n) for n in corpus.NAMES}
"""Corpus models are costed at batch 1 and sequences of 16; the zoo's symbolic dims default to 1."""
TOLERANCE = 1e-6
"""Relative slack on the predicted ratio: the run is deterministic, this only absorbs float printing."""


def store_digest(path: Path) -> dict:
    """What the shipped store says: rule count per verdict and a digest of every (source, target, verdict)."""
    db = store.open_store(path)
    h = hashlib.sha256()
    counts: dict[str, int] = {}
    for row in db["rules"].rows_where(order_by="src, dst"):
        h.update(f"{row['src']}\n=>\n{row['dst']}\n:{row['status']}\n".encode())
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {"verdicts": counts, "digest": h.hexdigest()}


def run_model(name: str, store_path: Path, tmp: Path, dims: dict[str, int] | None = None) -> dict:
    """The regression's run of model ``name`` (costed at ``dims``, its `DIMS` by default) and what it found."""
    src, out = tmp / f"{name}.onnx", tmp / f"{name}.opt.onnx"
    onnx.save_model(MODELS[name](), str(src))
    t0 = time.perf_counter()
    try:
        report = optimize(
            src, out, store_path, settings=replace(SETTINGS, dims=DIMS.get(name, {}) if dims is None else dims)
        )
        ok, check = True, report.check.summary() if report.check else "skipped"
    except CheckFailed as e:
        report, ok, check = e.report, False, str(e)  # type: ignore[assignment]
    ratio = report.cost["after_ms"] / report.cost["before_ms"] if report.cost else 1.0  # type: ignore[union-attr]
    return {
        "nodes_before": report.nodes_before,  # type: ignore[union-attr]
        "nodes_after": report.nodes_after,  # type: ignore[union-attr]
        "rules": dict(sorted(report.rules_applied.items())),  # type: ignore[union-attr]  # by id, name beside
        "passes": dict(sorted(report.passes_applied.items())),  # type: ignore[union-attr]  # subst's own, by name
        "cost_ratio": ratio,
        "check_ok": ok,
        "check": check,
        "seconds": round(time.perf_counter() - t0, 2),
        "search_seconds": round(float(report.search.get("seconds", 0.0)), 2),  # type: ignore[union-attr,arg-type]
    }


def regressions(result: dict, baseline: dict) -> list[str]:
    """Every way ``result`` is worse than ``baseline``; an empty list means the run is acceptable."""
    found = []
    if result["store"] != baseline.get("store"):
        found.append(
            f"store verdicts changed: {baseline.get('store', {}).get('verdicts')} -> {result['store']['verdicts']}"
        )
    for name, row in result["models"].items():
        base = baseline.get("models", {}).get(name)
        if not row["check_ok"]:
            found.append(f"{name}: check failed: {row['check']}")
        if base is None:
            found.append(f"{name}: not in the baseline (run make zoo-update)")
        elif row["cost_ratio"] > base["cost_ratio"] * (1 + TOLERANCE):
            found.append(f"{name}: predicted cost ratio {row['cost_ratio']:.4f} is worse than {base['cost_ratio']:.4f}")
    return found


def table(result: dict) -> str:
    """One line per model, its rules by id; then each id once with its name (`subst rules show ID` has the rest)."""
    lines = [f"{'model':<26}{'nodes':>12}{'ratio':>8}{'check':>7}{'time s':>8}{'search s':>10}  rules applied"]
    names: dict[str, str] = {}
    for name, r in result["models"].items():
        names.update((k, v["name"]) for k, v in r["rules"].items() if v["name"] != k)
        rules = ", ".join(f"{k} x{v['count']}" for k, v in r["rules"].items()) or "none"
        lines.append(
            f"{name:<26}{r['nodes_before']:>5} -> {r['nodes_after']:<4}{r['cost_ratio']:>8.4f}"
            f"{'ok' if r['check_ok'] else 'FAIL':>7}{r['seconds']:>8.1f}{r['search_seconds']:>10.1f}  {rules}"
        )
    lines.append(f"store: {result['store']['verdicts']}")
    lines += [f"{k:<{ID_LENGTH + len(REVERSE)}}  {v}" for k, v in sorted(names.items())]
    return "\n".join(lines)


def run(names: list[str], store_path: Path = store.DEFAULT_PATH) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: run_model(name, store_path, Path(tmp)) for name in names}
    return {"store": store_digest(store_path), "models": models}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--update", action="store_true", help="write this run into models/baseline.json (with --only: those entries)"
    )
    ap.add_argument("--only", default="", help="comma-separated zoo or corpus entries (default: all)")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="baseline file (default: models/baseline.json)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        print(f"unknown entries: {unknown}; the zoo and corpus have {sorted(MODELS)}", file=sys.stderr)
        return 2
    result = run(names)
    print(table(result))
    baseline = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    if args.update:
        if result["store"] == baseline.get("store"):  # the other entries still hold: keep them
            result["models"] = {**baseline["models"], **result["models"]}
        args.baseline.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.baseline}")
        return 0
    found = regressions(result, baseline)
    for line in found:
        print(f"REGRESSION {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
