"""Do unit costs drift with the host, and does the tiny reference run timed beside each measurement track it?

    PYTHONPATH=. python bench/bench_drift.py --device cuda --models squeezenet,bert_base --passes 8 --out $OUT

Measures every distinct unit of the models (as `taso.cost.measure_marginal` does: one copy vs five, side by
side, the reference run beside them) in ``--passes`` passes, forward and backward in turn, and keeps each
measurement's marginal cost and reference latency. Per pass it prints the drift: the median over units of
(this pass's cost / the unit's median cost), raw and normalised by the reference (cost x quickest reference /
this reference). If the normalised drift is flatter, scaling by the reference takes the host's slow spells
out of unit costs. Writes bench/results/<today>/drift-<device>.json
(``--result``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import layout  # noqa: E402

from build import ZOO  # noqa: E402
from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import profiler  # noqa: E402
from taso.execute import fold_static_shapes  # noqa: E402
from taso.execute.precompute import precompute  # noqa: E402
from taso.ir import Graph  # noqa: E402


def unit_graphs(names: list[str], tmp: Path) -> dict[str, tuple[str, Graph]]:
    """Every distinct unit of the models: key -> (label, unit graph)."""
    found: dict[str, tuple[str, Graph]] = {}
    for name in names:
        path = tmp / f"{name}.onnx"
        onnx.save_model(ZOO[name](), str(path))
        g = fold_static_shapes(precompute(onnx_io.load_model(path))[0])
        for unit in cost.units(g):
            ug = cost.unit_graph(g, unit)
            if all(t.is_static for t in ug.types.values()):
                found.setdefault(cost.unit_key(ug), (f"{name}:{unit.label}", ug))
    return found


def measure(ug: Graph, device: profiler.Device) -> tuple[float, float]:
    """(marginal ms of one copy, reference ms) from one side-by-side measurement."""
    ms, timing = cost.measure_marginal(ug, device, run_ms=0.0)
    return ms, float(timing.reference_ms or 0.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="squeezenet,bert_base")
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/drift-<device>.json)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("drift", device.key)
    with tempfile.TemporaryDirectory() as tmp:
        found = unit_graphs([m for m in args.models.split(",") if m], Path(tmp))
    keys = [k for k, (_, ug) in found.items() if cost.replicate(ug, 2) is not None]
    taken: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    for p in range(args.passes):
        for k in keys if p % 2 == 0 else keys[::-1]:
            taken[k].append(measure(found[k][1], device))
        print(f"pass {p + 1}/{args.passes} done", flush=True)
    quickest = min(ref for v in taken.values() for _, ref in v)
    typical = {k: statistics.median(ms for ms, _ in v) for k, v in taken.items()}
    typical_norm = {k: statistics.median(ms * quickest / ref for ms, ref in v) for k, v in taken.items()}
    rows = []
    for p in range(args.passes):
        live = [k for k in keys if typical[k] > 0 and typical_norm[k] > 0]
        rows.append(
            {
                "pass": p + 1,
                "reference_ms": statistics.median(taken[k][p][1] for k in live),
                "drift_raw": statistics.median(taken[k][p][0] / typical[k] for k in live),
                "drift_normalised": statistics.median(
                    taken[k][p][0] * quickest / taken[k][p][1] / typical_norm[k] for k in live
                ),
            }
        )

    def spread(norm: bool) -> float:
        """Median over units of the max/min ratio of its measurements."""
        ratios = []
        for v in taken.values():
            xs = [ms * quickest / ref if norm else ms for ms, ref in v]
            if min(xs) > 0:
                ratios.append(max(xs) / min(xs))
        return statistics.median(ratios)

    summary = {"units": len(keys), "spread_raw": spread(False), "spread_normalised": spread(True)}
    layout.write(
        result,
        {
            "meta": layout.meta(device.key),
            "device": device.key,
            "rows": rows,
            "summary": summary,
            "taken": {found[k][0] + "|" + k[:12]: v for k, v in taken.items()},
        },
    )
    print(f"\ndevice {device.key}; {len(keys)} units, {args.passes} passes")
    print(f"{'pass':>5}{'reference ms':>14}{'drift raw':>11}{'drift norm':>12}")
    for r in rows:
        print(f"{r['pass']:>5}{r['reference_ms']:>14.4f}{r['drift_raw']:>11.3f}{r['drift_normalised']:>12.3f}")
    print(
        f"per unit, max/min over passes (median over units): raw {summary['spread_raw']:.3f}, "
        f"normalised {summary['spread_normalised']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
