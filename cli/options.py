"""Options several commands share, defined once so they read and behave the same everywhere."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from taso.errors import BadInput
from taso.rules import SPECS_DIR, store

WORKING_STORE = "substitutions.db"
"""The store `subst generate`, `subst rules add` and `subst verify` write without --store: in the working folder."""


class Finite(click.FloatRange):
    """A float in a range that must also be finite: click's FloatRange lets ``nan`` through (every comparison
    with it is false), and ``--alpha nan`` or ``--rtol inf`` would be taken at their word."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def store_option(help: str, writes: bool = False) -> Callable:
    """``--store PATH``: the rule store. A command that reads it defaults to the shipped substitutions.db
    (read-only); one that ``writes`` it, to substitutions.db in the working folder, never the package's."""
    return click.option(
        "--store",
        "store_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=Path(WORKING_STORE) if writes else store.DEFAULT_PATH,
        show_default=f"{WORKING_STORE} in the working folder" if writes else "the shipped substitutions.db",
        help=help,
    )


def specs_option(help: str) -> Callable:
    """``--specs``: the folder of operator specs, the shipped ones unless given."""
    return click.option(
        "--specs",
        "specs_dir",
        type=click.Path(path_type=Path),
        default=SPECS_DIR,
        show_default="the shipped specs",
        help=help,
    )


def dim_option(help: str) -> Callable:
    """``--dim NAME=SIZE``, repeatable: sizes for symbolic dims (read with `parse_dims`)."""
    return click.option("--dim", "dims", multiple=True, metavar="NAME=SIZE", help=help)


def verbose_option() -> Callable:
    """``--verbose``: onnxruntime's own warnings and errors on stderr, which subst silences (`taso.execute.ortlog`)."""
    return click.option(
        "--verbose",
        is_flag=True,
        help="Show onnxruntime's own log lines ([W:onnxruntime...], [E:onnxruntime...]): silenced by default, as "
        "subst handles the failures they log (a unit that cannot run alone is estimated) or reports them itself.",
    )


def parse_dims(values: tuple[str, ...]) -> dict[str, int]:
    dims = {}
    for item in values:
        name, _, size = item.partition("=")
        if not name or not size.isdigit() or int(size) < 1:
            raise BadInput(f"--dim {item!r}: expected NAME=SIZE with a positive size, e.g. --dim batch=1")
        dims[name] = int(size)
    return dims
