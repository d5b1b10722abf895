"""Which kernels onnxruntime runs for a whole model, against the kernels of the units the cost model times.

    PYTHONPATH=. python bench/bench_fusions.py --device cuda --models gpt2,bert_base

The cost model sums unit costs (`taso.cost.units`), each unit timed as a graph of its own. Where onnxruntime
fuses across a unit's boundary in the whole model (or fuses inside a unit what it cannot in the model), the
units pay for kernels the model does not run. For each model this prints the op census of onnxruntime's
optimized whole model (ENABLE_ALL, on the device's provider), the census summed over its units (each unit's
graph optimized as it is timed, times its count), and the ops where the two differ; then every distinct unit
with its count and the ops onnxruntime made of it. Writes
bench/results/<today>/fusions-<device>.json (``--result``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import layout  # noqa: E402
from bench_cost import load  # noqa: E402

from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute import fold_static_shapes  # noqa: E402


def census(name: str, device: profiler.Device, tmp: Path) -> dict:
    path, g = load(name, tmp)
    g = fold_static_shapes(g)
    whole = Counter(profiler.optimized_ops(str(path), device.is_cuda))
    by_key: dict[str, dict] = {}
    for unit in cost.units(g):
        ug = cost.unit_graph(g, unit)
        key = cost.unit_key(ug)
        if key not in by_key:
            read = cost.fused_when_read(ug)  # timed read on; the reading Reshapes' cost is taken off
            ops = Counter(profiler.optimized_ops(onnx_io.model_bytes(cost.read_on(ug) if read else ug), device.is_cuda))
            ops.subtract({"Reshape": len(ug.outputs) if read else 0})
            by_key[key] = {"label": unit.label, "count": 0, "ops": +ops, "read_on": read}
        by_key[key]["count"] += 1
    summed: Counter = Counter()
    for u in by_key.values():
        for op, k in u["ops"].items():
            summed[op] += k * u["count"]
    differ = {op: (whole[op], summed[op]) for op in sorted(set(whole) | set(summed)) if whole[op] != summed[op]}
    return {
        "model": name,
        "whole": dict(whole),
        "units": dict(summed),
        "differ": differ,
        "unit_ops": [{**u, "ops": dict(u["ops"])} for u in by_key.values()],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="gpt2,bert_base")
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument(
        "--result", type=Path, help="the result file (default: bench/results/<today>/fusions-<device>.json)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("fusions", device.key)
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for name in [m for m in args.models.split(",") if m]:
            row = census(name, device, Path(tmpdir))
            rows.append(row)
            print(
                f"\n{name}: {sum(row['whole'].values())} kernels-or-views in the model, "
                f"{sum(row['units'].values())} in its units"
            )
            print(f"{'op':<28}{'model':>7}{'units':>7}")
            for op, (w, u) in row["differ"].items():
                print(f"{op:<28}{w:>7}{u:>7}")
            for u in row["unit_ops"]:
                ops = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in sorted(u["ops"].items()))
                print(f"  x{u['count']:<3} {u['label']:<50} -> {ops}")
    layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
