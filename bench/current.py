"""The one current table: every figure an issue set a target for, read from the result files in bench/results/.

Each `Metric` names the file it reads (the latest run that measured it), how to read the value, and the target.
The table goes into bench/README.md between the markers, with a digest of every file it read, so it is never
hand-edited: tests/test_bench.py fails when the README's table is not what this script makes of the files.

    .venv/bin/python bench/current.py            # rewrite the table in bench/README.md
    .venv/bin/python bench/current.py --check    # exit 1 if the README's table is stale

A new run becomes current by pointing its metric at the new file here, then running this script.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from layout import RESULTS, device_slug

README = Path(__file__).resolve().parent / "README.md"
BEGIN = "<!-- current:begin (written by bench/current.py from bench/results/: do not edit by hand) -->"
END = "<!-- current:end -->"
NOT_MEASURED = "not measured"

Value = tuple[float, str]  # the number the target is checked on, and how the table shows it


@dataclass(frozen=True)
class Target:
    """A bound from an issue: `value op bound`, shown as `text`."""

    op: str  # one of OPS
    bound: float
    text: str

    def met(self, value: float) -> bool:
        return OPS[self.op](value, self.bound)


OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, "==": operator.eq}


@dataclass(frozen=True)
class Metric:
    """One row of the table: what is measured, the issue that set its target, and where the latest value lives."""

    name: str
    issue: int
    target: Target | None  # None: shown for comparison, no target of its own
    file: str | None  # under bench/results/; None: no run has measured it yet
    read: Callable[[dict], Value] | None = None


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _of(n: int, total: int) -> Value:
    """A count that should be all: checked as the shortfall (0 = all)."""
    return total - n, f"{n} of {total}"


def _zoo_speedup(variant: str) -> Callable[[dict], Value]:
    def read(d: dict) -> Value:
        g = _geomean([r["speedup"][variant] for r in d["rows"]])
        return g, f"{g:.3f}x over {len(d['rows'])}"

    return read


def _zoo_below_noise(d: dict) -> Value:
    """Models a rule changed that measured slower than the original's own second session ("again") ever did."""
    again = [r["speedup"]["again"] for r in d["rows"]]
    changed = [r for r in d["rows"] if r["rules"]]
    slow = [r["model"] for r in changed if r["speedup"]["subst"] < min(again)]
    low = min(changed, key=lambda r: r["speedup"]["subst"])
    return len(slow), (
        f"{len(slow)} of {len(changed)} (band {min(again):.3f}-{max(again):.3f}x; "
        f"lowest changed: {low['model']} {low['speedup']['subst']:.3f}x)"
    )


def _max_of(rows: list[dict], key: str, unit: str = "s") -> Value:
    top = max(rows, key=lambda r: r[key])
    return top[key], f"{top[key]:.2f} {unit} ({top['model']})"


def _cost_within(key: str) -> Callable[[dict], Value]:
    def read(d: dict) -> Value:
        return _of(sum(abs(r[key]) <= 20 for r in d["rows"]), len(d["rows"]))

    return read


def _merges_agree(d: dict) -> Value:
    return _of(sum((m["predicted_speedup"] > 1) == (m["measured_speedup"] > 1) for m in d["merges"]), len(d["merges"]))


def _one(d: dict) -> dict:
    return d["rows"][0]


def _unknown_pct(d: dict) -> Value:
    r = _one(d)
    pct = 100 * r["unknown"] / r["total"]
    return pct, f"{pct:.2f} % ({r['unknown']} of {r['total']:,})"


def _verify_pair(d: dict) -> Value:
    """A verifier against the one before it in one run on one machine (`bench/bench_verify.py --baseline`): the
    ratio of CPU seconds, which the machine's load distorts less than the wall."""
    this, base = d["rows"]
    ratio = base["cpu_s"] / this["cpu_s"]
    return ratio, (
        f"{ratio:.2f}x CPU ({this['cpu_s']:.0f} s vs {base['cpu_s']:.0f} s; wall {this['wall_s']:.0f} s vs "
        f"{base['wall_s']:.0f} s at load {this['load_before']}-{base['load_before']}); "
        f"{len(d['verdicts_changed'])} verdicts moved"
    )


def _planted(kind: str, verdict: Callable[[dict], bool]) -> Callable[[dict], Value]:
    def read(d: dict) -> Value:
        rows = [r for r in d["rules"] if r["kind"] == kind]
        return _of(sum(verdict(r) for r in rows), len(rows))

    return read


def _corpus_geomean(column: str) -> Callable[[dict], Value]:
    """A corpus run's geomean speed-up for ``column``, with the other subst column and the peers' beside it."""

    def read(d: dict) -> Value:
        def geomean(c: str) -> float:
            return _geomean([r["speedup"][c] for r in d["rows"] if c in r.get("speedup", {})])

        timed = [r for r in d["rows"] if column in r.get("speedup", {})]
        others = ("subst", "subst_device", "onnxsim", "onnxslim")
        beside = ", ".join(
            f"{c} {geomean(c):.3f}x" for c in others if c != column and any(c in r["speedup"] for r in timed)
        )
        g = geomean(column)
        return g, f"{g:.3f}x over {len(timed)}" + (f" ({beside} in the same run)" if beside else "")

    return read


def _corpus_ceiling(d: dict) -> Value:
    """The geomean, over a corpus run's models, of the fastest variant each model had, whichever tool made it
    (the original and its second timing left out): what choosing the best tool per model after the fact reaches."""
    best = [
        max(v for k, v in r["speedup"].items() if k not in ("original", "again")) for r in d["rows"] if r.get("speedup")
    ]
    g = _geomean(best)
    return g, f"{g:.3f}x over {len(best)}"


def _best_peer(d: dict) -> Value:
    """The geomean, over a corpus run's models that a peer changed, of subst's speed-up over the best peer's on
    that model (onnxsim, onnxslim, ORT's transformers optimizer): what a user gains over the best other tool."""
    peers = ("onnxsim", "onnxslim", "ort_transformers")
    ratios = [
        r["speedup"]["subst"] / max(r["speedup"][k] for k in peers if k in r["speedup"])
        for r in d["rows"]
        if "subst" in r.get("speedup", {}) and any(k in r["speedup"] for k in peers)
    ]
    g = _geomean(ratios)
    return g, f"{g:.3f}x over {len(ratios)}"


def _captured(d: dict) -> Value:
    """Under CUDA graph capture: the geomean of subst's output over the original (both captured, ms_graph), with
    the capture alone and the models capture made slower beside it."""
    rows = [
        (
            r["model"],
            r["ms_graph"]["original"] / r["ms_graph"]["subst"],
            r["ms"]["original"] / r["ms_graph"]["original"],
        )
        for r in d["rows"]
        if "original" in r.get("ms_graph", {}) and "subst" in r["ms_graph"]
    ]
    g, alone = _geomean([x for _, x, _ in rows]), _geomean([a for _, _, a in rows])
    named = ", ".join(f"{m} {x:.2f}x" for m, x, _ in sorted(rows, key=lambda r: r[1]) if x < 0.95) or "none"
    return g, f"{g:.3f}x over {len(rows)} (capture alone {alone:.2f}x; below 0.95x: {named})"


def _corpus_slow(column: str) -> Callable[[dict], Value]:
    """How many of a corpus run's models ``column`` made slower than the run's noise band: below every timing
    of the original against itself, its "again" and any variant that is the original unchanged (the guard kept
    it: rows list them under "unchanged"). An unchanged output is counted as a draw of the band, not as a model
    made slower."""

    def read(d: dict) -> Value:
        timed = [r for r in d["rows"] if column in r.get("speedup", {})]
        itself = [r["speedup"][k] for r in d["rows"] if r.get("speedup") for k in ("again", *r.get("unchanged", ()))]
        low = min(itself)
        changed = [r for r in timed if column not in r.get("unchanged", ())]
        slow = [r for r in changed if r["speedup"][column] < low]
        worst = min(changed, key=lambda r: r["speedup"][column])
        named = ", ".join(f"{r['model']} {r['speedup'][column]:.3f}x" for r in slow) or "none"
        kept = len(timed) - len(changed)
        return len(slow), (
            f"{len(slow)} of {len(changed)} changed ({named}; band from {low:.3f}x over {len(itself)} timings of "
            f"originals against themselves, {kept} unchanged outputs among them; lowest changed {worst['model']} "
            f"{worst['speedup'][column]:.3f}x)"
        )

    return read


def _versus(column: str, against: str) -> Callable[[dict], Value]:
    """How many of a corpus run's models ``column`` left slower than ``against`` beyond the run's noise band (the
    lowest timing of an original against itself), with the lowest ratio named: issue 48's "subst >= ONNX Runtime's
    transformers optimizer" per model."""

    def read(d: dict) -> Value:
        low = min(r["speedup"]["again"] for r in d["rows"] if r.get("speedup"))
        pairs = sorted(
            (r["speedup"][column] / r["speedup"][against], r["model"])
            for r in d["rows"]
            if column in r.get("speedup", {}) and against in r["speedup"]
        )
        slow = [f"{m} {x:.3f}x" for x, m in pairs if x < low]
        return len(slow), (
            f"{len(slow)} of {len(pairs)} ({', '.join(slow) or 'none'}; band {low:.3f}x; geomean "
            f"{_geomean([x for x, _ in pairs]):.3f}x, lowest {pairs[0][1]} {pairs[0][0]:.3f}x)"
        )

    return read


def _attention_probe(d: dict) -> Value:
    """probe_attention: MultiHeadAttention where the proved rules put it, over the prepared graph: geomean and range,
    without and under capture (models that capture)."""
    rows = list(d["models"].values())
    plain = [r["speedup_over_prepared"] for r in rows]
    graph = [r["speedup_graph_over_prepared"] for r in rows if "speedup_graph_over_prepared" in r]
    g = _geomean(plain)
    return g, (
        f"{g:.3f}x over {len(plain)} ({min(plain):.3f}-{max(plain):.3f}x); under capture {_geomean(graph):.3f}x over "
        f"{len(graph)}; blocks rewritten {sum(r['attention_nodes'] for r in rows)}"
    )


def _attention_found(d: dict) -> Value:
    """bench_target --attention: the hand-written attention rules found by generation, the rules paired and proved,
    and the generation's time, memory and agreement across executors."""
    rows = list(d["targets"].values())
    found = sum(f["found"] for f in d["hand_written"])
    rules = sum(r["local_1"]["added"] for r in rows)
    proved = sum(r["statuses"].get("proved", 0) for r in rows)
    wall = sum(r["local_1"]["wall_s"] for r in rows)
    same = all(run["identical_rules"] for r in rows for k, run in r.items() if k.startswith(("local", "ray")))
    return found, (
        f"{found} of {len(d['hand_written'])} found; {proved} of {rules} rules proved; "
        f"{wall:.0f} s on 1 worker over {len(rows)} targets, at most {max(r['local_1']['peak_rss_mb'] for r in rows)}"
        f" MB; {'identical' if same else '**different**'} rules on 2 workers and Ray"
    )


def _predictions_hold(d: dict) -> Value:
    """How many of a corpus run's subst outputs had a predicted speed-up within 10 % of the measured one."""
    offs = [r["prediction"]["subst"]["off"] for r in d["rows"] if "subst" in r.get("prediction", {})]
    held = sum(abs(x) <= 0.10 for x in offs)
    return held, f"{held} of {len(offs)} (measured/predicted - 1 from {min(offs):+.0%} to {max(offs):+.0%})"


def _fresh(d: dict) -> Value:
    """bench_fresh: subst's geomean speed-up over the best peer per export, with subst's and the peer's own."""
    peers = {"onnxsim", "onnxslim", "ort_transformers"}
    rows = [r for r in d["rows"] if "subst" in r.get("speedup", {}) and peers & r["speedup"].keys()]
    best = [max(r["speedup"][k] for k in peers if k in r["speedup"]) for r in rows]
    ratio = _geomean([r["speedup"]["subst"] / b for r, b in zip(rows, best, strict=True)])
    ok = sum(r.get("check_ok") is True for r in d["rows"])
    return ratio, (
        f"{ratio:.3f}x over {len(rows)} (subst {_geomean([r['speedup']['subst'] for r in rows]):.3f}x, best peer "
        f"{_geomean(best):.3f}x over the original; {ok} of {len(d['rows'])} exit 0 and checked ok)"
    )


def _fresh_cold(d: dict) -> Value:
    """bench_fresh: the slowest cold `subst optimize --device` run, the median and how many within 30 s."""
    walls = sorted(r["optimize"]["wall_s"] for r in d["rows"] if (r.get("optimize") or {}).get("wall_s") is not None)
    return walls[-1], (
        f"{walls[-1]:.1f} s (of {len(walls)}); {sum(w <= 30 for w in walls)} within 30 s, median "
        f"{walls[len(walls) // 2]:.1f} s"
    )


def _cold_within(d: dict) -> Value:
    """The slowest cold run of a bench_cold result, with how many met the target and the median."""
    walls = sorted(m["cold"]["wall_s"] for m in d["models"].values())
    within = sum(w <= d["targets_s"]["cold"] for w in walls)
    value, text = _cold("cold")(d)
    return value, f"{text}; {within} of {len(walls)} within, median {walls[len(walls) // 2]:.1f} s"


def _units_measured(d: dict) -> Value:
    """Units a cold run measured (the model's own and the search's), summed over the models of a before/after
    pair of cold runs (cold-cpu-coldprof), with the earlier tree's sum."""
    runs = d["cpu_cold_real"].values()
    this, before = (
        sum(r[t]["profiled_units"] + r[t]["measured_units"] for r in runs) for t in ("this", "baseline_c9151bf")
    )
    return this, f"{this} units (c9151bf: {before}) over {len(runs)} models"


def _warm_cpu(d: dict) -> Value:
    rows = [r for r in d["rows"] if r["model"] in ("resnet50", "bert_base")]
    return _max_of(rows, "optimize_s")


def _cold(kind: str) -> Callable[[dict], Value]:
    """The slowest model's ``kind`` (cold or warm) wall time in a bench_cold result (its latest run, where a file
    holds a before and an after)."""

    def read(d: dict) -> Value:
        models = list(d["runs"].values())[-1] if "runs" in d else d["models"]
        name = max(models, key=lambda m: models[m][kind]["wall_s"])
        return models[name][kind]["wall_s"], f"{models[name][kind]['wall_s']:.1f} s ({name}, of {len(models)})"

    return read


def _same_rules(d: dict) -> Value:
    """Rows of two stores that differ (row k against row k, and any one store has beyond the other's), with the
    runs' walls."""
    c = d["compare"]
    rows = c["rows_differing"]
    walls = " / ".join(f"{r['code']} {_minutes(r['wall_s'])}" for r in d["rows"])
    return rows, f"{rows} of {c['rules'][1]:,} ({c['rules'][0]:,} rules before; {walls})"


def _generated(d: dict) -> Value:
    """A generate run's wall time, with its peak memory and counts."""
    r = _one(d)
    return r["wall_s"], (
        f"{_minutes(r['wall_s'])}, {r['peak_rss_mb'] / 1000:.1f} GB, {r['graphs_total']:,} graphs,"
        f" {r['candidates']:,} candidates, {r['rules']:,} rules"
    )


def _grown_sizes(d: dict) -> Value:
    """Candidates the grown-size check drops that the shipped store had proved (checked: 0), with how many it
    dropped, the rules left, their unknown count after verify, and the generation's wall before and after."""
    c, w = d["compare"], {r["code"]: r["wall_s"] for r in d["rows"]}
    walls = " / ".join(f"{k} {_minutes(v)}" for k, v in w.items())
    return c["dropped_proved_in_shipped"], (
        f"{c['dropped_proved_in_shipped']} proved of {c['dropped']} dropped; {c['after']:,} rules,"
        f" {d['verify']['unknown']} unknown after verify (was {d['verify']['unknown_before']}); {walls}"
    )


def _screen_first(d: dict) -> Value:
    """Rules stored now that the grown-size screen runs before the fold (true rules the fold had dropped through a
    pair the screen dropped), with those the fold drops now, the rules stored and the generation's walls."""
    c = d["compare"]
    walls = " / ".join(f"{r['code']} {_minutes(r['wall_s'])} ({r['cpu_s']:.0f} s CPU)" for r in d["rows"])
    return len(c["new_in_after"]), (
        f"{len(c['new_in_after'])} stored, {len(c['gone_in_after'])} folded; {c['before']:,} -> {c['after']:,} rules;"
        f" {walls}"
    )


def _validation_cost(d: dict) -> Value:
    """The largest ratio of optimize's CPU seconds with the pass validation to without, by model."""
    ratios = {r["model"]: r["optimize_cpu_s"] / r["baseline_cpu_s"] for r in d["rows"]}
    worst = max(ratios, key=ratios.__getitem__)
    return ratios[worst], f"{ratios[worst]:.2f}x ({worst}, of {len(ratios)})"


def _budget(d: dict) -> Value:
    """The slowest corpus model's search seconds at budget 25 (the default), with its predicted cost against 100's."""
    rows = d["rows"]
    slowest = max(rows, key=lambda r: r["25"]["search_s"])
    g = _geomean([r["25"]["after_ms"] / r["100"]["after_ms"] for r in rows])
    worse = sum(r["25"]["after_ms"] > r["100"]["after_ms"] * (1 + 1e-9) for r in rows)
    better = sum(r["25"]["after_ms"] < r["100"]["after_ms"] * (1 - 1e-9) for r in rows)
    s = slowest["25"]["search_s"]
    return (
        s,
        f"{s:.1f} s ({slowest['model']}, of {len(rows)}; at 100: {max(r['100']['search_s'] for r in rows):.1f} s); "
        f"predicted cost at 25 over 100: {g:.3f}x geomean, cheaper on {better}, costlier on {worse}",
    )


def _predictions(d: dict) -> Value:
    """Rewritten models (rules applied, the guard's before/after measured) whose predicted speed-up is within 10 %
    of the measured one, issue 49's "predictions that hold"; the worst by measured/predicted - 1."""
    errs = {}
    for name, row in d["models"].items():
        cold, measured = row["cold"], row["cold"].get("measured") or {}
        if cold.get("rules_applied") and cold.get("speedup_predicted") and measured.get("ratio"):
            errs[name] = 1 / measured["ratio"] / cold["speedup_predicted"] - 1
    held = sum(abs(e) <= 0.10 for e in errs.values())
    worst = min(errs, key=errs.__getitem__)
    return (
        len(errs) - held,
        f"{held} of {len(errs)} within 10 % (measured/predicted - 1 from {errs[worst]:+.0%} ({worst}) "
        f"to {max(errs.values()):+.0%})",
    )


def _minutes(s: float) -> str:
    return f"{int(s // 60)} min {round(s % 60)} s"


METRICS: list[Metric] = [
    Metric(
        "optimize: geomean speed-up, 16 static zoo models (subst)",
        6,
        Target(">=", 1.15, ">= 1.15x"),
        "2026-11-24/optimize-h100-zoo.json",
        _zoo_speedup("subst"),
    ),
    Metric("optimize: onnxsim, same run", 6, None, "2026-11-24/optimize-h100-zoo.json", _zoo_speedup("onnxsim")),
    Metric("optimize: onnxslim, same run", 6, None, "2026-11-24/optimize-h100-zoo.json", _zoo_speedup("onnxslim")),
    Metric(
        "optimize: rewritten models slower than the noise band",
        6,
        Target("==", 0, "0"),
        "2026-11-24/optimize-h100-zoo.json",
        _zoo_below_noise,
    ),
    Metric(
        "optimize: search time per zoo model, CLI defaults, warm cost table (max)",
        6,
        Target("<=", 10, "<= 10 s"),
        "2026-11-24/perturb-cpu-search-time.json",
        lambda d: _max_of(d["rows"], "search_s"),
    ),
    Metric(
        "optimize: ResNet-50 and BERT-base warm (zoo builders, cost table; max)",
        32,
        Target("<=", 10, "<= 10 s"),
        "2026-11-24/perturb-cpu-search-time.json",
        _warm_cpu,
    ),
    Metric(
        "optimize: ResNet-50 and BERT-base cold, CPU defaults",
        32,
        Target("<=", 60, "<= 60 s"),
        "2026-11-27/cold-cpu-14c3f13.json",
        _cold("cold"),
    ),
    Metric(
        "optimize: ResNet-50 and BERT-base warm, CPU defaults",
        32,
        Target("<=", 10, "<= 10 s"),
        "2026-11-27/cold-cpu-14c3f13.json",
        _cold("warm"),
    ),
    Metric(
        "optimize: four corpus models cold, CPU defaults under cProfile and a load of 3-6 (cold30, slowest)",
        49,
        Target("<=", 60, "<= 60 s"),
        "2026-11-29/cold-cpu-cold30.json",
        _cold_within,
    ),
    Metric(
        "optimize: units measured cold, MobileOne-S0 and RepVGG-A0 on the CPU (coldprof: twin units costed once)",
        49,
        None,
        "2026-11-29/cold-cpu-coldprof.json",
        _units_measured,
    ),
    Metric(
        "optimize: every corpus model cold, H100, all in one lease, the shipped prior",
        32,
        Target("<=", 30, "<= 30 s"),
        "2026-11-27/cold-h100-be8ce5f.json",
        _cold_within,
    ),
    Metric(
        "optimize: every corpus model cold, H100, in the lease of the geomean below (a60670c)",
        32,
        Target("<=", 30, "<= 30 s"),
        "2026-11-27/cold-h100-a60670c.json",
        _cold_within,
    ),
    Metric(
        "optimize: every corpus model cold on the H200 with its shipped table (26 at 4997e60, 19 at c9151bf)",
        49,
        Target("<=", 30, "<= 30 s"),
        "2026-11-29/cold-h200-s10.json",
        _cold_within,
    ),
    Metric(
        "optimize: cold on the H200 (file above), the predicted speed-up within 10 % of the guard's measured one",
        49,
        Target("==", 0, "all"),
        "2026-11-29/cold-h200-s10.json",
        _predictions,
    ),
    Metric(
        "optimize: the 18 corpus models over 30 s above, cold on the H200 again at the merged head (619b152)",
        49,
        Target("<=", 30, "<= 30 s"),
        "2026-11-29/cold-h200-s10b.json",
        _cold_within,
    ),
    Metric(
        "search: the slowest corpus model's search at the default budget (25, was 100), H200 table, nothing measured",
        49,
        Target("<=", 10, "<= 10 s"),
        "2026-11-29/search-cpu-budget.json",
        _budget,
    ),
    Metric(
        "optimize: a 2-node model, cost table (report total, max of runs)",
        31,
        Target("<=", 1, "<= 1 s"),
        "2026-11-24/optimize-cpu-2node.json",
        lambda d: (_one(d)["report_total_s"][1], "{:.2f}-{:.2f} s".format(*_one(d)["report_total_s"])),
    ),
    Metric(
        "cost model: zoo models within 20 % of measured (host's quick-mode rounds)",
        5,
        Target("==", 0, "all"),
        "2026-11-23/cost-h100-zoo.json",
        _cost_within("error_quick_pct"),
    ),
    Metric(
        "cost model: zoo models within 20 % of measured (plain median)",
        5,
        Target("==", 0, "all"),
        "2026-11-23/cost-h100-zoo.json",
        _cost_within("error_pct"),
    ),
    Metric(
        "cost model: sibling-conv merges ranked as measured",
        5,
        Target("==", 0, "all"),
        "2026-11-23/cost-h100-quick.json",
        _merges_agree,
    ),
    Metric(
        "generate --max-ops 3, TASO's set: wall",
        3,
        Target("<=", 30, "<= 30 s"),
        "2026-11-22/generate-cpu-3ops.json",
        lambda d: (_one(d)["wall_s"], f"{_one(d)['wall_s']} s"),
    ),
    Metric(
        "generate --max-ops 3, TASO's set: peak memory",
        3,
        Target("<=", 1024, "<= 1 GB"),
        "2026-11-22/generate-cpu-3ops.json",
        lambda d: (_one(d)["peak_rss_mb"], f"{_one(d)['peak_rss_mb']} MB"),
    ),
    Metric(
        "generate --max-ops 4, TASO's set: wall",
        30,
        Target("<=", 720, "<= 12 min (issue 3: 30 min)"),
        "2026-11-27/generate-cpu-4ops.json",
        lambda d: (_one(d)["wall_s"], _minutes(_one(d)["wall_s"])),
    ),
    Metric(
        "generate --max-ops 4, TASO's set: peak memory",
        30,
        Target("<=", 2048, "<= 2 GB"),
        "2026-11-27/generate-cpu-4ops.json",
        lambda d: (_one(d)["peak_rss_mb"], f"{_one(d)['peak_rss_mb'] / 1000:.1f} GB"),
    ),
    Metric(
        "generate --max-ops 4, TASO's set: rule rows unlike those of the generator the issue found (d7284d6^)",
        30,
        Target("==", 0, "0"),
        "2026-11-27/generate-cpu-4ops-order.json",
        _same_rules,
    ),
    Metric(
        "generate --max-ops 4, the shipped set (TASO's and biased convs, configs/shipped.json): wall, peak memory, counts",
        30,
        None,
        "2026-11-27/generate-cpu-4ops-shipped.json",
        _generated,
    ),
    Metric(
        "generate --max-ops 5, reduced set (configs/gen5-2d.json), Ray on 16 cores: wall, peak memory, counts",
        30,
        None,
        "2026-11-27/generate-cpu16-5ops-ray.json",
        _generated,
    ),
    Metric(
        "generate, make store's generation half: candidates dropped at grown sizes that the shipped store proved",
        47,
        Target("==", 0, "0"),
        "2026-11-29/generate-meansum.json",
        _grown_sizes,
    ),
    Metric(
        "generate, make store's generation half: rules the grown-size screen before the fold keeps from it",
        47,
        None,
        "2026-11-29/generate-gentidy.json",
        _screen_first,
    ),
    Metric(
        "verify TASO's 3-op set: unknown",
        4,
        Target("<=", 2, "<= 2 %"),
        "2026-11-29/verify-cpu-taso3.json",
        _unknown_pct,
    ),
    Metric(
        "verify TASO's 3-op set: wall",
        4,
        Target("<=", 60, "<= 60 s"),
        "2026-11-29/verify-cpu-taso3.json",
        lambda d: (_one(d)["wall_s"], f"{_one(d)['wall_s']} s"),
    ),
    Metric(
        "verify the shipped store (symbolic sizes, proofs bound): unknown",
        45,
        Target("<=", 2, "<= 2 %"),
        "2026-11-29/verify-cpu-store-s9-make.json",
        _unknown_pct,
    ),
    Metric(
        "verify the shipped store (symbolic sizes, proofs bound): wall, 2 workers",
        47,
        Target("<=", 60, "<= 60 s"),
        "2026-11-29/verify-cpu-store-s9-make.json",
        lambda d: (_one(d)["wall_s"], _minutes(_one(d)["wall_s"])),
    ),
    Metric(
        "verify the shipped store: this verifier's CPU against the one before it, in one run (2 workers)",
        47,
        None,
        "2026-11-29/verify-cpu-vspeed.json",
        _verify_pair,
    ),
    Metric(
        "verify the 64 shipped rules whose first climb is spent: CPU against the verifier before it, in one run",
        47,
        None,
        "2026-11-29/verify-cpu-vhard.json",
        _verify_pair,
    ),
    Metric(
        "verify the shipped store, add-assoc and mul-assoc one way: CPU against the verifier before it, in one run",
        47,
        None,
        "2026-11-29/verify-cpu-vhard-store.json",
        _verify_pair,
    ),
    Metric(
        "planted false rules refuted (random pre-check)",
        28,
        Target("==", 0, "all"),
        "2026-11-24/planted-cpu.json",
        _planted("false", lambda r: r["precheck"]["status"] == "refuted"),
    ),
    Metric(
        "planted false rules not proved by z3 alone",
        28,
        Target("==", 0, "all"),
        "2026-11-24/planted-cpu.json",
        _planted("false", lambda r: r["z3"]["status"] != "proved"),
    ),
    Metric(
        "planted over-claims proved only under a condition",
        28,
        Target("==", 0, "all"),
        "2026-11-24/planted-cpu.json",
        _planted("over-claim", lambda r: bool(r["z3"].get("conditions"))),
    ),
    Metric(
        "planted false axioms caught by --check-specs",
        28,
        Target("==", 0, "all"),
        "2026-11-24/planted-cpu.json",
        lambda d: _of(sum(a["caught"] for a in d["axioms"]), len(d["axioms"])),
    ),
    Metric(
        "differential fuzz of `optimize --no-check`: random models that come out wrong or crash",
        45,
        Target("==", 0, "0"),
        "2026-11-28/fuzz-cpu.json",
        lambda d: (d["wrong"] + d["crashes"], f"{d['wrong']} wrong, {d['crashes']} crashes of {d['count']}"),
    ),
    Metric(
        "corpus: exports that import, optimize, pass the check and the full check",
        32,
        Target("==", 0, "all"),
        "2026-11-24/corpus-cpu.json",
        lambda d: _of(sum(r["check_ok"] and r["full_check_ok"] for r in d["rows"]), len(d["rows"])),
    ),
    Metric(
        "corpus: geomean speed-up, `subst optimize --device cuda` as an H100 user runs it",
        32,
        Target(">=", 1.20, ">= 1.20x"),
        "2026-11-27/corpus-h100-a60670c.json",
        _corpus_geomean("subst_device"),
    ),
    Metric(
        "corpus: the same geomean, the lease before (a session earlier)",
        32,
        Target(">=", 1.20, ">= 1.20x"),
        "2026-11-27/corpus-h100-0e14a2e.json",
        _corpus_geomean("subst_device"),
    ),
    Metric(
        "corpus: the same geomean, two leases before (a session earlier)",
        32,
        Target(">=", 1.20, ">= 1.20x"),
        "2026-11-27/corpus-h100-c61758a.json",
        _corpus_geomean("subst_device"),
    ),
    Metric(
        "corpus: geomean of each model's fastest variant, whichever tool made it (subst, onnxsim, onnxslim, ORT's "
        "transformers optimizer, subst on its output), same run",
        32,
        None,
        "2026-11-27/corpus-h100-a60670c.json",
        _corpus_ceiling,
    ),
    Metric(
        "corpus: models `--device cuda` made slower than the noise band",
        32,
        Target("==", 0, "0"),
        "2026-11-27/corpus-h100-a60670c.json",
        _corpus_slow("subst_device"),
    ),
    Metric(
        "corpus: outputs the two-set guard (41b3042) kept, timed again, slower than the noise band",
        32,
        Target("==", 0, "0"),
        "2026-11-27/kept-h100.json",
        _corpus_slow("subst_device"),
    ),
    Metric(
        "corpus: models CI's table-made output made slower than the noise band",
        32,
        None,
        "2026-11-27/corpus-h100-a60670c.json",
        _corpus_slow("subst"),
    ),
    Metric(
        "PET: search time with --pet, warm cost table (max of 4 models)",
        8,
        Target("<=", 10, "<= 10 s"),
        "2026-11-22/pet-cpu-search-time.json",
        lambda d: _max_of([{"model": r["model"], **r["pet"]} for r in d["rows"]], "search_s"),
    ),
    Metric(
        "corpus (45 models): geomean speed-up over ORT-ALL, CI's table-made output, H200, batch 1",
        47,
        Target(">=", 1.30, ">= 1.30x"),
        "2026-11-29/corpus-h200-graph.json",
        _corpus_geomean("subst"),
    ),
    Metric(
        "corpus (45 models): subst on ORT's transformers optimizer's output, same run",
        47,
        None,
        "2026-11-29/corpus-h200-graph.json",
        _corpus_geomean("ort_transformers+subst"),
    ),
    Metric(
        "corpus (45 models): models made slower than the noise band, same run",
        47,
        Target("==", 0, "0"),
        "2026-11-29/corpus-h200-graph.json",
        _corpus_slow("subst"),
    ),
    Metric(
        "corpus (45 models): subst over the best of onnxsim, onnxslim and ORT's transformers optimizer per model, same run",
        47,
        Target(">=", 1.15, ">= 1.15x"),
        "2026-11-29/corpus-h200-graph.json",
        _best_peer,
    ),
    Metric(
        "corpus (45 models): subst + CUDA graph over the original + CUDA graph, same run (CI's table-made output)",
        49,
        Target(">=", 1.25, ">= 1.25x"),
        "2026-11-29/corpus-h200-graph.json",
        _captured,
    ),
    Metric(
        "corpus transformers (20): geomean speed-up over ORT-ALL, CI's table-made output, H200, batch 1",
        48,
        None,
        "2026-11-29/corpus-h200-tf.json",
        _corpus_geomean("subst"),
    ),
    Metric(
        "corpus transformers: subst alone slower than ORT's transformers optimizer alone beyond the noise band",
        48,
        Target("==", 0, "0"),
        "2026-11-29/corpus-h200-tf.json",
        _versus("subst", "ort_transformers"),
    ),
    Metric(
        "corpus transformers: subst on the optimizer's output slower than the optimizer alone beyond the band",
        48,
        Target("==", 0, "0"),
        "2026-11-29/corpus-h200-tf.json",
        _versus("ort_transformers+subst", "ort_transformers"),
    ),
    Metric(
        "corpus transformers: subst + CUDA graph over the original + CUDA graph, same run",
        49,
        Target(">=", 1.25, ">= 1.25x"),
        "2026-11-29/corpus-h200-tf.json",
        _captured,
    ),
    Metric(
        "corpus transformers: CI's predicted speed-up (H100 table) within 10 % of the H200's measured one",
        49,
        None,
        "2026-11-29/corpus-h200-tf.json",
        _predictions_hold,
    ),
    Metric(
        "attention as onnxruntime's MultiHeadAttention where the proved rules match (7 corpus transformers), H200: "
        "over the same graph unfused",
        48,
        None,
        "2026-11-29/attention-h200.json",
        _attention_probe,
    ),
    Metric(
        "MultiHeadAttention alone against its spelled-out form, H200 (one unit per session, 4 sizes)",
        48,
        None,
        "2026-11-29/mha-unit-h200.json",
        lambda d: (
            min(r["speedup"] for r in d["rows"].values()),
            "{:.2f}-{:.2f}x faster fused".format(
                min(r["speedup"] for r in d["rows"].values()), max(r["speedup"] for r in d["rows"].values())
            ),
        ),
    ),
    Metric(
        "attention found by generation, not written: hand-written MultiHeadAttention rules found by `subst generate "
        "--target MultiHeadAttention` (CPU)",
        48,
        Target("==", 10, "all 10"),
        "2026-11-29/target-attention.json",
        _attention_found,
    ),
    Metric(
        "fresh exports outside the corpus (bench_fresh, 12 of 44 run), H200: subst over the best peer per export",
        47,
        None,
        "2026-11-29/fresh-h200.json",
        _fresh,
    ),
    Metric(
        "fresh transformer exports at this session's code (value types written), H200: subst over the best peer per "
        "export (with one)",
        47,
        None,
        "2026-11-29/fresh-h200-annotated.json",
        _fresh,
    ),
    Metric(
        "fresh exports: cold `subst optimize --device cuda` (7 with the H100 prior scaled, 5 with the layered H200 prior)",
        49,
        Target("<=", 30, "<= 30 s"),
        "2026-11-29/fresh-h200.json",
        _fresh_cold,
    ),
    Metric(
        "fresh exports no lease had run (ast, dinov2, phi, ghostnet: 8 entries), H200, at this session's merged head "
        "(attention, the re-verified store): subst over the best peer per export",
        47,
        None,
        "2026-11-29/fresh-h200-s8.json",
        _fresh,
    ),
    Metric(
        "the same fresh exports: cold `subst optimize --device cuda` (the layered H200 prior)",
        49,
        Target("<=", 30, "<= 30 s"),
        "2026-11-29/fresh-h200-s8.json",
        _fresh_cold,
    ),
    Metric(
        "fresh exports on the CPU (41 exports outside the corpus + 17 ORT transformers optimizer outputs): exit 0 "
        "and check ok",
        47,
        Target("==", 58, "all"),
        "2026-11-29/fresh-cpu-robust.json",
        lambda d: (
            ok := sum(r["exit"] == 0 and r["check"] is True for r in d["rows"]),
            f"{ok} of {len(d['rows'])} (fastvit_t8_dynamo after the check's fix 4e85581; slowest "
            f"{max(d['rows'], key=lambda r: r['wall_s'])['model']} {max(r['wall_s'] for r in d['rows']):.0f} s on a "
            "loaded machine)",
        ),
    ),
    Metric(
        "capture verdict read from replays (f9a112d): models read as captured on the H200, as not on its CPU",
        49,
        None,
        "2026-11-29/capture-h200.json",
        lambda d: (
            n := sum(r["gpu_replays"] and not r["cpu_replays"] for r in d["rows"]),
            f"{n} of {len(d['rows'])}",
        ),
    ),
    Metric(
        "cold `--no-prior` on one H200 (building its cost table; 4 models in 400 s, x4 not lent)",
        49,
        None,
        "2026-11-29/cold-h200-noprior.json",
        _cold("cold"),
    ),
    Metric(
        "corpus census: GPU kernel time in op types the catalogue specifies (45 models, batch 1)",
        47,
        Target(">=", 95, ">= 95 %"),
        "2026-11-29/census-h200.json",
        lambda d: (
            (after := d["catalogue_share"]["after"])["with_spec_gpu_pct"],
            f"{after['with_spec_gpu_pct']} % (before {d['catalogue_share']['before']['with_spec_gpu_pct']} %); "
            f"left: {', '.join(f'{k} {v} %' for k, v in sorted(d['catalogue_share']['largest_left'].items(), key=lambda kv: -kv[1])[:4])}",
        ),
    ),
    Metric(
        "corpus: CUDA graph capture alone over the original (45 models, batch 1, geomean of the capturable)",
        49,
        None,
        "2026-11-29/census-h200.json",
        lambda d: (
            (c := d["cuda_graph"])["geomean_speedup"],
            f"{c['geomean_speedup']:.2f}x ({c['range'][0]:.2f}-{c['range'][1]:.2f}x), {c['capturable']} of {c['of']}"
            " capturable",
        ),
    ),
    Metric(
        "make test, 2-core machine",
        46,
        Target("<=", 720, "<= 12 min"),
        "2026-11-29/maketest-cpu-s10.json",
        lambda d: (
            d["make_test"]["wall_s"],
            f"{_minutes(d['make_test']['wall_s'])}, {d['make_test']['passed']} passed",
        ),
    ),
    Metric(
        "make test, 2-core machine: CPU (user + system)",
        46,
        Target("<=", 900, "<= 15 min"),
        "2026-11-29/maketest-cpu-s10.json",
        lambda d: (
            (cpu := d["make_test"]["cpu_user_s"] + d["make_test"]["cpu_system_s"]),
            _minutes(cpu),
        ),
    ),
    Metric(
        "certify: corpus models' outputs certified, every step accounted for (cost table)",
        45,
        Target("==", 0, "all"),
        "2026-11-28/certify-cpu-corpus.json",
        lambda d: _of(sum(r.get("verdict") == "certified" for r in d["rows"]), len(d["rows"])),
    ),
    Metric(
        "optimize: CPU seconds with each pass step validated over without (3 corpus models, max)",
        45,
        Target("<=", 2.0, "< 2x (must not double)"),
        "2026-11-28/certify-cpu-cold.json",
        _validation_cost,
    ),
    Metric(
        "optimize: trusting the shipped store's proofs at a cold start (`provenance.trusted`, best of rounds)",
        46,
        None,
        "2026-11-29/trust-cpu.json",
        lambda d: (
            d["best"]["after"]["trusted_s"],
            f"{d['best']['after']['trusted_s']:.2f} s (before {d['best']['before']['trusted_s']:.2f} s); bert_tiny"
            f" optimize {d['best']['after']['optimize_wall_s']:.2f} s (before {d['best']['before']['optimize_wall_s']:.2f} s)",
        ),
    ),
]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _command(meta: dict, width: int = 100) -> str:
    """The command's first step, cut at a word near `width` (the file's meta keeps every call of a run in full)."""
    first = meta["command"].split("; then")[0].split("; ")[0]
    if len(first) > width:
        first = first[:width].rsplit(" ", 1)[0]
    return f"`{_cell(first)}`" + (" ..." if first != meta["command"] else "")


def files(metrics: list[Metric] = METRICS) -> list[str]:
    """Every result file the table reads, in table order."""
    return list(dict.fromkeys(m.file for m in metrics if m.file))


def render(results: Path = RESULTS, metrics: list[Metric] = METRICS) -> str:
    """The table (between the markers) as the result files under `results` give it."""
    loaded = {f: json.loads((results / f).read_text()) for f in files(metrics)}
    lines = [
        BEGIN,
        "| metric | issue | value | target | met? | date | device | commit | command | file |",
        "|---|---:|---|---|---|---|---|---|---|---|",
    ]
    for m in metrics:
        target = m.target.text if m.target else "(for comparison)"
        if m.file is None or m.read is None:
            lines.append(f"| {m.name} | {m.issue} | {NOT_MEASURED} | {_cell(target)} | no | | | | | |")
            continue
        data = loaded[m.file]
        meta = data["meta"]
        number, shown = m.read(data)
        met = ("yes" if m.target.met(number) else "**no**") if m.target else "-"
        inferred = " (meta inferred)" if "inferred" in meta else ""
        lines.append(
            f"| {m.name} | {m.issue} | {_cell(shown)} | {_cell(target)} | {met} | {meta['date'][:10]} | "
            f"{device_slug(meta['device'])} | {_cell(meta['commit'].split()[0])} | {_command(meta)} | "
            f"[{m.file}](results/{m.file}){inferred} |"
        )
    digests = ", ".join(f"{f} {hashlib.sha256((results / f).read_bytes()).hexdigest()[:12]}" for f in files(metrics))
    lines += ["", f"<!-- files read (sha256): {digests} -->", END]
    return "\n".join(lines)


def splice(readme: str, table: str) -> str:
    """`readme` with the text between the markers (markers included) replaced by `table`."""
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{README} lacks the markers {BEGIN!r} ... {END!r}")
    return head + table + tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if the README's table is not the files' table")
    args = ap.parse_args()
    text = README.read_text()
    new = splice(text, render())
    if args.check:
        if new != text:
            print("bench/README.md: the current table is stale; run python bench/current.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        tmp = README.with_suffix(".md.tmp")
        tmp.write_text(new)
        tmp.replace(README)
    print(f"bench/README.md: {len(METRICS)} metrics from {len(files())} result files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
