"""`subst certify` on every corpus model's output, and what validating the pass steps costs `subst optimize`.

    PYTHONPATH=. python3 bench/bench_certify.py --what corpus
    PYTHONPATH=. python3 bench/bench_certify.py --models googlenet_ts,bert_dynamo,gpt2_dynamo --baseline /work/main --what cold

For each model (models/corpus/, seeded weights, costed at `corpus.dims`): `subst optimize` with the reference
cost table (nothing measured) and ``--certificate``, then `subst certify` of its output with that certificate;
each in a fresh process, timed wall to wall and in CPU seconds (the shared machine's load moves the wall times;
the CPU seconds move less). Records the steps by kind, the verdict and the seconds of the pass validations the
certificate lists. ``--baseline TREE`` runs optimize of that checkout too (without ``--certificate``, which it
may lack), model by model in turn with this tree: a before/after pair under one load. Writes the result after
every model (bench/results/<today>/certify-cpu-<what>.json) and prints a line per model. ``--planted`` plants a
wrong step in each model's output instead (a weight of the rewrite changed; that and the certificate made to
agree; a rule of the certificate swapped for one the store lacks) and records that certify fails each, naming it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from taso import onnx as onnx_io  # noqa: E402
from taso.optimize import steps  # noqa: E402

COSTS = ROOT / "taso" / "cost" / "reference_costs.json"


def _timed(cmd: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """``cmd`` run niced in a fresh process: its result, wall seconds and CPU seconds (user + system)."""
    before = os.times()
    t0 = time.perf_counter()
    done = subprocess.run(["nice", *cmd], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    return done, wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _optimize(tree: Path, model: Path, out: Path, extra: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    dims = [a for d, n in corpus.dims(model.stem).items() for a in ("--dim", f"{d}={n}")]
    python = tree / ".venv" / "bin" / "python"
    cmd = [str(python), "-m", "cli.main", "optimize", str(model), "-o", str(out), "--costs", str(COSTS), *dims]
    return _timed([*cmd, *extra], tree)


def one(name: str, tmp: Path, baseline: Path | None) -> dict:
    """Optimize ``name`` with a certificate, certify it; with ``baseline``, optimize it there too, first."""
    model, out, cert = tmp / f"{name}.onnx", tmp / f"{name}.opt.onnx", tmp / f"{name}.cert.json"
    corpus.write(name, model)
    row: dict = {"model": name}
    if baseline is not None:
        _, row["baseline_wall_s"], row["baseline_cpu_s"] = _optimize(baseline, model, tmp / "base.onnx", [])
    done, row["optimize_wall_s"], row["optimize_cpu_s"] = _optimize(ROOT, model, out, ["--certificate", str(cert)])
    if done.returncode != 0:
        return {**row, "error": done.stderr.strip().splitlines()[-1:]}
    steps = json.loads(cert.read_text())["steps"]
    kinds = [s["kind"] for s in steps]
    row |= {
        "steps": len(steps),
        "rule_steps": kinds.count("rules"),
        "pass_steps": kinds.count("pass"),
        "rules_applied": sum(r["count"] for s in steps for r in s["rules"]),
        "validation_s": sum(s["evidence"].get("seconds", 0.0) for s in steps),
        "declined": json.loads(cert.read_text())["declined"],
    }
    cmd = [sys.executable, "-m", "cli.main", "certify", str(model), str(out), "--certificate", str(cert), "--json"]
    done, row["certify_wall_s"], row["certify_cpu_s"] = _timed(cmd, ROOT)
    verdict = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    row |= {
        "exit": done.returncode,
        "verdict": "certified" if verdict.get("ok") else verdict.get("failure", done.stderr),
    }
    for f in (model, out, cert):
        f.unlink(missing_ok=True)
    return row


def _plant_weight(out: Path, cert: Path) -> None:
    """One element of the rewrite's largest initializer changed (the certificate left as it was)."""
    model = onnx.load(str(out))
    w = max(model.graph.initializer, key=lambda t: numpy_helper.to_array(t).size)
    array = numpy_helper.to_array(w).copy()
    array.flat[0] += 1
    w.CopyFrom(numpy_helper.from_array(array, w.name))
    onnx.save_model(model, str(out))


def _plant_agreeing(out: Path, cert: Path) -> None:
    """The weight changed, and the certificate's last step and output made to name the changed rewrite."""
    _plant_weight(out, cert)
    data = json.loads(cert.read_text())
    data["steps"][-1]["after"] = data["output"] = steps.digest(onnx_io.import_model(out)[0])
    cert.write_text(json.dumps(data))


def _plant_rule(out: Path, cert: Path) -> None:
    """The first rule the certificate lists swapped for an id the store lacks."""
    data = json.loads(cert.read_text())
    ruled = [s for s in data["steps"] if s["rules"]]
    if ruled:  # a rewrite by passes alone has no rule to swap: certify then passes it, as it should
        ruled[0]["rules"][0]["id"] = "0000000000"
    cert.write_text(json.dumps(data))


def planted(name: str, tmp: Path) -> dict:
    """``name`` optimized with its certificate, then each planting certified on a copy: exit code and failure."""
    model, out, cert = tmp / f"{name}.onnx", tmp / f"{name}.opt.onnx", tmp / f"{name}.cert.json"
    corpus.write(name, model)
    _optimize(ROOT, model, out, ["--certificate", str(cert)])
    row: dict = {"model": name, "steps": len(json.loads(cert.read_text())["steps"])}
    for plant in (_plant_weight, _plant_agreeing, _plant_rule):
        o, c = tmp / "planted.onnx", tmp / "planted.cert.json"
        shutil.copy(out, o)
        shutil.copy(cert, c)
        plant(o, c)
        cmd = [sys.executable, "-m", "cli.main", "certify", str(model), str(o), "--certificate", str(c), "--json"]
        done, _, _ = _timed(cmd, ROOT)
        verdict = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
        row[plant.__name__.removeprefix("_plant_")] = {"exit": done.returncode, "failure": verdict.get("failure")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(corpus.NAMES))
    ap.add_argument("--baseline", type=Path, help="Another checkout (with its .venv) to time optimize of too.")
    ap.add_argument("--planted", action="store_true", help="Plant wrong steps and certify those instead.")
    ap.add_argument("--what", default="corpus", help="The result's name: bench/results/<today>/certify-cpu-WHAT.json.")
    args = ap.parse_args()
    result, meta = layout.result_path("certify", "cpu", args.what), layout.meta()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-certify-") as tmp:
        for name in args.models.split(","):
            if args.planted:
                rows.append(planted(name, Path(tmp)))
                layout.write(result, {"meta": meta, "rows": rows})
                print(rows[-1], flush=True)
                continue
            rows.append({**one(name, Path(tmp), args.baseline), "load": os.getloadavg()[0]})
            layout.write(result, {"meta": meta, "rows": rows})
            r = rows[-1]
            print(
                f"{name:<22} steps {r.get('steps')} (rules {r.get('rule_steps')}, passes {r.get('pass_steps')}) "
                f"{r.get('verdict', r.get('error'))} optimize {r['optimize_wall_s']:.1f}s "
                f"(validation {r.get('validation_s', 0):.1f}s) certify {r.get('certify_wall_s', 0):.1f}s",
                flush=True,
            )


if __name__ == "__main__":
    main()
