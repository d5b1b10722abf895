"""Whether two generated stores hold the same rules in the same order: row k of one against row k of the other,
over the columns both have (a store from before content ids has no ``rule_id``).

    python bench/compare_stores.py old.db new.db     # exit 0 when every row is the same, 1 otherwise
"""

from __future__ import annotations

import json
import sys

import sqlite_utils


def compare(old: str, new: str) -> dict:
    dbs = [sqlite_utils.Database(p) for p in (old, new)]
    cols = [c for c in dbs[0]["rules"].columns_dict if c in dbs[1]["rules"].columns_dict and c != "id"]
    a, b = (list(db.query(f"select {', '.join(cols)} from rules order by id")) for db in dbs)
    differing = {c: sum(x[c] != y[c] for x, y in zip(a, b)) for c in cols}
    rows = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    return {"rules": [len(a), len(b)], "columns": cols, "rows_differing": rows, "per_column": differing}


def main() -> int:
    result = compare(*sys.argv[1:3])
    print(json.dumps(result, indent=1))
    return 0 if result["rows_differing"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
