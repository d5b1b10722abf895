"""Which rules' verdicts moved between two stores (by rule id): status and reason kind, and each proof's passes
and units, so a change to the verifier or the specs shows that it loses no proof and what it saves.

    python bench/verdict_moves.py shipped.db reverified.db      # exit 1 if a proved rule is no longer proved

A move from unknown to proved is listed (it needs a reason: a new or cheaper search that found a proof); a move
from proved to anything else fails the check. The reason is compared by its kind (`taso.verify.run`'s text up to
the first colon), so a budget's number in it does not count as a move.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import sqlite_utils


def _rows(path: str) -> dict[str, dict]:
    """rule id -> status, reason kind, passes and z3 units of the store at ``path``."""
    out = {}
    for r in sqlite_utils.Database(path).query("select rule_id, status, detail from rules"):
        d = json.loads(r["detail"] or "{}")
        reason = d.get("reason", "").split(":")[0]
        out[r["rule_id"]] = {
            "status": r["status"],
            "reason": reason,
            "passes": d.get("passes"),
            "units": d.get("units"),
        }
    return out


def compare(old: str, new: str) -> dict:
    """The moves from ``old`` to ``new``, counted by (status, status), and the rules behind each."""
    a, b = _rows(old), _rows(new)
    moves = []
    for rid in sorted(set(a) | set(b)):
        x, y = a.get(rid), b.get(rid)
        if x is None or y is None or (x["status"], x["reason"]) != (y["status"], y["reason"]):
            moves.append({"rule_id": rid, "old": x, "new": y})
    kinds = Counter(f"{(m['old'] or {}).get('status')} -> {(m['new'] or {}).get('status')}" for m in moves)
    lost = [m["rule_id"] for m in moves if (m["old"] or {}).get("status") == "proved"]
    passes = {k: Counter(r["passes"] for r in rows.values()) for k, rows in (("old", a), ("new", b))}
    return {
        "rules": [len(a), len(b)],
        "moves": dict(kinds),
        "proofs_lost": lost,
        "moved": moves,
        "passes": {k: {str(p): n for p, n in sorted(c.items(), key=lambda t: str(t[0]))} for k, c in passes.items()},
    }


def main() -> int:
    if len(sys.argv) != 3 or not all(Path(p).is_file() for p in sys.argv[1:3]):
        print("usage: verdict_moves.py OLD.db NEW.db (two rule stores)", file=sys.stderr)
        return 2
    result = compare(*sys.argv[1:3])
    print(json.dumps(result, indent=1))
    return 1 if result["proofs_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
