"""Where a benchmark's result goes, and what it says about how it was made.

Results live in ``bench/results/YYYY-MM-DD/<bench>-<device>[-<what>].json``, dated by the day they were measured,
so the folder reads as a record and `bench/current.py` can name the file each current figure comes from. Every
result carries a ``meta`` entry (date, machine, device, commit, command): a number nobody can trace to how it was
made is a number nobody can check. Results are written to a temporary file and renamed, so a run cut short never
leaves a half-written one.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def device_slug(device: str) -> str:
    """A short name for a device key (`taso.cost.profiler.Device.key`) or name: ``h100``, ``h200``, ``cpu``."""
    provider, _, rest = device.partition("|")
    if provider.lower().startswith("cpu"):
        return "cpu"
    name = rest.split("|", 1)[0] if rest else provider
    model = re.search(r"\b([A-Z]\d{2,4})\b", name)
    if model:
        return model.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def result_path(bench: str, device: str, what: str | None = None, day: datetime.date | None = None) -> Path:
    """The dated path of a new result: today's folder unless `day` is given."""
    day = day or datetime.datetime.now(datetime.UTC).date()
    name = "-".join(part for part in (bench, device_slug(device), what) if part)
    return RESULTS / day.isoformat() / f"{name}.json"


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() if out.returncode == 0 else ""


def meta(device: str | None = None) -> dict[str, str]:
    """How this run was made: UTC time, machine and its load, device key, commit (flagged if dirty), command."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
    if _git("status", "--porcelain", "taso", "cli", "specs", "bench", "models"):
        commit += " (with uncommitted changes)"
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        "device": device or "cpu",
        "commit": commit,
        "command": shlex.join(["python", *sys.argv]),
    }


def write(path: Path, record: dict[str, Any]) -> None:
    """Write `record` as JSON to `path` through a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
