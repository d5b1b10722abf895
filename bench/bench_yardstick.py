"""Does the reference run depend on what is timed beside it?

    PYTHONPATH=. python bench/bench_yardstick.py --device cuda --passes 6 --out $OUT

Every unit measurement and every whole-model measurement times `taso.cost.profiler`'s tiny reference model beside
it, and unit costs are scaled by it (`taso.cost.host.to_calibrated_host`). On the H100 the reference beside unit
profiling ran 0.082-0.087 ms while beside whole models, minutes later, it ran 0.063-0.066 ms: either the host
sped up each time, or the reference reads differently by company. This bench times the reference beside each
kind of company in turn, ``--passes`` times round (so a drift of the host hits every kind alike): alone, a
tiny unit pair (one Relu vs five, as `measure_marginal` times), a mid-sized conv unit pair, the calibration's
large MatMul, and whole zoo models. Prints each kind's median reference and its spread over passes, with the
GPU's SM clock read after each; writes
bench/results/<today>/yardstick-<device>.json (``--result``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "models")]

import layout  # noqa: E402

from build import ZOO  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import calibration, measure, profiler  # noqa: E402
from taso.execute import check  # noqa: E402
from taso.ir import Graph, WeightData, parse_graph  # noqa: E402

CONV = """graph(%x: float32[1,64,56,56], %w: float32[64,64,3,3] weight):
  %y = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,64,56,56]
  return %y"""
RELU = "graph(%x: float32[1,64,56,56]):\n  %y = Relu(%x) : float32[1,64,56,56]\n  return %y"


def _weighted(text: str) -> Graph:
    g = parse_graph(text)
    rng = np.random.default_rng(0)
    data = {w: WeightData(rng.standard_normal(g.types[w].shape).astype(np.float32)) for w in g.weights}
    return Graph(g.nodes, g.inputs, g.outputs, g.types, g.weights, data, g.meta)


def companies(models: list[str], tmp: Path) -> dict[str, list[tuple[bytes | str, dict]]]:
    """Kind of company -> the models timed beside the reference."""

    def runs(*graphs: Graph) -> list[tuple[bytes | str, dict]]:
        return [(onnx_io.model_bytes(g), check.random_inputs(g, seed=0)) for g in graphs]

    relu, conv = _weighted(RELU), _weighted(CONV)
    mm, feeds = calibration._matmul(4096)
    out = {
        "alone": [profiler._reference()],  # beside a second session of itself
        "relu pair": runs(relu, measure.replicate(relu, measure.COPIES)),
        "conv pair": runs(conv, measure.replicate(conv, measure.COPIES)),
        "matmul 4096": [(onnx_io.model_bytes(mm), feeds)],
    }
    for name in models:
        path = tmp / f"{name}.onnx"
        onnx.save_model(ZOO[name](), str(path))
        out[name] = [(str(path), check.random_inputs(onnx_io.load_model(path), seed=0))]
    return out


def sm_clock() -> int | None:
    values = profiler.gpu_query("clocks.sm")
    return int(values[0]) if values and values[0].isdigit() else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default="squeezenet,resnet50")
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument(
        "--result", type=Path, help="the result file (default: bench/results/<today>/yardstick-<device>.json)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = profiler.pick_device(args.device)
    result = args.result or layout.result_path("yardstick", device.key)
    with tempfile.TemporaryDirectory() as tmpdir:
        kinds = companies([m for m in args.models.split(",") if m], Path(tmpdir))
        seen: dict[str, list[tuple[float, int | None]]] = {k: [] for k in kinds}
        for p in range(args.passes):
            order = list(kinds) if p % 2 == 0 else list(reversed(kinds))
            for kind in order:
                timing = profiler.time_models(kinds[kind], device)[0]
                seen[kind].append((float(timing.reference_ms or 0.0), sm_clock()))
            print(f"pass {p}: " + ", ".join(f"{k} {v[-1][0]:.4f}" for k, v in seen.items()), flush=True)
    rows = []
    for kind, taken in seen.items():
        refs = [r for r, _ in taken]
        clocks = [c for _, c in taken if c]
        rows.append(
            {
                "company": kind,
                "reference_ms": statistics.median(refs),
                "min_ms": min(refs),
                "max_ms": max(refs),
                "sm_mhz": statistics.median(clocks) if clocks else None,
                "passes": refs,
            }
        )
    layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
    print(f"\ndevice {device.key}\n{'company':<14}{'reference ms':>14}{'min':>9}{'max':>9}{'SM MHz':>8}")
    for r in rows:
        print(
            f"{r['company']:<14}{r['reference_ms']:>14.4f}{r['min_ms']:>9.4f}{r['max_ms']:>9.4f}"
            f"{r['sm_mhz'] or 0:>8.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
