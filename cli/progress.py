"""Progress on stderr for long work, so stdout (and --json) stays clean."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

ECHO_EVERY_S = 10.0
"""Seconds between a stage's lines when stderr is not a terminal: a user waiting on a log sees it move."""


class StageBars:
    """A click progress bar per stage on stderr (with click's estimate of the time left); when stderr is not a
    terminal (CI logs, pipes), a line when a stage ends, with its seconds, and every `ECHO_EVERY_S` while it
    goes, with the time left at its pace so far, instead of a bar redrawn in place."""

    def __init__(self, unit: str = "steps") -> None:
        self.unit = unit
        self.bar: Any = None
        self.stage = ""
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.echoed = time.perf_counter()

    def update(self, stage: str, done: int, total: int, label: str = "") -> None:
        """``done`` of ``total`` steps of ``stage``, shown as ``label`` (the stage's name by default); a new
        stage closes the bar of the last."""
        if stage != self.stage:
            self.close()
            self.stage, self.start = stage, time.perf_counter()
            if self.tty:
                self.bar = click.progressbar(length=total, label=stage, file=sys.stderr, show_pos=True, width=24)
                self.bar.__enter__()
        text = label or stage
        if self.bar is not None:
            self.bar.label = text
            self.bar.update(done - self.bar.pos)
        if not self.tty and (done >= total or time.perf_counter() - self.echoed > ECHO_EVERY_S):
            click.echo(f"{text} ({done:,}/{total:,} {self.unit}{self._timing(done, total)})", err=True)
            self.echoed = time.perf_counter()
        if done >= total:
            self.close()

    def _timing(self, done: int, total: int) -> str:
        """The stage's seconds once it ends; while it goes, the time left at its pace so far (once known)."""
        elapsed = time.perf_counter() - self.start
        if done >= total:
            return f", {elapsed:.1f} s"
        return f", about {elapsed / done * (total - done):.0f} s left" if done else ""

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
