"""subst stacked on onnxruntime's transformers optimizer: every transformer of the corpus through
`onnxruntime.transformers.optimizer.optimize_model` on the CPU, then through `subst optimize` (the shipped cost
table, so nothing is measured), as a user who wants both runs them.

    nice python bench/bench_stacking.py                     # every transformer of the corpus
    nice python bench/bench_stacking.py --models bert_ts    # some of them

The optimizer's output is full of ops onnx does not know (com.microsoft's SkipLayerNormalization, BiasGelu,
Attention; SimplifiedLayerNormalization in the default domain): on a GPU, subst crashed on 8 of 13 such models
(issue 46). Each row: the model, the ops the optimizer wrote that onnx has no schema for, subst's exit, its check,
the rules it applied and its seconds; a traceback anywhere is a failure. Writes
bench/results/<today>/stacking-cpu.json (``--result``) after every model and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import onnx  # noqa: E402
from peers import TRANSFORMER_TYPES  # noqa: E402

COSTS = ROOT / "taso" / "cost" / "reference_costs.json"
FALLBACK = "bert"
"""The optimizer's model type tried where the family's fails (its GPT-2 post-processing indexes a Gemm's bias
that GPT-2 dynamo's Gemms lack): its generic fusions, so that subst still runs on what the optimizer writes."""
TRANSFORMERS = [n for n in corpus.NAMES if corpus.MANIFEST[n]["model"] in TRANSFORMER_TYPES]


def torch_stand_in() -> types.ModuleType:
    """What onnxruntime's transformers optimizer reads of torch, which it imports only to ask whether torch is a
    ROCm build, and reads that only for a GPU: lets it run for the CPU where torch is not installed."""
    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(hip=None)  # type: ignore[attr-defined]
    return torch


def ort_optimize(src: Path, dst: Path, model_type: str) -> None:
    """onnxruntime's transformers optimizer on ``src``, for the CPU, written to ``dst``."""
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.modules["torch"] = torch_stand_in()
    from onnxruntime.transformers.optimizer import optimize_model

    optimize_model(str(src), model_type=model_type, num_heads=0, hidden_size=0, use_gpu=False).save_model_to_file(
        str(dst)
    )


def unknown_ops(path: Path) -> dict[str, int]:
    """The ops of ``path`` onnx has no schema for (contrib ops, onnxruntime's own), by ``domain:op``."""
    nodes = onnx.load(str(path), load_external_data=False).graph.node
    return dict(Counter(f"{n.domain}:{n.op_type}" for n in nodes if not onnx.defs.has(n.op_type, n.domain)))


def stack(name: str, tmp: Path, timeout: float) -> dict:
    """One model through the optimizer, then subst: the table's row."""
    src, ort, out = tmp / f"{name}.onnx", tmp / f"{name}.ort.onnx", tmp / f"{name}.ort.subst.onnx"
    corpus.write(name, src)
    t0 = time.perf_counter()
    failed: list[str] = []
    for model_type in dict.fromkeys([TRANSFORMER_TYPES[corpus.MANIFEST[name]["model"]], FALLBACK]):
        try:
            ort_optimize(src, ort, model_type)
            break
        except Exception as e:  # the optimizer failing on a model is a row, not subst's failure
            failed.append(f"{model_type}: {type(e).__name__}: {e}"[:300])
    else:
        return {"model": name, "optimizer_error": "; ".join(failed)}
    row: dict = {"model": name, "model_type": model_type, "optimizer_failed": failed}
    row.update(optimizer_s=round(time.perf_counter() - t0, 1), written=unknown_ops(ort))
    dims = [f"--dim={k}={v}" for k, v in corpus.dims(name).items()]
    command = [sys.executable, "-m", "cli.main", "optimize", str(ort), "-o", str(out), "--costs", str(COSTS), *dims]
    t0 = time.perf_counter()
    try:
        done = subprocess.run([*command, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**row, "exit": None, "error": f"over {timeout:.0f} s"}
    row.update(exit=done.returncode, seconds=round(time.perf_counter() - t0, 1))
    row["traceback"] = "Traceback" in done.stderr
    try:
        report = json.loads(done.stdout)
        row.update(check=report["check"]["ok"], rules_applied=report["rules_applied"])
        row["nodes"] = [report["nodes_before"], report["nodes_after"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        row["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return row


def table(rows: list[dict]) -> list[str]:
    """The rows as a markdown table."""
    lines = [
        "| model | optimizer's ops onnx lacks | subst exit | check | rules applied | nodes | seconds |",
        "|---|---|---:|---|---:|---|---:|",
    ]
    for r in rows:
        if "optimizer_error" in r:
            lines.append(f"| {r['model']} | optimizer failed: {r['optimizer_error'][:80]} | - | - | - | - | - |")
            continue
        written = ", ".join(f"{k.lstrip(':')} {v}" for k, v in sorted(r["written"].items())) or "none"
        check = {True: "passed", False: "FAILED", None: "-"}[r.get("check")] if "error" not in r else r["error"][:80]
        rules = sum(a["count"] for a in r.get("rules_applied", {}).values())
        nodes = "{} -> {}".format(*r["nodes"]) if "nodes" in r else "-"
        model = r["model"]
        if r["optimizer_failed"]:
            model += f" (as {r['model_type']}: the optimizer failed as {r['optimizer_failed'][0].split(':')[0]})"
        lines.append(f"| {model} | {written} | {r.get('exit')} | {check} | {rules} | {nodes} | {r.get('seconds')} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(TRANSFORMERS), help="comma-separated corpus transformers")
    ap.add_argument("--timeout", type=float, default=900, help="seconds subst may take on one model")
    ap.add_argument("--result", type=Path, default=layout.result_path("stacking", "cpu"))
    args = ap.parse_args()
    record: dict = {"meta": layout.meta("cpu"), "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            record["rows"].append(stack(name, Path(tmp), args.timeout))
            for f in Path(tmp).iterdir():  # a model's files are not kept past its row: BERT's are 0.4 GB each
                f.unlink()
            record["table"] = table(record["rows"])
            layout.write(args.result, record)
            print(record["table"][-1], flush=True)
    print("\n".join(record["table"]))
    stacked = [r for r in record["rows"] if "optimizer_error" not in r]
    return 0 if all(r.get("exit") == 0 and r.get("check") and not r.get("traceback") for r in stacked) else 1


if __name__ == "__main__":
    sys.exit(main())
