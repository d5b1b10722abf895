"""The shipped store is what `make store` makes: pinned z3, every rule and verdict regenerated and compared.
Apart from the zoo regression so that a parallel run (`make test`: pytest-xdist, one module per worker) runs
the two longest checks side by side."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from conftest import FULL, ROOT


def test_shipped_store_was_verified_by_the_pinned_z3_and_that_z3_is_installed() -> None:
    """Proofs near the edge of the axioms come and go between z3 versions (5.4.0 and 5.4.1 disagree on a shipped
    rule), so pyproject pins z3 exactly, the store records the z3 that verified it, and a mismatch is named here
    rather than seen as a few moved verdicts in the regeneration below."""
    import z3

    from taso.rules import store
    from taso.verify import Z3_VERSION_KEY

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = next(d.split("==")[1] for d in deps if d.startswith("z3-solver=="))
    assert store.meta(store.open_store(ROOT / "substitutions.db"), Z3_VERSION_KEY) == pinned
    assert z3.get_full_version() == pinned, f"z3 {z3.get_full_version()} installed, {pinned} pinned: make setup"


TARGET_OPS = 99 if FULL else 6
"""CI generates toward the Makefile's targets of at most this many ops (tanh-GELU's and LayerNorm's 8 and 9 take
minutes of the suite's CPU) and leaves out the shipped rules only those it skips first found; SUBST_FULL=1 runs
them all."""


def _target_ops(name: str) -> int:
    """A target's ``max_ops`` in specs/targets.toml."""
    return tomllib.loads((ROOT / "specs" / "targets.toml").read_text())[name]["max_ops"]


VERIFIED = 0 if FULL else 24
"""How many of the regenerated rules CI verifies again, spread over the store (0: all, as `make store` does and
SUBST_FULL=1 runs; every rule takes some 6 min on the 2-core machine, and was a third of `make test`'s wall)."""


ONE_WORKER = ("--workers", "1")
"""Each step generates in one process: the rules are the same whatever the workers (`make store` ran its own
number, and test_generate.py checks 1 and 2 agree), and under `make test` pytest's other worker holds CI's
other core, so two forked workers gained no time and cost 10 s of CPU more in handing graphs back and forth."""


def test_shipped_store_is_what_generate_and_verify_produce(tmp_path: Path) -> None:
    """CI regenerates the store as `make store` does (TASO's set and convs with a bias, `--ops +bias`, then every
    pool in specs/pools/ in name order, then the spellings toward the Makefile's STORE_TARGETS, then the hand-written rules in specs/rules), compares every rule, and
    verifies a sample spread over them (`VERIFIED`) to compare its verdicts: a change to the generator, the
    fingerprints, the specs or the verifier that alters the store must come with a regenerated store (and then
    `make zoo-update`)."""
    from conftest import subst  # `make store`'s steps, in this process (a process each cost ~0.8 s of imports)

    from taso.rules import SPECS_DIR, store
    from taso.verify import load_specs, pending, verify_rows

    fresh = tmp_path / "fresh.db"
    r = subst("generate", "--ops", "+bias", "--store", fresh, "--json", *ONE_WORKER)
    assert r.returncode == 0, r.stderr
    for pool in sorted((ROOT / "specs" / "pools").glob("*.toml")):  # as `make store` takes them
        r = subst("generate", "--config", pool, "--store", fresh, "--json", *ONE_WORKER)
        assert r.returncode == 0, r.stderr
    targets = re.search(r"^STORE_TARGETS = (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert targets is not None, "the Makefile names the targets make store generates toward"
    left_out = set()
    for target in targets.group(1).split():
        if _target_ops(target) > TARGET_OPS:
            left_out.add(target)
            continue
        r = subst("generate", "--target", target, "--store", fresh, "--json", *ONE_WORKER)
        assert r.returncode == 0, r.stderr
    r = subst("rules", "add", *sorted((ROOT / "specs" / "rules").glob("*.rules")), "--store", fresh)
    assert r.returncode == 0, r.stderr

    def rules(path: Path) -> dict[str, tuple[str, str, str, str]]:
        """Each rule's sides, verdict and the verdict's reason by id: a report's ids name the same rules in a
        regenerated store."""
        return {
            x["rule_id"]: (x["src"], x["dst"], x["status"], json.loads(x["detail"] or "{}").get("reason", ""))
            for x in store.open_store(path)["rules"].rows
        }

    shipped = rules(ROOT / "substitutions.db")
    found_by_left_out = {
        x["rule_id"]
        for x in store.open_store(ROOT / "substitutions.db")["rules"].rows
        if (json.loads(x["provenance"] or "{}").get("target") or {}).get("name") in left_out
    }
    db = store.open_store(fresh)
    rows = pending(db)
    sample = rows if VERIFIED <= 0 else rows[:: max(1, len(rows) // VERIFIED)]
    verify_rows(db, sample, load_specs(SPECS_DIR))
    regenerated = rules(fresh)
    assert len(shipped) > 1000
    assert {k: v[:2] for k, v in regenerated.items()} == {
        k: v[:2] for k, v in shipped.items() if k in regenerated or k not in found_by_left_out
    }
    decided = {row["rule_id"] for row in sample}
    assert len(decided) >= min(VERIFIED, len(rows)) - 1
    # each rule is decided in a z3 context of its own (`taso.verify.Prover`): a verdict is the rule's and the
    # specs', whatever shard or sample holds it, so none may move, not even one at its budget's edge
    moved = {k: (shipped[k][2:], regenerated[k][2:]) for k in decided if regenerated[k][2] != shipped[k][2]}
    assert not moved, moved
