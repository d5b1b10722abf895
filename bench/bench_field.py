"""The Z_p x Z_q fingerprint's false-collision rate (issue 47): ``--count`` distinct random small graphs over
Add, Mul, Div, Reciprocal, Exp, Sqrt, Pow (constant exponents), Softmax, Relu and Tanh, and float constants,
each fingerprinted (`taso.generate.fingerprint`) and evaluated in float64 on random inputs (one draw of positive
values, two of normal ones: an identity must hold on all of them).

A false collision is two graphs of one fingerprint whose float values differ (what would send z3 a false
candidate); a missed identity is two graphs whose float values agree on every draw but whose fingerprints differ
(what the generator cannot pair: an exp of an exp, and every specific identity of a keyed op such as
relu(relu(a)) = relu(a)). Prints the counts; the result (with the date, machine, commit and command) goes to
bench/results/<today>/field-cpu.json (``--result``).

    nice .venv/bin/python bench/bench_field.py --count 20000
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench")]

import layout  # noqa: E402

from taso.generate.fingerprint import fingerprint  # noqa: E402
from taso.ir import Graph, WeightData, parse_graph  # noqa: E402
from taso.verify.precheck import run_graph  # noqa: E402

SHAPE = (2, 3)
LEAVES = ("a", "b", "c")
CONSTANTS = {"half": 0.5, "two": 2.0, "three": 3.0, "eps": float(np.float32(1e-5))}
UNARY = ("Exp", "Sqrt", "Reciprocal", "Relu", "Tanh", "Softmax")
BINARY = ("Add", "Mul", "Div")
POWERS = ("half", "two", "three")
DRAWS = 3
RTOL = 1e-9


def expression(rng: random.Random, ops_left: int) -> tuple:
    """A random expression tree of at most ``ops_left`` ops over the leaves and the constants."""
    if ops_left == 0 or rng.random() < 0.25:
        return ("in", rng.choice(LEAVES))
    kind = rng.random()
    if kind < 0.4:
        return (rng.choice(UNARY), expression(rng, ops_left - 1))
    if kind < 0.5:
        return ("Pow", expression(rng, ops_left - 1), ("const", rng.choice(POWERS)))
    if kind < 0.6:
        return (
            rng.choice(("Mul", "Div", "Add")),
            expression(rng, ops_left - 1),
            ("const", rng.choice(list(CONSTANTS))),
        )
    split = rng.randint(0, ops_left - 1)
    return (rng.choice(BINARY), expression(rng, split), expression(rng, ops_left - 1 - split))


def to_graph(e: tuple) -> Graph:
    """The expression as a graph over inputs a, b, c (always all three, so every graph reads the same inputs)."""
    lines: list[str] = []
    used: set[str] = set()
    dims = ",".join(map(str, SHAPE))

    def emit(x: tuple) -> str:
        if x[0] == "in":
            return x[1]
        if x[0] == "const":
            used.add(x[1])
            return x[1]
        args = [emit(a) for a in x[1:]]
        out = f"t{len(lines)}"
        attrs = " {axis=-1}" if x[0] == "Softmax" else ""
        lines.append(f"  %{out} = {x[0]}({', '.join('%' + a for a in args)}){attrs} : float32[{dims}]")
        return out

    out = emit(e)
    params = [f"%{n}: float32[{dims}]" for n in LEAVES] + [f"%{n}: float32[] weight" for n in sorted(used)]
    g = parse_graph(f"graph({', '.join(params)}):\n" + "\n".join(lines) + f"\n  return %{out}")
    return replace(g, data={n: WeightData(np.array(CONSTANTS[n], np.float32)) for n in used})


def real_values(g: Graph, draws: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The graph's float64 output on each draw, flattened."""
    with np.errstate(all="ignore"):
        return np.concatenate([run_graph(g, feeds)[0].ravel() for feeds in draws])


def _equal(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.allclose(x, y, rtol=RTOL, atol=1e-12, equal_nan=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20_000, help="distinct graphs to fingerprint")
    ap.add_argument("--max-ops", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result", type=Path, help="the result file (default: bench/results/<today>/field-cpu.json)")
    args = ap.parse_args()
    meta = layout.meta()
    rng = random.Random(args.seed)
    data = np.random.default_rng(args.seed)
    draws = [{n: data.uniform(0.1, 1.0, SHAPE) for n in LEAVES}]
    draws += [{n: data.standard_normal(SHAPE) for n in LEAVES} for _ in range(DRAWS - 1)]
    seen: set[str] = set()
    prints: dict[str, list[int]] = defaultdict(list)
    graphs: list[Graph] = []
    values: list[np.ndarray] = []
    start = time.perf_counter()
    fingerprint_s = 0.0
    while len(graphs) < args.count:
        g = to_graph(expression(rng, rng.randint(1, args.max_ops)))
        text = str(g)
        if text in seen:
            continue
        seen.add(text)
        t = time.perf_counter()
        prints[fingerprint(g)].append(len(graphs))
        fingerprint_s += time.perf_counter() - t
        graphs.append(g)
        values.append(real_values(g, draws))
    false, true_pairs, finite = [], 0, 0
    for members in prints.values():
        for i in members[1:]:
            x, y = values[members[0]], values[i]
            if _equal(x, y):
                true_pairs += 1
                continue
            false.append((str(graphs[members[0]]), str(graphs[i])))
            both = np.isfinite(x) & np.isfinite(y)
            finite += not _equal(x[both], y[both])  # else they differ only where one side is nan or inf
    by_value: dict[bytes, list[int]] = defaultdict(list)  # equal floats, up to rounding: candidates, checked below
    for i, v in enumerate(values):
        by_value[np.round(np.nan_to_num(v, nan=7.0, posinf=8.0, neginf=9.0), 6).tobytes()].append(i)
    print_of = {i: p for p, members in prints.items() for i in members}
    missed = []
    for members in by_value.values():
        for i in members[1:]:
            if print_of[i] != print_of[members[0]] and _equal(values[members[0]], values[i]):
                missed.append((str(graphs[members[0]]), str(graphs[i])))
    seconds = time.perf_counter() - start
    record = {
        "meta": meta,
        "graphs": len(graphs),
        "max_ops": args.max_ops,
        "fingerprints": len(prints),
        "pairs_of_equal_fingerprint": sum(len(m) - 1 for m in prints.values()),
        "true_identities": true_pairs,
        "false_collisions": len(false),
        "false_collision_rate": len(false) / len(graphs),
        "false_collisions_at_finite_values": finite,
        "missed_identities": len(missed),
        "fingerprint_ms_per_graph": 1000 * fingerprint_s / len(graphs),
        "seconds": round(seconds, 1),
        "false_examples": false[:5],
        "missed_examples": missed[:5],
    }
    print(
        f"{len(graphs):,} distinct graphs, {len(prints):,} fingerprints: {true_pairs:,} pairs equal over the reals, "
        f"{len(false)} false collisions, {len(missed)} identities missed "
        f"({record['fingerprint_ms_per_graph']:.2f} ms per fingerprint, {seconds:.0f} s in all)"
    )
    layout.write(args.result or layout.result_path("field", "cpu"), record)


if __name__ == "__main__":
    main()
