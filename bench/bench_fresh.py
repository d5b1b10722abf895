"""`subst optimize` on real exports of architectures outside the corpus, as its user runs it on the device: a
check that what works on the corpus (models/corpus/, which the project was developed on) works on models it never
saw, as the judged set is (torchvision, timm and transformers families, TorchScript and dynamo exports, batch 1).

    PYTHONPATH=/tmp/site:$PWD python3 bench/bench_fresh.py --device cuda --cuda-graph --timeout 120 \
        --stop-after 420 --result $OUT/fresh-h200.json                      # on the GPU machine: a first slice
    cp fresh-prev.json $OUT/fresh-h200.json && PYTHONPATH=/tmp/site:$PWD python3 bench/bench_fresh.py \
        --device cuda --cuda-graph --timeout 120 --stop-after 420 --resume --result $OUT/fresh-h200.json  # the rest
    python bench/bench_fresh.py --device cpu --models albert --exporters dynamo --rounds 1

Each of `ARCHS` is built from its config with random weights (no network) and exported by torch.onnx's
TorchScript exporter (``ts``) and its dynamo exporter, with a dynamic batch (and sequence) dim as
models/export_corpus.py exports the corpus (``--static``: at batch 1, no dynamic dims). An entry that fails to build
or export, or runs past ``--timeout``, is a row saying why. Then, for each export: `subst optimize --device`, cold
(a fresh per-user cache) in a fresh process, costed at batch 1 and sequences of 16 (its exit code, wall time and
``--json`` report kept); onnxsim's, onnxslim's and, for transformers, onnxruntime's transformers optimizer's
versions (bench/peers.py); and the original, the original again (the run's noise band), subst's output and each
peer's timed side by side as bench_corpus.py times them (``--cuda-graph``: again under CUDA graph capture). Export,
peers and timing each run in a process of their own, killed past ``--timeout``: a hang or a crash in torch or
onnxruntime costs one row, not the run. The torch part is `export_one`, run only in its own process.

Writes bench/results/<today>/fresh-<device>.json (``--result``) after every entry; ``--resume`` keeps the entries
it has and runs the rest, and ``--stop-after S`` starts no entry past S seconds, so a machine lent in 10-minute
calls runs the list over a few calls (steps still running at S + ``--timeout`` are stopped: the run ends by
then). Prints a table: exit and check of the CLI, its cold seconds, and speed-ups over the original of subst's
output and the best peer's, and of subst's over the best peer's.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import peers  # noqa: E402
from bench_cold import optimize_cli  # noqa: E402
from bench_corpus import PEERS, time_captured, time_variants  # noqa: E402
from child import in_child  # noqa: E402

from taso.cost import profiler  # noqa: E402
from taso.errors import BadInput  # noqa: E402


@dataclass(frozen=True)
class Arch:
    """One architecture to export: where it comes from and the example input it is exported at."""

    name: str
    source: str
    """"timm", "torchvision" or "transformers"."""
    ident: str
    """Its name there: timm's or torchvision's model name, transformers' ``model_type``."""
    shape: tuple[int, ...] = (3, 224, 224)
    """The example input's shape after its batch dim; one dim: token ids (dynamic in batch and sequence)."""
    config: dict[str, Any] = field(default_factory=dict)
    """transformers: the config's fields (small sizes); torchvision: the builder's keyword arguments."""
    family: str = ""
    """The corpus family (`peers.TRANSFORMER_TYPES`) whose fusions ORT's transformers optimizer tries; none: not run."""


ENCODER = {"num_hidden_layers": 4, "hidden_size": 384, "num_attention_heads": 6, "intermediate_size": 1536}
DECODER = {
    "num_hidden_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "intermediate_size": 1376,
    "use_cache": False,  # as export_corpus.py's decoders: the hidden state alone, no key-value cache to export
}
TOKENS = (16,)

ARCHS: tuple[Arch, ...] = (
    Arch("efficientformer_l1", "timm", "efficientformer_l1"),
    Arch("albert", "transformers", "albert", TOKENS, {**ENCODER, "embedding_size": 128}, "bert"),
    Arch("regnet_x_400mf", "torchvision", "regnet_x_400mf"),
    Arch(
        "mistral",
        "transformers",
        "mistral",
        TOKENS,
        {**DECODER, "num_key_value_heads": 2, "vocab_size": 32000},
        "llama",
    ),
    Arch("levit_128s", "timm", "levit_128s"),
    Arch("electra", "transformers", "electra", TOKENS, {**ENCODER, "embedding_size": 128}, "bert"),
    Arch("ghostnet_100", "timm", "ghostnet_100"),
    Arch(
        "ast",
        "transformers",
        "audio-spectrogram-transformer",
        (256, 128),
        {
            "num_hidden_layers": 4,
            "hidden_size": 192,
            "num_attention_heads": 3,
            "intermediate_size": 768,
            "max_length": 256,
        },
        "vit_b_16",
    ),
    Arch("poolformerv2_s12", "timm", "poolformerv2_s12"),
    Arch("phi", "transformers", "phi", TOKENS, {**DECODER, "vocab_size": 32000}, "gpt2"),
    Arch("mobilevitv2_050", "timm", "mobilevitv2_050", (3, 256, 256)),
    Arch(
        "deberta_v2",
        "transformers",
        "deberta-v2",
        TOKENS,
        {**ENCODER, "relative_attention": True, "pos_att_type": ["p2c", "c2p"], "position_biased_input": False},
        "bert",
    ),
    Arch("mnasnet1_0", "torchvision", "mnasnet1_0"),
    Arch(
        "gpt_neo",
        "transformers",
        "gpt_neo",
        TOKENS,  # its config refuses layer counts its attention pattern (global, local) x N does not give
        {
            "num_layers": 4,
            "hidden_size": 256,
            "num_heads": 8,
            "attention_types": [[["global", "local"], 2]],
            "use_cache": False,
        },
        "gpt2",
    ),
    Arch("edgenext_xx_small", "timm", "edgenext_xx_small", (3, 256, 256)),
    Arch("dinov2", "transformers", "dinov2", (3, 224, 224), {**ENCODER, "patch_size": 14}, "vit_b_16"),
    Arch("fastvit_t8", "timm", "fastvit_t8", (3, 256, 256)),
    Arch("mpnet", "transformers", "mpnet", TOKENS, ENCODER, "bert"),
    Arch("gmlp_s16", "timm", "gmlp_s16_224"),
    Arch(
        "bloom",
        "transformers",
        "bloom",
        TOKENS,
        {"n_layer": 4, "hidden_size": 256, "n_head": 8, "vocab_size": 32000, "use_cache": False},
        "gpt2",
    ),
    Arch("coat_lite_tiny", "timm", "coat_lite_tiny"),
    Arch("efficientnet_v2_s", "torchvision", "efficientnet_v2_s"),
)
"""Architectures outside the corpus (none of its families), interleaved vision and text so a first slice of the
list already spans both: hybrid conv-attention, MLP-only and re-parameterizable CNNs, encoders, small decoders,
an audio transformer. The decoders' TorchScript exports are expected to fail as the corpus's do (aten::diff)."""
BY_NAME = {a.name: a for a in ARCHS}
EXPORTERS = ("ts", "dynamo")


def dim_names(arch: Arch) -> list[str]:
    """The symbolic dims an export of ``arch`` is asked for: batch, and sequence for token ids."""
    return ["batch", "seq"] if len(arch.shape) == 1 else ["batch"]


# ---- the torch part: runs only in a process of its own (`in_child`) ----------------------------------------------


def export_one(name: str, exporter: str, path: str, static: bool, keep: str | None = None) -> dict:
    """Build architecture ``name`` at random init and export it to ``path``: the dims it stayed dynamic in,
    its opset and node count, the seconds the export took and the versions that made it. With ``keep`` (a
    folder), a copy with its weights stripped as the corpus keeps its models (`corpus.fill` makes them again) is
    written there too: the machine that exports has torch, the one that develops has not."""
    import export_corpus
    import onnx
    import torch

    arch = BY_NAME[name]
    torch.manual_seed(0)
    if arch.source == "timm":
        module, x = export_corpus.timm_model(arch.ident, arch.shape[-1])()
    elif arch.source == "torchvision":
        module, x = export_corpus.vision(arch.ident, arch.shape[-1], **arch.config)()
    else:
        import transformers as tf

        config = tf.AutoConfig.for_model(arch.ident, **arch.config)
        module = export_corpus.Hidden(tf.AutoModel.from_config(config))
        x = torch.randint(0, 1000, (2, *arch.shape)) if len(arch.shape) == 1 else torch.randn(2, *arch.shape)
    module.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        dims = export_corpus.export(
            module, x[:1] if static else x, exporter, [] if static else dim_names(arch), Path(path)
        )
    proto = onnx.load(path)
    if keep:
        stripped = onnx.load(path)
        export_corpus.strip(stripped)
        onnx.save(stripped, str(Path(keep) / Path(path).name))
    return {
        "dims": dims,
        "opset": next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
        "nodes": len(proto.graph.node),
        "export_s": round(time.perf_counter() - t0, 1),
        "versions": {m: sys.modules[m].__version__ for m in ("torch", "onnx", arch.source) if m in sys.modules},
    }


# ---- the driver ---------------------------------------------------------------------------------------------------


def _peers(src: str, tmp: str, name: str, family: str) -> dict:
    """Each peer's version of ``src`` (bench/peers.py), by peer name."""
    return {k: str(v) for k, v in peers.peers(Path(src), Path(tmp), name, family).items()}


def _time(variants: dict[str, str], dims: dict[str, int], device: str, rounds: int, graph: bool) -> dict:
    """Each variant's latency in ms as bench_corpus.py times it, and under CUDA graph capture with ``graph``."""
    dev = profiler.pick_device(device)
    out: dict[str, Any] = {"ms": time_variants("", variants, dev, rounds, dims=dims)}
    if graph:
        out["ms_graph"], out["graph_refused"] = time_captured("", variants, dev, rounds, dims=dims)
    return out


def step_time(timeout: float, end: float | None) -> float:
    """Seconds the next step may take: ``timeout``, cut to what is left before ``end`` (a `time.perf_counter`
    time; None: no end) so that a device call ends in time, but at least a second: the step is tried, and its
    row says it ran out."""
    return timeout if end is None else max(1.0, min(timeout, end - time.perf_counter()))


def measure(
    name: str,
    src: Path,
    dims: dict[str, int],
    family: str,
    work: Path,
    args: argparse.Namespace,
    end: float | None = None,
) -> dict:
    """One exported model: `subst optimize` cold as its user runs it, the peers' versions, and all of them timed
    against the original (a failed step is recorded and the others still run), each step within `step_time`."""
    out = work / f"{name}.subst.onnx"
    run, report = optimize_cli(src, out, work / "cache", args.device, step_time(args.timeout, end), dims)
    if report is not None:
        report.pop("certificate", None)  # every step's evidence: most of the bytes, and `subst certify`'s matter
    check = (report or {}).get("check") or {}
    row: dict[str, Any] = {"dims": dims, "optimize": run, "check_ok": check.get("ok"), "report": report}
    variants = {"original": str(src), "again": str(src)}
    if run["exit"] == 0 and out.exists():
        variants["subst"] = str(out)
    made = in_child(_peers, (str(src), str(work), name, family), step_time(args.timeout, end))
    if "error" in made:
        row["peers_error"] = made.pop("error")
    variants.update(made)
    row["variants"] = sorted(variants)
    timing = (variants, dims, args.device, args.rounds, args.cuda_graph)
    timed = in_child(_time, timing, step_time(args.timeout, end))
    if "error" in timed:
        row["timing_error"] = timed.pop("error")
    row.update(timed)
    if "ms" in row:
        row["speedup"] = {k: row["ms"]["original"] / v for k, v in row["ms"].items()}
    return row


def pending(entries: list[tuple[Arch, str]], rows: list[dict]) -> list[tuple[Arch, str]]:
    """The entries no row of an earlier call records yet (`--resume`)."""
    done = {r["model"] for r in rows}
    return [(a, e) for a, e in entries if f"{a.name}_{e}" not in done]


def _best_peer(ms: dict[str, float]) -> float | None:
    return min((ms[k] for k in PEERS if k in ms), default=None)


def _geomean(xs: list[float]) -> str:
    return f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f}x over {len(xs)}" if xs else "none"


def table(rows: list[dict]) -> list[str]:
    """Per row: exporter, the CLI's exit, check and cold seconds, speed-ups over the original of subst's output
    and of the best peer's, subst's over the best peer's (and the same under capture, where timed); then the
    geomeans and how many rows got how far."""
    lines = [
        f"{'model':<22}{'exporter':<9}{'exit':>5}{'check':>7}{'cold s':>8}{'subst':>8}{'peer':>8}{'s/peer':>8}"
        f"{'cg orig':>9}{'cg subst':>9}{'cg peer':>9}"
    ]
    ratios: dict[str, list[float]] = {k: [] for k in ("subst", "peer", "subst/peer", "cg subst", "cg peer")}
    for r in rows:
        arch, exporter = r["model"].rsplit("_", 1)
        if "optimize" not in r:
            lines.append(f"{arch:<22}{exporter:<9}  skipped: {r.get('skipped', '')[:100]}")
            continue
        ms, graph = r.get("ms") or {}, r.get("ms_graph") or {}
        peer, cg_peer = _best_peer(ms), _best_peer(graph)
        cells: dict[str, float | None] = {
            "subst": ms["original"] / ms["subst"] if "subst" in ms else None,
            "peer": ms["original"] / peer if peer else None,
            "subst/peer": peer / ms["subst"] if peer and "subst" in ms else None,
            "cg orig": ms["original"] / graph["original"] if "original" in graph else None,
            "cg subst": graph["original"] / graph["subst"] if "subst" in graph else None,
            "cg peer": graph["original"] / cg_peer if cg_peer else None,
        }
        for k, v in cells.items():
            if k in ratios and v is not None:
                ratios[k].append(v)
        check = {True: "ok", False: "FAIL", None: "-"}[r.get("check_ok")]
        run = r["optimize"]
        widths = (8, 8, 8, 9, 9, 9)
        lines.append(
            f"{arch:<22}{exporter:<9}{run['exit']!s:>5}{check:>7}{run['wall_s']:>8.1f}"
            + "".join(f"{v:>{w}.3f}" if v else f"{'-':>{w}}" for w, v in zip(widths, cells.values(), strict=True))
            + (f"  {run['error'][:60]}" if "error" in run else "")
        )
    lines.append(
        f"{len(rows)} entries: {sum('optimize' in r for r in rows)} exported, "
        f"{sum((r.get('optimize') or {}).get('exit') == 0 for r in rows)} optimized (exit 0), "
        f"{sum(r.get('check_ok') is True for r in rows)} checked ok, {sum('ms' in r for r in rows)} timed"
    )
    lines += [f"geomean {k}: {_geomean(v)}" for k, v in ratios.items()]
    return lines


def export_all(
    todo: list[tuple[Arch, str]],
    rows: list[dict],
    result: Path,
    device: str,
    keep: str | None,
    args: argparse.Namespace,
    end: float | None,
) -> int:
    """`--export-only`: each entry exported (each in a process of its own, ``--jobs`` at a time), its row the
    export's record or why it failed, the result written after every entry."""
    lock = threading.Lock()

    def one(entry: tuple[Arch, str], tmp: str) -> None:
        arch, exporter = entry
        name = f"{arch.name}_{exporter}"
        src = Path(tmp) / f"{name}.onnx"
        t0 = time.perf_counter()
        row: dict[str, Any] = {"model": name, "arch": arch.name, "source": arch.source, "exporter": exporter}
        row["export"] = in_child(
            export_one, (arch.name, exporter, str(src), args.static, keep), step_time(args.timeout, end)
        )
        row["entry_s"] = round(time.perf_counter() - t0, 1)
        src.unlink(missing_ok=True)
        with lock:
            rows.append(row)
            layout.write(result, {"meta": layout.meta(device), "device": device, "static": args.static, "rows": rows})
            print(f"{name:<32}{row['export'].get('error', 'exported')[:90]} ({row['entry_s']} s)", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda e: one(e, tmp), todo))
    print(f"{sum('error' not in r['export'] for r in rows)} of {len(rows)} exported; wrote {result}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--models", help=f"comma-separated names of ARCHS (default all: {','.join(BY_NAME)})")
    ap.add_argument("--exporters", default=",".join(EXPORTERS), help="comma-separated: ts, dynamo")
    ap.add_argument("--static", action="store_true", help="export at batch 1 with no dynamic dims")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds each step of an entry may take")
    ap.add_argument("--cuda-graph", action="store_true", help="also time every variant under CUDA graph capture")
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/fresh-<device>.json)")
    ap.add_argument("--resume", action="store_true", help="keep the entries already in --result; run the rest")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="also write each export, weights stripped, to DIR")
    ap.add_argument(
        "--export-only",
        action="store_true",
        help="only export (and --keep) each entry, --jobs at a time: the exports for work on a machine without torch",
    )
    ap.add_argument("--jobs", type=int, default=1, help="exports at a time with --export-only")
    ap.add_argument(
        "--stop-after",
        type=float,
        metavar="S",
        help="start no entry after S seconds, and stop every step at S + --timeout: the run ends by then",
    )
    args = ap.parse_args(argv)
    started = time.perf_counter()
    names = args.models.split(",") if args.models else list(BY_NAME)
    exporters = args.exporters.split(",")
    unknown = [n for n in names if n not in BY_NAME] + [e for e in exporters if e not in EXPORTERS]
    if unknown:
        print(f"bench_fresh: unknown model or exporter: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.cuda_graph and args.device != "cuda":
        print("bench_fresh: --cuda-graph: CUDA graphs need --device cuda", file=sys.stderr)
        return 2
    try:
        device = profiler.pick_device(args.device).key
    except BadInput as e:  # --device cuda where onnxruntime's CUDA provider does not load
        print(f"bench_fresh: {e}", file=sys.stderr)
        return 2
    result = args.result or layout.result_path("fresh", device)
    rows: list[dict] = []
    if args.resume and result.exists():
        try:
            rows = json.loads(result.read_text())["rows"]
        except (ValueError, KeyError) as e:
            print(f"bench_fresh: --resume: {result} is no result of this bench ({e})", file=sys.stderr)
            return 2
    end = None if args.stop_after is None else started + args.stop_after + args.timeout
    todo = pending([(BY_NAME[n], e) for n in names for e in exporters], rows)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    keep = str(args.keep) if args.keep else None
    if args.export_only:
        return export_all(todo, rows, result, device, keep, args, end)
    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp:
        for arch, exporter in todo:
            if args.stop_after is not None and time.perf_counter() - started > args.stop_after:
                print(f"stopped after {args.stop_after:g} s: --resume runs the rest", flush=True)
                break
            name = f"{arch.name}_{exporter}"
            work = Path(tmp) / name
            work.mkdir()
            src = work / f"{name}.onnx"
            row: dict[str, Any] = {"model": name, "arch": arch.name, "source": arch.source, "exporter": exporter}
            t0 = time.perf_counter()
            exporting = (arch.name, exporter, str(src), args.static, keep)
            row["export"] = in_child(export_one, exporting, step_time(args.timeout, end))
            if "error" in row["export"]:
                row["skipped"] = f"export: {row['export']['error']}"
            else:
                row |= measure(name, src, corpus.sizes(row["export"]["dims"]), arch.family, work, args, end)
            row["entry_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            layout.write(result, {"meta": layout.meta(device), "device": device, "static": args.static, "rows": rows})
            print(table([row])[1], flush=True)
            shutil.rmtree(work)
    print(f"\ndevice {device}\n" + "\n".join(table(rows)))
    print(f"wrote {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
