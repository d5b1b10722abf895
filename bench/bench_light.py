"""Whether the search on the onnx wheel's light models ends by its work bound or by its wall-clock limit: each
model (seeded weights, `builders.light.materialize`) optimized as `subst optimize` runs it, with the committed
reference table (nothing measured) or with costs measured on this machine's CPU, and its search's seconds,
work (graphs expanded, candidates costed) and whether the time limit fired.

    PYTHONPATH=. python bench/bench_light.py --costs taso/cost/reference_costs.json --result OUT.json
    PYTHONPATH=. python bench/bench_light.py --device cpu --result OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import onnx  # noqa: E402

from builders.light import light_models, materialize  # noqa: E402
from taso.optimize import Settings, optimize  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--costs", help="a reference cost table (default: measure on --device)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", help="comma-separated light model names (default: all)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--result", type=Path, required=True)
    args = ap.parse_args()
    wanted = set(args.models.split(",")) if args.models else None
    rows = []
    for path in light_models():
        name = path.stem.removeprefix("light_")
        if wanted is not None and name not in wanted:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / f"{name}.onnx"
            onnx.save(materialize(onnx.load(str(path))), str(src))
            settings = Settings(device=args.device, costs=args.costs, time_limit=args.time_limit, budget=args.budget)
            t0 = time.perf_counter()
            report = optimize(src, Path(tmp) / "out.onnx", run_check=False, settings=settings)
            s = report.search
            row = {
                "model": name,
                "wall_s": round(time.perf_counter() - t0, 2),
                "search_s": round(float(s.get("seconds", 0.0)), 2),  # type: ignore[arg-type]
                "time_limit_reached": s.get("time_limit_reached"),
                "expanded": s.get("expanded"),
                "candidates": s.get("candidates"),
                "regions": s.get("regions"),
                "rules_applied": sum(r["count"] for r in report.rules_applied.values()),  # type: ignore[index]
                "predicted": [report.cost.get("before_ms"), report.cost.get("after_ms")],
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
        meta = {"costs": args.costs or f"measured on {args.device}", "time_limit": args.time_limit}
        meta |= {"budget": args.budget}
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
