"""`subst verify`: the click layer over `taso.verify` (proofs) and `taso.verify.speccheck` (spec validation)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from cli.options import Finite, specs_option, store_option
from cli.progress import StageBars
from taso.errors import CheckFailed
from taso.rules import store
from taso.verify import (
    DEFAULT_BUDGET,
    DEFAULT_LIMIT,
    DEFAULT_TIMEOUT,
    Specs,
    check_specs,
    load_specs,
    pending,
    verify_rows,
)


@click.command()
@specs_option("Folder of operator specs (one *.py per operator: symbols, shape rules, axioms).")
@store_option("Rule store whose candidates get verdicts.", writes=True)
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=2**32 - 1),
    default=DEFAULT_BUDGET,
    show_default=True,
    help="z3 resource units per rule (its deterministic rlimit count, not seconds, plus 200 per quantifier "
    "instance); a rule that spends them is stored as unknown. About 1.5 M units a second on the 2-core "
    "reference machine.",
)
@click.option(
    "--timeout",
    type=Finite(min=0, min_open=True),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Wall-clock safety net per rule, in seconds; a rule that reaches it is unknown with a reason of its "
    "own, since that verdict depends on the machine.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=os.cpu_count() or 1,
    show_default="all cores",
    help="Processes deciding rules in parallel.",
)
@click.option("--force", is_flag=True, help="Decide again rules that already have a verdict.")
@click.option(
    "--check-specs",
    is_flag=True,
    help="Do not verify rules: check every axiom against the ops' numpy semantics at small shapes; exit 1 if any fails.",
)
@click.option(
    "--instances",
    type=click.IntRange(min=1),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="With --check-specs: most instances checked per axiom.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def verify(
    specs_dir: Path,
    store_path: Path,
    budget: int,
    timeout: float,
    workers: int,
    force: bool,
    check_specs: bool,
    instances: int,
    as_json: bool,
) -> None:
    """Give every candidate rule a verdict: proved, refuted or unknown.

    \b
    Each rule first runs on random inputs with the real semantics (relu as relu, pooling as pooling): if
    the two sides differ it is refuted, and the input is stored as the counterexample. Otherwise z3 tries
    to prove each output pair equal from the axioms in the specs, within --budget resource units per rule:
      proved    the axioms imply it; the store lists the axioms the proof used (its unsat core)
      refuted   a counterexample shows the two sides differ
      unknown   budget spent, an op or attribute no spec models, or no proof from the axioms (the reason
                is stored); unknown rules are never used, like refuted ones
    Only proved rules are ever used by `subst optimize`. Rules already decided are skipped unless --force.

    \b
    Each proof is bound to its rule, the specs it used and this verifier's code, and signed with your key
    ($XDG_CONFIG_HOME/subst/trust.key, else ~/.config/subst/trust.key, made on first use, yours alone):
    `subst optimize` applies only proofs signed with it, or the shipped store's. A store proved by someone
    else is skipped ("signed by another key") until `subst verify --force` proves it again here.

    \b
    The budget counts z3's own steps, so the verdicts are the same on every machine and under any load
    (for one z3 version: pyproject.toml pins it, and the store records it). --timeout is only a safety
    net against a runaway check: a rule it stops is unknown with the reason "wall-clock safety net", and
    the summary warns, because that verdict depends on the machine.

    \b
    --check-specs validates the specs themselves: every axiom is instantiated at every small shape and
    attribute value in its domains and both sides are computed with the ops' numpy code; a wrong axiom
    would prove wrong rules, so any failure exits 1 and names the axiom and the instance.

    \b
    Examples:
      subst verify                                    decide the candidates in ./substitutions.db
      subst verify --store my.db --budget 60000000    a bigger budget per rule (about 3x the time)
      subst verify --force --workers 2 --json         decide every rule again, print a JSON summary
      subst verify --check-specs                      validate specs/ against the concrete semantics
    """
    specs = load_specs(specs_dir)
    if check_specs:
        _check_specs(specs, instances, as_json)
        return
    store.require_writable(store_path)  # verdicts are written as rules are decided: refuse a read-only store first
    db = store.open_store(store_path)
    rows = pending(db, force)
    bars, done = StageBars(unit="rules"), 0

    def decided(n: int) -> None:
        """Rules decided so far of all to decide, and the time left at the pace so far (every 10 s in a log)."""
        nonlocal done
        done += n
        bars.update("verifying", done, len(rows))

    try:
        summary = verify_rows(db, rows, specs, budget, timeout, workers, decided)
    finally:
        bars.close()
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        click.echo("\n".join(summary.lines()))


def _check_specs(specs: Specs, instances: int, as_json: bool) -> None:
    reports = check_specs(specs, instances)
    failed = [r for r in reports if not r.ok]
    if as_json:
        click.echo(json.dumps([vars(r) for r in reports], indent=2))
    else:
        for r in failed:
            click.echo(f"FAIL  {r.name} ({r.spec}.py)")
            for f in r.failures:
                click.echo(f"        {f}")
        checked = sum(r.instances for r in reports)
        exhaustive = sum(r.exhaustive for r in reports)
        click.echo(
            f"{len(reports) - len(failed)} of {len(reports)} axioms hold on {checked} instances "
            f"({exhaustive} checked exhaustively over their domains, the rest on a seeded sample)"
        )
    if failed:
        raise CheckFailed(
            f"{len(failed)} axiom(s) fail against the concrete semantics: {', '.join(r.name for r in failed)}"
        )
