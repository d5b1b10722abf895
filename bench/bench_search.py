"""What a search on the device reaches, and why it misses what the reference table's search finds.

    PYTHONPATH=. python bench/bench_search.py --device cuda --models squeezenet,bert_base,nasrnn --out $OUT

For each model, one cost model measuring on the device with a fresh cache:
1. ``cold``: the search as `subst optimize` runs it (input's units profiled first, then ``--time-limit``);
2. ``reference``: the search with the committed reference table (taso/cost/reference_costs.json, no time
   limit), its result costed with the device's measurements: the gain the device's costs see in it;
3. ``warm``: the cold search again, now that its units and the reference result's are cached;
4. ``unlimited``: the same without a time limit (budget only).
If (2) shows a gain that (1) misses and (3) finds, the time limit (spent measuring) is what hid it; if (3)
misses it too, the path (alpha, budget) is. Prints a table; writes bench/results/<today>/search-<device>.json
(``--result``).
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

import layout  # noqa: E402

from build import zoo_files  # noqa: E402
from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute.precompute import precompute  # noqa: E402
from taso.ir import Graph  # noqa: E402
from taso.rules import store  # noqa: E402
from taso.search import both_directions, optimize_graph  # noqa: E402

REFERENCE = ROOT / "taso" / "cost" / "reference_costs.json"


def searches(name: str, g: Graph, model: cost.CostModel, rules: list, args: argparse.Namespace) -> dict:
    """The four searches of one model (see the module's docstring), each result costed on the device."""
    t0 = time.perf_counter()
    before = model.graph_cost(g).total_ms
    row: dict = {"model": name, "profile_s": time.perf_counter() - t0, "before_ms": before}
    for tag, costs, limit in (
        ("cold", model, args.time_limit),
        ("reference", cost.reference_model(str(REFERENCE)), 1e9),
        ("warm", model, args.time_limit),
        ("unlimited", model, 1e9),
    ):
        t0 = time.perf_counter()
        found = optimize_graph(
            g,
            rules,
            lambda h, c=costs: c.graph_cost(h).total_ms,
            args.alpha,
            args.budget,
            limit,
            context_ops=cost.REGION_CONTEXT,
        )
        row[tag] = {
            "speedup_on_device": before / model.graph_cost(found.graph).total_ms,
            "search_s": found.seconds,
            "wall_s": time.perf_counter() - t0,
            "expanded": found.expanded,
            "candidates": found.candidates,
            "measured_units": model.measured,
            "rules": dict(sorted(found.applied.items())),
        }
        print(name, tag, json.dumps(row[tag]), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="squeezenet,bert_base,nasrnn")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/search-<device>.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("search", device.key)
    rules = both_directions(store.load_rules(store.open_store(store.DEFAULT_PATH), status="proved"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in zoo_files(args.models, Path(tmp)):
            g, _ = precompute(onnx_io.load_model(path))
            model = cost.CostModel(device, store.create(args.out / f"{name}.costs.db"))
            rows.append(searches(name, g, model, rules, args))
            layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
    tags = ["cold", "reference", "warm", "unlimited"]
    print(f"\ndevice {device.key}, alpha {args.alpha}, budget {args.budget}, time limit {args.time_limit} s")
    print(f"{'model':<12}{'profile s':>10}" + "".join(f"{t + ' x':>13}{'s':>7}" for t in tags))
    for r in rows:
        cells = "".join(f"{r[t]['speedup_on_device']:>13.3f}{r[t]['search_s']:>7.1f}" for t in tags)
        print(f"{r['model']:<12}{r['profile_s']:>10.1f}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
