"""End-to-end latency of the corpus of real exporter output (models/corpus/) before and after `subst optimize`,
beside onnxsim, onnxslim and, for transformers, onnxruntime's transformers optimizer and subst on its output.

    PYTHONPATH=. python3 bench/bench_corpus.py --device cuda --result $OUT/corpus-h100.json   # on the GPU machine
    PYTHONPATH=. python3 bench/bench_corpus.py --device cpu --models squeezenet1_1_ts --rounds 2

With ``--cuda-graph`` (CUDA only; issue 49) every variant is timed again under CUDA graph capture (onnxruntime's
``enable_cuda_graph``, io_binding on the GPU), in rounds of its own, and the table adds original, original +
graph, subst, subst + graph and the best peer + graph; a variant onnxruntime refuses to capture is named with its
error. ``--graph-made DIR`` also times DIR/<model>.onnx, subst's output made under capture on this device
(`bench_cold.py --cuda-graph --keep DIR`), as "subst_graph":

    PYTHONPATH=. python3 bench/bench_cold.py --device cuda --cold-only --keep $OUT/made
    PYTHONPATH=. python3 bench/bench_cold.py --device cuda --cold-only --cuda-graph --keep $OUT/made-graph
    PYTHONPATH=. python3 bench/bench_corpus.py --device cuda --cuda-graph --device-made $OUT/made \
        --graph-made $OUT/made-graph --result $OUT/corpus-graph-h200.json

Each model is optimized as the regression optimizes it (models/regress.py: the committed cost table, a search
bounded by its budget, so the same rewrites as on CI; ``--workers`` at a time, on the CPU), and each peer
(bench/peers.py) writes its version on the CPU too; once every model is prepared, the original, the original again (the run's noise
band), subst's output and each peer's are timed side by side in ``--rounds`` rounds, each opening fresh sessions
in another order, at batch 1 and sequences of 16 (`corpus.dims`). Writes
bench/results/<today>/corpus-<device>.json (``--result``) after every model and prints a table. Each row also
holds the speed-up each subst output's own run predicted (``predicted``: the regression's cost ratio, the report
`bench_cold.py --keep` keeps beside a device-made output) against the measured one (``prediction``, the made under
capture one timed under capture), and a last table flags a prediction off by more than 10 %.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import peers  # noqa: E402
import regress  # noqa: E402
from bench_cold import GIVEN, sizes  # noqa: E402

from taso import cost  # noqa: E402
from taso import onnx as onnx_io  # noqa: E402
from taso.cost import capture, profiler  # noqa: E402
from taso.errors import BadInput  # noqa: E402
from taso.execute import check  # noqa: E402
from taso.optimize import optimize  # noqa: E402
from taso.rules import store  # noqa: E402

SHORT = {
    "again": "again",
    "subst": "subst",
    "subst_device": "subst-dev",
    "onnxsim": "onnxsim",
    "onnxslim": "slim",
    "ort_transformers": "ort-tf",
    "ort_transformers+subst": "ort+subst",
    "subst_graph": "subst-cg",
}
"""Each variant's column in the table (speed-up over the original; "again" is the original timed twice; "subst" is
made as CI makes it, from the shipped table; "subst_device" is `subst optimize --device` on this device, as its user
runs it: measured costs and the end-to-end guard, made by `bench_cold.py --keep` and given as ``--device-made``;
"subst_graph" the same made with ``--cuda-graph``, given as ``--graph-made``)."""
PEERS = ("onnxsim", "onnxslim", "ort_transformers")
"""The peers, of which the best under capture is the issue-49 table's "best peer + graph"."""


def _prepare(
    name: str, tmp: Path, device_made: Path | None = None, graph_made: Path | None = None, given: str = ""
) -> dict:
    """subst's output as the regression makes it (costed at the ``given`` dims, `sizes`), each peer's, and subst
    on the transformers optimizer's."""
    t0 = time.perf_counter()
    try:
        row = regress.run_model(name, store.DEFAULT_PATH, tmp, sizes(name, given))
    except Exception as e:  # a model that fails is a row of the table, not the end of the run
        return {"error": f"{type(e).__name__}: {e}"[:500], "optimize_s": round(time.perf_counter() - t0, 1)}
    row["optimize_s"] = round(time.perf_counter() - t0, 1)
    src = tmp / f"{name}.onnx"
    variants = {"original": src, "again": src, "subst": tmp / f"{name}.opt.onnx"}
    if device_made is not None and (device_made / f"{name}.onnx").exists():
        variants["subst_device"] = device_made / f"{name}.onnx"
    if graph_made is not None and (graph_made / f"{name}.onnx").exists():
        variants["subst_graph"] = graph_made / f"{name}.onnx"
    predicted = {"subst": 1 / row["cost_ratio"]}
    for variant, made in (("subst_device", device_made), ("subst_graph", graph_made)):
        if variant in variants and (made / f"{name}.report.json").exists():
            predicted[variant] = _predicted(made / f"{name}.report.json")
    row["predicted"] = predicted
    variants.update(peers.peers(src, tmp, name, corpus.MANIFEST[name]["model"]))
    if "ort_transformers" in variants:
        both = tmp / f"{name}.ort_transformers.opt.onnx"
        settings = replace(regress.SETTINGS, dims=sizes(name, given))
        try:
            optimize(variants["ort_transformers"], both, store.DEFAULT_PATH, settings=settings)
            variants["ort_transformers+subst"] = both
        except Exception as e:
            print(f"subst on ort_transformers failed on {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    return {**row, "variants": {k: str(v) for k, v in variants.items()}, "unchanged": _unchanged(variants)}


def _predicted(report: Path) -> float:
    """The speed-up the `subst optimize` run of a report (``--report`` JSON, kept beside its output by `bench_cold.py
    --keep`) predicted for what it wrote: its costs before over after, 1 where the guard kept the original."""
    r = json.loads(report.read_text())
    cost = r.get("cost") or {}
    if not cost or (cost.get("measured") or {}).get("kept_original"):
        return 1.0
    return cost["before_ms"] / cost["after_ms"]


PREDICTED = (("subst", "ms"), ("subst_device", "ms"), ("subst_graph", "ms_graph"))
"""The outputs whose predicted speed-up is compared with the measured one, and the timings that measure it: the
table-made output and the device-made one without capture, the one made under capture with it."""
OFF = 0.10
"""A prediction off by more than this (measured over predicted) is flagged."""


def predictions(row: dict) -> dict[str, dict[str, float]]:
    """Per output of ``row``, its run's predicted speed-up, the measured one (over the original timed alike) and
    how far off the prediction is (measured / predicted - 1)."""
    out = {}
    for variant, timings in PREDICTED:
        ms = row.get(timings) or {}
        predicted = (row.get("predicted") or {}).get(variant)
        if predicted and variant in ms and "original" in ms:
            measured = ms["original"] / ms[variant]
            out[variant] = {"predicted": predicted, "measured": measured, "off": measured / predicted - 1}
    return out


def prediction_table(rows: list[dict]) -> list[str]:
    """Predicted against measured speed-up per model and output (`predictions`), ``!`` on one off by more than
    `OFF`, then how many predictions hold per output."""
    lines = [f"{'model':<26}" + "".join(f"{SHORT[v] + ' pred/meas':>22}" for v, _ in PREDICTED)]
    held: dict[str, list[bool]] = {v: [] for v, _ in PREDICTED}
    for r in rows:
        p = r.get("prediction") or {}
        if not p:
            continue
        cells = []
        for v, _ in PREDICTED:
            if v not in p:
                cells.append(f"{'-':>22}")
                continue
            off = abs(p[v]["off"]) > OFF
            held[v].append(not off)
            cells.append(f"{p[v]['predicted']:.3f}/{p[v]['measured']:.3f}{'!' if off else ' '}".rjust(22))
        lines.append(f"{r['model']:<26}" + "".join(cells))
    for v, ok in held.items():
        if ok:
            lines.append(f"predictions of {v} within {OFF:.0%}: {sum(ok)} of {len(ok)}")
    return lines


def _unchanged(variants: dict[str, Path]) -> list[str]:
    """The variants that are the original model itself (the guard kept it, or a peer changed nothing): timing one
    is timing the original against itself again, a draw of the run's noise band like "again"."""
    digest = _digest(variants["original"])
    return [k for k, p in variants.items() if k not in ("original", "again") and _digest(p) == digest]


def _digest(path: Path) -> str | None:
    """The graph digest of the model at ``path``; None where subst cannot read it (ORT's transformers optimizer
    writes its contrib ops into the default domain: onnx refuses such a model, onnxruntime runs it)."""
    try:
        return cost.graph_digest(onnx_io.load_model(path))
    except BadInput:
        return None


def time_variants(
    name: str,
    variants: dict[str, str],
    device: profiler.Device,
    rounds: int,
    mode: profiler.Mode = profiler.DEFAULT_MODE,
    dims: dict[str, int] | None = None,
) -> dict[str, float]:
    """Median over rounds of each variant's median latency in ms, each session set up as ``mode`` says, fed at
    ``dims`` (default: the corpus model's, `corpus.dims`)."""
    dims = corpus.dims(name) if dims is None else dims
    feeds = check.random_inputs(onnx_io.load_model(variants["original"]), seed=0, dims=dims)
    runs = [(path, feeds) for path in variants.values()]
    per: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        first = r % len(runs)
        timed = profiler.time_models(runs[first:] + runs[:first], device, mode, warmup=20, samples=40)
        for i, t in enumerate(timed):
            per[(first + i) % len(runs)].append(t.median_ms)
    return {k: statistics.median(v) for k, v in zip(variants, per)}


def time_captured(
    name: str, variants: dict[str, str], device: profiler.Device, rounds: int, dims: dict[str, int] | None = None
) -> tuple[dict[str, float], dict[str, str]]:
    """The variants CUDA graphs capture timed under capture (`time_variants`), and why onnxruntime refused the
    others (a node on the CPU provider, a Memcpy): one refusal must not cost the whole model its row."""
    dims = corpus.dims(name) if dims is None else dims
    feeds = check.random_inputs(onnx_io.load_model(variants["original"]), seed=0, dims=dims)
    captured, refused = {}, {}
    for k, path in variants.items():
        try:  # onnxruntime may turn capture off itself and run as without: timed so, it would pass for captured
            if capture.replays(path, feeds, device):
                captured[k] = path
            else:
                refused[k] = capture.NOT_REPLAYED
        except Exception as e:  # onnxruntime raises its own exception types
            refused[k] = f"{type(e).__name__}: {e}"[:300]
    timed = time_variants(name, captured, device, rounds, capture.CAPTURE, dims) if "original" in captured else {}
    return timed, refused


def graph_table(rows: list[dict]) -> list[str]:
    """Issue 49's table from the rows timed with and without capture: per model, speed-ups over the original
    without capture of the original + graph, subst, subst + graph and the best peer + graph, then the geomeans
    that matter: capture alone, and subst + graph (and the best peer + graph) over the original + graph."""
    subst = ("subst_graph", "subst_device", "subst")
    lines = [f"{'model':<26}{'orig ms':>9}{'orig+cg':>9}{'subst':>9}{'subst+cg':>9}{'peer+cg':>9}  subst+cg made by"]
    ratios: dict[str, list[float]] = {"capture alone": [], "subst+cg over orig+cg": [], "peer+cg over orig+cg": []}
    for r in rows:
        graph = r.get("ms_graph") or {}
        if "ms" not in r or "original" not in graph:
            continue
        made = next((k for k in subst if k in graph), None)
        peer = min((graph[k] for k in PEERS if k in graph), default=None)
        base, cg = r["ms"]["original"], graph["original"]
        cells = [
            base / cg,
            base / r["ms"]["subst"],
            base / graph[made] if made else None,
            base / peer if peer else None,
        ]
        lines.append(
            f"{r['model']:<26}{base:>9.3f}" + "".join(f"{c:>9.3f}" if c else f"{'-':>9}" for c in cells) + f"  {made}"
        )
        ratios["capture alone"].append(base / cg)
        if made:
            ratios["subst+cg over orig+cg"].append(cg / graph[made])
        if peer:
            ratios["peer+cg over orig+cg"].append(cg / peer)
    for what, rs in ratios.items():
        if rs:
            lines.append(f"geomean {what}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over {len(rs)} models")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=",".join(corpus.NAMES))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/corpus-<device>.json)")
    ap.add_argument(
        "--device-made",
        type=Path,
        metavar="DIR",
        help="also time DIR/<model>.onnx, subst's output made on this device (bench_cold.py --keep DIR)",
    )
    ap.add_argument("--cuda-graph", action="store_true", help="also time every variant under CUDA graph capture")
    ap.add_argument(
        "--graph-made",
        type=Path,
        metavar="DIR",
        help="also time DIR/<model>.onnx, made under capture on this device (bench_cold.py --cuda-graph --keep DIR)",
    )
    ap.add_argument(
        "--dim",
        default="",
        metavar="NAME=SIZE,...",
        help="cost and time each model with these dims where it has them (default: batch 1, sequences of 16)",
    )
    args = ap.parse_args()
    if not GIVEN.fullmatch(args.dim):
        print(f"bench_corpus: --dim {args.dim!r}: NAME=SIZE,... expected (sizes positive)", file=sys.stderr)
        return 2
    device = profiler.pick_device(args.device)
    if args.cuda_graph and not device.is_cuda:
        print("bench_corpus: --cuda-graph: CUDA graphs need --device cuda", file=sys.stderr)
        return 2
    result = args.result or layout.result_path("corpus", device.key)
    names = [n for n in args.models.split(",") if n]
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        # every model is prepared before any is timed: a batch-1 latency is bound by the host, and timing beside
        # workers still optimizing on its cores measured BERT dynamo's original and every variant up to 1.75x slow
        with ProcessPoolExecutor(args.workers) as pool:
            jobs = {n: pool.submit(_prepare, n, tmp, args.device_made, args.graph_made, args.dim) for n in names}
            prepared = {n: job.result() for n, job in jobs.items()}
        for name in names:
            row = {**corpus.MANIFEST[name], "model": name, "sizes": sizes(name, args.dim), **prepared[name]}
            if "error" not in row and row.get("check_ok"):
                try:
                    row["ms"] = time_variants(name, row["variants"], device, args.rounds, dims=sizes(name, args.dim))
                except Exception as e:  # one variant onnxruntime cannot run on the device: its error is the row
                    row["error"] = f"timing: {type(e).__name__}: {e}"[:500]
            if "ms" in row and args.cuda_graph:
                try:
                    row["ms_graph"], row["graph_refused"] = time_captured(
                        name, row["variants"], device, args.rounds, sizes(name, args.dim)
                    )
                except Exception as e:
                    row["graph_error"] = f"timing under capture: {type(e).__name__}: {e}"[:500]
            if "ms" in row:
                row["speedup"] = {k: row["ms"]["original"] / v for k, v in row["ms"].items()}
                row["prediction"] = predictions(row)
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("model", "cost_ratio", "speedup", "rules", "error")}), flush=True)
            layout.write(result, {"meta": layout.meta(device.key), "device": device.key, "rows": rows})
            for f in tmp.glob(f"{name}.*"):
                f.unlink()
    print(f"\ndevice {device.key}")
    print(f"{'model':<26}{'orig ms':>9}" + "".join(f"{c:>10}" for c in SHORT.values()) + f"{'pred':>7}  rules")
    for r in rows:
        if "ms" not in r:
            print(f"{r['model']:<26}  not timed: {r.get('error') or r.get('check')}")
            continue
        cells = "".join(f"{r['speedup'][c]:>10.3f}" if c in r["speedup"] else f"{'-':>10}" for c in SHORT)
        rules = ", ".join(f"{k} x{v['count']}" for k, v in sorted(r["rules"].items())) or "none"
        print(f"{r['model']:<26}{r['ms']['original']:>9.3f}{cells}{1 / r['cost_ratio']:>7.3f}  {rules}")
    for column in SHORT:
        timed = [r["speedup"][column] for r in rows if column in r.get("speedup", {})]
        if timed:
            print(f"geomean {column}: {math.exp(sum(map(math.log, timed)) / len(timed)):.3f}x over {len(timed)} models")
    if args.cuda_graph:
        print("\nunder CUDA graph capture (speed-ups over the original without it)")
        print("\n".join(graph_table(rows)))
    print(f"\npredicted against measured speed-up (! off by more than {OFF:.0%})")
    print("\n".join(prediction_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
