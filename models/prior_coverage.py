"""What a cold `subst optimize` on a GPU would take from the shipped priors for each corpus model's own units, from
the tables alone, on any machine (nothing is measured): the units its profiling measures (those some rewrite may
touch, as `taso.optimize.pipeline.profile` picks them), and how many of them each prior holds.

    python models/prior_coverage.py --device "NVIDIA H200" [--models resnet50_ts,bert_ts] [--labels out.json]

Columns: the units profiled; those the device's own table holds, those only the provider's other tables hold
(taken scaled: `taso.cost.tables.Layer`), those none holds; then the units measured cold with the first shipped
table of the provider carried over by calibration (its `REFERENCE_UNITS` measured, the rest scaled: no table of
the device's own), with the device's table alone, and with the layered prior. Units a search's candidates add
are not counted: they depend on the search. ``--labels`` writes the label of every unit seen, by key (what
`taso.cost.tables.fit_scales` fits a scale by class on, for a table exported before tables kept labels).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import corpus

from taso import cost
from taso import onnx as onnx_io
from taso.cost import CostModel, profiler, tables
from taso.cost.model import REFERENCE_UNITS
from taso.optimize import pipeline
from taso.optimize.report import Report, quiet
from taso.optimize.run import Checking, Run, Settings
from taso.rules import store
from taso.search import searched_parts


def model_units(name: str, device: profiler.Device) -> tuple[dict[str, str], frozenset[str]]:
    """Corpus model ``name``'s units (key: label) after the rewrites that need no cost, at `corpus.dims`, and
    the keys of those no rewrite touches (estimated, not measured, where no prior holds them)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = corpus.write(name, Path(tmp) / f"{name}.onnx")
        settings = Settings(device="cpu", dims=corpus.dims(name))
        checking, report = Checking(False, None, None, 0), Report(str(src), "", 0, 0, 0, 0)
        run = Run(src, Path(tmp) / "o.onnx", store.DEFAULT_PATH, settings, checking, Path(tmp), quiet, report)
        for p in (*pipeline.READ, *pipeline.REWRITE):
            if p.when(run):
                run = p.run(run)
    dims = {**onnx_io.dim_sizes(run.imported, settings.dims), **run.folded_dims}
    model = CostModel(device, None, measure=False, dims=dims)
    parts = searched_parts(run.graph, run.index, cost.REGION_CONTEXT)
    untouched = model.untouched(run.graph, {o for p in parts for n in p for o in n.outputs})
    return {u.key: u.label for u in model.graph_cost(run.graph).units}, untouched


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="NVIDIA H200", help="a shipped table's device name (default: the H200)")
    ap.add_argument("--models", help="comma-separated corpus names (default: every model that exported)")
    ap.add_argument("--labels", type=Path, help="write the label of every unit seen here (JSON, key: label)")
    args = ap.parse_args()
    shipped = [tables.read_table(str(p)) for p in tables.PRIORS if p.is_file()]
    own = next((t for t in shipped if t.device.name == args.device), None)
    names = args.models.split(",") if args.models else [n for n in corpus.NAMES if "error" not in corpus.MANIFEST[n]]
    unknown = sorted(set(names) - set(corpus.NAMES))
    if own is None or unknown:
        why = f"no shipped table of {args.device}" if own is None else f"not in the corpus: {', '.join(unknown)}"
        print(f"prior_coverage: {why}", file=sys.stderr)
        return 2
    prior = tables.prior_for(own.device)
    assert prior is not None and prior.scaled_from is None  # the table of its own identity
    first = next(t for t in shipped if t.device.provider == own.device.provider)
    print(f"{'model':26} {'units':>5} {'own':>5} {'layer':>5} {'none':>5} | measured: carried  own alone  layered")
    labels: dict[str, str] = {}
    total = [0] * 7
    for name in names:
        every, untouched = model_units(name, own.device)
        labels |= every
        units = {k: label for k, label in every.items() if k not in untouched}
        mine = {k for k in units if k in own.costs}
        layered = {k for k in units if prior.cost(k, units[k]) is not None}
        held = {k for k in units if k in first.costs}
        carried = (
            len(units) - len(held) + min(REFERENCE_UNITS, len(held)) if first is not own else len(units) - len(mine)
        )
        row = [len(units), len(mine), len(layered - mine), len(units) - len(layered)]
        row += [carried, len(units) - len(mine), len(units) - len(layered)]
        total = [a + b for a, b in zip(total, row)]
        print(f"{name:26} {row[0]:5} {row[1]:5} {row[2]:5} {row[3]:5} | {row[4]:16} {row[5]:10} {row[6]:8}", flush=True)
    print(
        f"{'total':26} {total[0]:5} {total[1]:5} {total[2]:5} {total[3]:5} | {total[4]:16} {total[5]:10} {total[6]:8}"
    )
    if args.labels:
        args.labels.write_text(json.dumps(dict(sorted(labels.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
