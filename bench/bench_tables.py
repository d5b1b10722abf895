"""Do the rewrites a cost table chooses pay off end to end? Optimize each model once per reference table
(nothing measured: the search runs on the table, as `bench_perturb.py` does), add the hand-merged variant
(`bench/variants.py`), then time every variant interleaved on --device.

    PYTHONPATH=. python3 bench/bench_tables.py --device cuda --models inception_v1 \
        --costs taso/cost/reference_costs.json,bench-out/reference_costs.json

Two tables that disagree about a rule (one estimated a unit the other measured) lead to two graphs; this says
which of them is faster on the device, and by how much, in one run. Prints a table per model (median ms over
--rounds rounds, speed-up over the original, rules applied, predicted speed-up); writes
bench/results/<today>/tables-<device>.json (``--result``). A search on a table measures nothing, so `optimize`'s
end-to-end guard does not run: the point is to time what each table chose.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models"), str(ROOT / "bench")]

import layout  # noqa: E402
from variants import densify_groups, fold_affine_into_batchnorm, fold_batchnorm, merge_sibling_convs  # noqa: E402

from build import zoo_files  # noqa: E402
from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute.precompute import precompute  # noqa: E402
from taso.ir import Graph  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402
from taso.rules import store  # noqa: E402


def _hand(
    fold: bool, merge: bool, equal_only: bool = False, dense: str = "", affine: bool = False
) -> Callable[[Graph], tuple[Graph, dict]]:
    def variant(g: Graph) -> tuple[Graph, dict]:
        done: dict[str, int] = {}
        g, _ = precompute(g)
        if affine:
            g, done["Mul/Add folded into BatchNormalization"] = fold_affine_into_batchnorm(g)
        if dense:
            g, done["grouped convs made dense"] = densify_groups(g, depthwise=dense == "all")
        if fold:
            g, done["BatchNormalization folded"] = fold_batchnorm(g)
        if merge:
            g, done["sibling groups merged"] = merge_sibling_convs(g, equal_only)
        return g, done

    return variant


HAND = {
    "merge": _hand(fold=False, merge=True),
    "bn": _hand(fold=True, merge=False),
    "bn+merge": _hand(fold=True, merge=True),
    "bn+equal-merge": _hand(fold=True, merge=True, equal_only=True),
    "dense": _hand(fold=False, merge=False, dense="grouped"),
    "dense-all": _hand(fold=False, merge=False, dense="all"),
    "bn+dense+merge": _hand(fold=True, merge=True, dense="grouped"),
    "affine": _hand(fold=False, merge=False, affine=True),
    "affine+bn+merge": _hand(fold=True, merge=True, affine=True),
}
"""Hand-applied variants (`bench/variants.py`): what a rule family could give before it is built."""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="inception_v1")
    ap.add_argument("--costs", default="", help="comma-separated reference tables (export_reference's json)")
    ap.add_argument(
        "--hand",
        default="merge",
        help=f"comma-separated hand variants to time beside the tables: {', '.join(HAND)}",
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/tables-<device>.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("tables", device.key)
    tables = [Path(p) for p in args.costs.split(",") if p]
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name, path in zoo_files(args.models, tmp):
            variants: dict[str, Path] = {"original": path, "again": path}
            chosen: dict[str, dict] = {}
            for i, table in enumerate(tables):
                out = tmp / f"{name}.table{i}.onnx"
                settings = Settings(costs=str(table), time_limit=args.time_limit)
                report = optimize(path, out, store.DEFAULT_PATH, settings=settings)
                variants[table.stem] = out
                chosen[table.stem] = {
                    "rules": report.rules_applied,
                    "predicted_speedup": report.cost["before_ms"] / report.cost["after_ms"],
                }
            for h in filter(None, args.hand.split(",")):
                hand, done = HAND[h](onnx_io.load_model(path))
                if any(done.values()):
                    key = f"hand {h}"
                    variants[key] = tmp / f"{name}.hand{len(variants)}.onnx"
                    onnx_io.save_model(hand, variants[key])
                    chosen[key] = {"rules": done, "predicted_speedup": None}
            graphs = [onnx_io.load_model(p) for p in variants.values()]
            rounds = cost.medians(cost.interleaved_timings(list(variants.values()), graphs, device, args.rounds))
            ms = {k: statistics.median(r) for k, r in zip(variants, rounds)}
            row = {
                "model": name,
                "device": device.key,
                "ms": ms,
                "speedup": {k: ms["original"] / v for k, v in ms.items()},
                "rounds_ms": dict(zip(variants, rounds)),
                "chosen": chosen,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            layout.write(result, {"meta": layout.meta(device.key), "rows": rows})
    print(f"\n{'model':<14}{'variant':<48}{'ms':>8}{'x':>8}{'pred x':>8}  rules")
    for r in rows:
        for k, v in r["ms"].items():
            c = r["chosen"].get(k, {})
            pred = f"{c['predicted_speedup']:.3f}" if c.get("predicted_speedup") else "-"
            rules = ", ".join(f"{n} x{m}" for n, m in sorted(c.get("rules", {}).items())) or "-"
            print(f"{r['model']:<14}{k:<48}{v:>8.3f}{r['speedup'][k]:>8.3f}{pred:>8}  {rules}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
