"""Target-directed generation, per shipped target: spellings generated, rules paired by fingerprint and proved,
time and peak memory on local processes and on Ray (identical rules?), and which spellings occur in the corpus.

    PYTHONPATH=. python bench/bench_target.py                       # every target of specs/targets.toml
    PYTHONPATH=. python bench/bench_target.py --targets gelu,softmax --no-ray

Each target runs as ``subst generate --target NAME --json`` in a process of its own (``peak_rss_mb``: the
largest resident set of that process and its workers, by GNU time's %M) into a fresh store, which ``subst verify`` then decides (real z3). For the corpus
(models/corpus/, weights filled by models/corpus.py at its dims) the target's spellings are generated again on a
[2, 3, 4] input (the rank of a transformer's activations; the matcher binds sizes) and matched with
`taso.rules.match.find_matches`; a match counts only where every constant of the spelling binds a model
constant of the same value (the matcher itself does not compare constants). Writes
bench/results/<today>/target-cpu.json.

    PYTHONPATH=. python bench/bench_target.py --attention --no-ray    # the MultiHeadAttention targets

With --attention: every target of MultiHeadAttention, generated on 1 and on 2 workers (and Ray) with identical
rules required, proved into a fresh store, and each hand-written rule of tests/data/attention-hand-written.rules found or
not (`bench/found.py`); the corpus is matched at the targets' own 4-D inputs. Writes
bench/results/<today>/target-attention.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "models")]

import corpus  # noqa: E402
import layout  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from found import findings  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from taso.generate import LocalExecutor  # noqa: E402
from taso.generate.target import generate_target  # noqa: E402
from taso.generate.targets import SHIPPED, Target, load_targets  # noqa: E402
from taso.ir import Graph, format_graph, parse_graph  # noqa: E402
from taso.onnx import concretize, load_model  # noqa: E402
from taso.rules import Rule, parse_rules, store  # noqa: E402
from taso.rules.match import Census, find_matches  # noqa: E402


def _cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"subst {' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def _generate(name: str, executor: str, workers: int, tmp: Path) -> tuple[dict, list[str]]:
    """One run of ``subst generate --target``: its summary (with the largest RSS of it or a worker) and the
    source texts of the rules it stored."""
    db = tmp / f"{name}-{executor}-{workers}.db"
    cmd = [
        "generate",
        "--target",
        name,
        "--store",
        str(db),
        "--workers",
        str(workers),
        "--executor",
        executor,
        "--json",
    ]
    start = time.perf_counter()
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "cli.main", *cmd], capture_output=True, text=True, cwd=ROOT
    )
    if out.returncode != 0:
        raise SystemExit(f"subst {' '.join(cmd)}: {out.stderr.strip()}")
    (summary,) = json.loads(out.stdout)["targets"]
    summary["wall_s"] = round(time.perf_counter() - start, 2)
    summary["peak_rss_mb"] = round(int(out.stderr.strip().splitlines()[-1]) / 1024, 1)
    rules = sorted(format_graph(r.src) for r in store.load_rules(store.open_store(db)))
    return summary, rules


def _verify(db: Path) -> dict:
    _cli("verify", "--store", str(db), "--json")
    statuses = Counter(r.status for r in store.load_rules(store.open_store(db)))
    reasons = Counter(
        str(row["detail"] and json.loads(row["detail"]).get("reason", ""))[:80]
        for row in store.open_store(db)["rules"].rows
        if row["status"] == "unknown"
    )
    return {"statuses": dict(statuses), "unknown_reasons": dict(reasons)}


Model = tuple[Graph, dict[str, np.ndarray]]
"""A corpus model as the matcher reads it, and the values of its constants (initializers and Constant nodes:
the IR keeps a Constant node's value only in the file)."""


def _models(tmp: Path, names: list[str]) -> dict[str, Model]:
    out = {}
    for name in names:
        path = tmp / f"{name}.onnx"
        proto = corpus.load(name)
        onnx.save_model(proto, str(path))
        consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        for n in proto.graph.node:
            if n.op_type == "Constant":
                consts.update((n.output[0], numpy_helper.to_array(a.t)) for a in n.attribute if a.name == "value")
        g = concretize(load_model(path), corpus.dims(name))
        path.unlink()
        small = {k: v for k, v in consts.items() if v.size <= 1}  # the matcher needs no weight's data
        out[name] = (dataclasses.replace(g, data={k: v for k, v in g.data.items() if k in small}), small)
    return out


def _rank3(t: Target) -> Target:
    """The target on [2, 3, 4] activations (weights as they were): what a transformer's tensors look like."""
    inputs = tuple((n, (2, *s) if k == "activation" else s, k) for n, s, k in t.inputs)
    return dataclasses.replace(t, inputs=inputs)


def _constants_agree(src: Graph, consts: dict[str, np.ndarray], values: dict[str, str]) -> bool:
    for rv, data in src.data.items():
        have = consts.get(values.get(rv, ""))
        if have is None or have.size != 1:
            return False
        if not np.allclose(float(have.reshape(())), float(np.asarray(data.array).reshape(())), rtol=1e-3):
            return False
    return True


def _occurrences(t: Target, models: dict[str, Model], lift: bool = True) -> list[dict]:
    """For each spelling of ``t`` (on rank-3 activations where ``lift``): the corpus models it occurs in, and how
    often."""
    t = _rank3(t) if lift else t
    found = generate_target(t, t.max_ops, LocalExecutor(1))
    dst = parse_graph(t.graph_text())
    out = []
    for text in found.spellings:
        rule = Rule(parse_graph(text), dst)
        per_model = {}
        for name, (g, consts) in models.items():
            hits = {
                frozenset(id(n) for n in m.nodes.values())
                for m in find_matches(g, rule, Census(g))
                if _constants_agree(rule.src, consts, m.values)
            }
            if hits:
                per_model[name] = len(hits)
        out.append({"ops": [n.op for n in rule.src.nodes], "spelling": text, "corpus": per_model})
    return out


def _attention(names: list[str], workers: int, ray: bool, models: dict[str, Model], tmp: Path) -> dict:
    """The attention targets' runs: time and memory on 1 and ``workers`` workers (and Ray), identical rules,
    verdicts, occurrences in the corpus, and which hand-written rules were found."""
    out: dict = {"targets": {}}
    for name in names:
        runs = {f"local_{w}": _generate(name, "local", w, tmp) for w in sorted({1, workers})}
        if ray:
            runs["ray"] = _generate(name, "ray", workers, tmp)
        first = runs["local_1"][1]
        row = {k: {**summary, "identical_rules": rules == first} for k, (summary, rules) in runs.items()}
        row.update(_verify(tmp / f"{name}-local-1.db"))
        row["spellings_in_corpus"] = _occurrences(load_targets(SHIPPED)[name], models, lift=False) if models else []
        out["targets"][name] = row
        print(f"{name}: {row['local_1']['rules']} rules, {row['statuses']}, {row['local_1']['wall_s']} s", flush=True)
    generated = [r for name in names for r in store.load_rules(store.open_store(tmp / f"{name}-local-1.db"))]
    written = parse_rules((ROOT / "tests" / "data" / "attention-hand-written.rules").read_text())
    out["hand_written"] = [dataclasses.asdict(f) for f in findings(written, generated)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default=None, help="comma-separated target names (default: all, or --attention's)")
    ap.add_argument("--attention", action="store_true", help="the MultiHeadAttention targets, against the hand rules")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default=",".join(corpus.NAMES), help="corpus models to look in ('' for none)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray runs")
    ap.add_argument("--result", type=Path, default=None)
    args = ap.parse_args()
    targets = load_targets(SHIPPED)
    mha = [n for n, t in targets.items() if t.op == "MultiHeadAttention"]
    names = args.targets.split(",") if args.targets else mha if args.attention else list(targets)
    record: dict = {"meta": layout.meta()}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        models = _models(tmp, args.models.split(",")) if args.models else {}
        if args.attention:
            record |= _attention(names, args.workers, not args.no_ray, models, tmp)
            layout.write(path := args.result or layout.result_path("target", "attention"), record)
            print(path)
            return 0
        record["targets"] = {}
        for name in names:
            local, local_rules = _generate(name, "local", args.workers, tmp)
            row = {"local": local, **_verify(tmp / f"{name}-local-{args.workers}.db")}
            if not args.no_ray:
                ray, ray_rules = _generate(name, "ray", args.workers, tmp)
                row["ray"] = {**ray, "identical_rules": ray_rules == local_rules}
            row["spellings_in_corpus"] = _occurrences(targets[name], models)
            record["targets"][name] = row
            seen = sum(1 for s in row["spellings_in_corpus"] if s["corpus"])
            print(
                f"{name}: {local['spellings']} spellings, {local['rules']} paired, {row['statuses']}, "
                f"{local['wall_s']} s, {local['peak_rss_mb']} MB; {seen} spellings seen in the corpus",
                flush=True,
            )
    path = args.result or layout.result_path("target", "cpu")
    layout.write(path, record)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
