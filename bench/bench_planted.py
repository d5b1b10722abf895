"""The planted-falsehood table (issue 28): every planted false rule decided with the random pre-check and by z3
alone, every planted over-claim (true at its example, false for other values of a free attribute: proved only
with a condition pinning the example), and every planted false axiom through `--check-specs`.

The planted rules and axioms are the test suite's (tests/data/planted*.rules, tests/data/planted_axioms.py;
tests/test_planted.py asserts what this prints). A markdown table on stdout; the rows go, with the date,
machine, commit and command, to bench/results/<today>/planted-cpu.json (``--result``).

    .venv/bin/python bench/bench_planted.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import layout
import z3

import taso
from taso.rules import Rule, parse_rules
from taso.verify import DEFAULT_TIMEOUT, Prover, Verdict, check_axiom, load_specs

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CODE = Path(taso.__file__).resolve().parent.parent
"""Where the code under test lives: another checkout's through PYTHONPATH, for a before/after table."""


def _verdict(prover: Prover, rule: Rule) -> dict:
    t0 = time.perf_counter()
    v: Verdict = prover.verdict(rule)
    out = {"status": v.status, "seconds": round(time.perf_counter() - t0, 2)}
    if v.status == "proved":
        out["conditions"] = v.detail.get("conditions", [])
        out["axioms"] = v.detail.get("axioms", [])
    elif v.status == "unknown":
        out["reason"] = v.detail.get("reason", "")
    return out


def _cell(v: dict) -> str:
    if v["status"] == "proved":
        cond = "; ".join(" ".join(map(str, c)) for c in v["conditions"]) or "no condition"
        return f"**proved** ({cond})"
    if v["status"] == "unknown":
        return "unknown (" + v["reason"].split(":")[0].split(" (")[0] + ")"
    return v["status"]


def rules_table(specs_dir: Path, timeout: float) -> list[dict]:
    specs = load_specs(specs_dir)
    pre, alone = Prover(specs, timeout=timeout), Prover(specs, precheck=False, timeout=timeout)
    rows = []
    for kind, path in (("false", "planted.rules"), ("over-claim", "planted-conditional.rules")):
        for rule in parse_rules((DATA / path).read_text()):
            rows.append({"kind": kind, "name": rule.name, "precheck": _verdict(pre, rule), "z3": _verdict(alone, rule)})
    return rows


def axioms_table(specs_dir: Path) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "specs"
        shutil.copytree(specs_dir, root, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(DATA / "planted_axioms.py", root / "planted_axioms.py")
        specs = load_specs(root)
        rows = []
        for ax in specs.axioms:
            if ax.spec != "planted_axioms":
                continue
            t0 = time.perf_counter()
            r = check_axiom(ax, specs)
            rows.append(
                {
                    "kind": "axiom",
                    "name": ax.name,
                    "generic": ax.generic,
                    "caught": not r.ok,
                    "instances": r.instances,
                    "free_instances": getattr(r, "free_instances", None),
                    "first_failure": r.failures[0] if r.failures else "",
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="wall-clock safety net per rule")
    ap.add_argument("--specs", type=Path, default=ROOT / "specs", help="the specs to decide from")
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/planted-cpu.json)")
    args = ap.parse_args()
    rules, axioms = rules_table(args.specs, args.timeout), axioms_table(args.specs)
    print("| planted rule | kind | with pre-check | z3 alone | seconds (pre-check / z3 alone) |")
    print("|---|---|---|---|---:|")
    for r in rules:
        secs = f"{r['precheck']['seconds']:.2f} / {r['z3']['seconds']:.2f}"
        print(f"| {r['name']} | {r['kind']} | {_cell(r['precheck'])} | {_cell(r['z3'])} | {secs} |")
    print("\n| planted axiom | generic | --check-specs | instances (declared / free shapes) | seconds |")
    print("|---|---|---|---:|---:|")
    for a in axioms:
        where = "at free shapes" if "free shapes" in a["first_failure"] else "at declared shapes"
        verdict = f"caught {where}" if a["caught"] else "**missed**"
        print(
            f"| {a['name']} | {a['generic']} | {verdict} | {a['instances']} / {a['free_instances']} | {a['seconds']} |"
        )
    meta = layout.meta()
    if CODE != ROOT:
        meta["commit"] = f"taso/ imported from {CODE}, not this checkout"
    record = {"meta": meta, "z3": z3.get_full_version(), "specs": str(args.specs), "timeout": args.timeout}
    layout.write(args.result or layout.result_path("planted", "cpu"), record | {"rules": rules, "axioms": axioms})


if __name__ == "__main__":
    main()
