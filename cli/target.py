"""`subst generate --target OP`: the spellings of one catalogue op's expression, paired with the op, into a store."""

from __future__ import annotations

import resource
import sqlite3
import time
from pathlib import Path

from taso.errors import BadInput
from taso.generate import LocalExecutor
from taso.generate.ray_executor import RayExecutor
from taso.generate.storing import save_rules, version
from taso.generate.target import generate_target, resolve
from taso.generate.targets import SHIPPED, Target, load_targets
from taso.ops import P
from taso.rules import store


def generate_toward(
    name: str | None,
    targets_file: Path | None,
    max_ops: int | None,
    executor: str,
    workers: int | None,
    address: str | None,
    store_path: Path,
) -> dict:
    """Generate toward the target ``name`` (or every target of the op ``name``), add the rules to the store, and
    the run's summary, one entry per target."""
    if not name:
        raise BadInput("--targets: give --target OP too")
    if address and executor != "ray":
        raise BadInput("--address: give it with --executor ray")
    if max_ops is not None and max_ops < 1:
        raise BadInput("--max-ops: a target needs at least 1 op")
    targets = resolve(load_targets(targets_file or SHIPPED), name)
    store.require_writable(store_path)
    return {"targets": [_one(t, max_ops or t.max_ops, executor, workers, address, store_path) for t in targets]}


def _one(target: Target, n: int, executor: str, workers: int | None, address: str | None, store_path: Path) -> dict:
    runner = RayExecutor(address, workers) if executor == "ray" else LocalExecutor(workers)
    start = time.perf_counter()
    found = generate_target(target, n, runner)
    prov = {
        "tool": "subst generate --target",
        "version": version(),
        "target": {"name": target.name, "op": target.op, "expr": target.expr, "max_ops": n},
        "field_prime": P,
    }
    try:
        saved = save_rules(found.rules, prov, store_path)
    except (OSError, sqlite3.OperationalError) as e:
        raise BadInput(f"{store_path}: cannot write the store ({getattr(e, 'strerror', None) or e})") from None
    return {
        "target": target.name,
        "op": target.op,
        "max_ops": n,
        "graphs": found.graphs,
        "spellings": len(found.spellings),
        "rules": len(found.rules),
        "added": saved.added,
        "already_in_store": saved.already,
        "size_dependent": saved.size_dependent,
        "not_resized": saved.not_resized,
        "seconds": round(time.perf_counter() - start, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "store": str(store_path),
    }


def target_lines(data: dict) -> list[str]:
    out = []
    for d in data["targets"]:
        out += [
            f"{d['target']} ({d['op']}), up to {d['max_ops']} ops: {sum(d['graphs'])} graphs grown, "
            f"{d['spellings']} spellings of its expression, {d['rules']} with its fingerprint",
            f"{d['added']} rules added to {d['store']} ({d['already_in_store']} already there) in {d['seconds']} s; "
            f"{d['size_dependent']} dropped as they differ at grown sizes, {d['not_resized']} not resized",
        ]
    return [*out, "run `subst verify` to prove them"]
