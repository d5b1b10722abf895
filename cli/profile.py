"""`subst profile`: measure a model's operator costs on this device and cache them in the user's cost cache."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import click

from cli.options import Finite, dim_option, parse_dims, verbose_option
from cli.progress import StageBars
from taso import cost
from taso import onnx as onnx_io
from taso.cachedir import cost_cache
from taso.cost import profiler
from taso.execute import ortlog
from taso.optimize import COSTS_NOT_CACHED


@click.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="Where to measure: auto = CUDA when onnxruntime's CUDA provider loads, else CPU.",
)
@dim_option("Size of one of the inputs' symbolic dims (`subst info` shows them; default 1).")
@click.option("--refresh", is_flag=True, help="Re-measure everything, ignoring the cache.")
@click.option(
    "--measure-limit",
    type=Finite(min=0),
    help="Seconds to spend measuring what the cache lacks (the device's calibration, then op costs); past it "
    "they are estimated, and measured by a later run. Default: no limit.",
)
@click.option(
    "--measure-model/--no-measure-model",
    default=True,
    show_default=True,
    help="Also time the whole model end to end and compare it with the prediction.",
)
@click.option(
    "--top", type=click.IntRange(min=0), default=10, show_default=True, help="How many of the costliest units to list."
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@verbose_option()
def profile(
    model: Path,
    device: str,
    dims: tuple[str, ...],
    refresh: bool,
    measure_limit: float | None,
    measure_model: bool,
    top: int,
    as_json: bool,
    verbose: bool,
) -> None:
    """Measure the latency of each distinct op (or fused op group) of MODEL on this device.

    Each unit is timed once as a small ONNX model in onnxruntime (CUDA: io_binding, warm-up past cuDNN's
    algorithm search, median of many runs) and cached under the device's identity (GPU name, driver,
    onnxruntime version, provider) in the user's cost cache ($XDG_CACHE_HOME/subst/costs.db, else
    ~/.cache/subst/costs.db), so `subst optimize` and later runs measure nothing twice, whatever the store.
    A batch-1 run is bound by the host, whose speed drifts: the prediction is at the host's quick speed,
    and the whole-model measurement says how much slower the host was while it ran.

    \b
    Examples:
      subst profile resnet50.onnx                      # GPU if onnxruntime-gpu works here, else CPU
      subst profile bert.onnx --dim batch=1 --dim seq=128 --json
    """
    ortlog.set_verbose(verbose)
    dev = profiler.pick_device(device)
    t0 = time.perf_counter()
    sizes = parse_dims(dims)
    graph = onnx_io.load_model(model)
    onnx_io.check_dims(graph, sizes)
    graph = onnx_io.concretize(graph, sizes)
    db, uncached = cost_cache()
    model_cost = cost.CostModel(dev, db, refresh=refresh, measure_limit=measure_limit)
    bars = StageBars()
    try:
        predicted = model_cost.at_quick_host(
            model_cost.graph_cost(graph, progress=lambda done, units: bars.update("profiling units", done, units))
        )
    finally:
        bars.close()
    n_units = sum(u.count for u in predicted.units)
    measured = host = None
    if measure_model:
        with tempfile.TemporaryDirectory() as tmp:
            path = onnx_io.save_model(graph, Path(tmp) / "model.onnx")
            timing = cost.model_latency(str(path), graph, dev)
        measured, quick = timing.median_ms, model_cost.quick_reference_ms()
        host = timing.reference_ms / quick if timing.reference_ms and quick else None
    data = {
        "model": str(model),
        "device": dev.key,
        "units": n_units,
        "distinct_units": len(predicted.units),
        "measured_now": model_cost.measured,
        "from_cache": model_cost.cached,
        "estimated": predicted.estimated,
        "estimated_calibration": model_cost.calibration_estimated,
        "predicted_ms": predicted.total_ms,
        "measured_ms": measured,
        "error_pct": None if measured is None else 100 * (predicted.total_ms - measured) / measured,
        "host_slowdown": host,
        "seconds": time.perf_counter() - t0,
        "warnings": [f"{COSTS_NOT_CACHED}: {uncached}"] if uncached else [],
        "top": [
            {"unit": u.label, "ms": u.ms, "count": u.count, "estimated": u.estimated}
            for u in cost.cost_table(predicted.units, top)
        ],
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    lines = [
        f"device     {dev.key}",
        f"units      {n_units} ({len(predicted.units)} distinct): {model_cost.measured} measured now, "
        f"{model_cost.cached} from cache, {predicted.estimated} estimated"
        + ("; device calibration estimated (no time left to measure it)" if model_cost.calibration_estimated else ""),
        f"predicted  {predicted.total_ms:.4f} ms"
        + (f"   measured {measured:.4f} ms ({data['error_pct']:+.1f} %)" if measured else "")
        + (f"   host {host:.2f}x its quick run overhead meanwhile" if host else ""),
        *(f"warning    {w}" for w in data["warnings"]),
        "",
        f"{'unit':<40}{'ms each':>10}{'count':>7}{'total ms':>10}",
    ]
    for u in cost.cost_table(predicted.units, top):
        mark = " (estimated)" if u.estimated else ""
        lines.append(f"{u.label[:39]:<40}{u.ms:>10.4f}{u.count:>7}{u.ms * u.count:>10.4f}{mark}")
    click.echo("\n".join(lines))
