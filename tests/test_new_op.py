"""Adding an operator as CONTRIBUTING.md says (a catalogue entry and a spec) leaves every shipped proof trusted:
a spec that reads the op registry (specs/constants.py and specs/enlarge.py run `OPS["Eye"]` and
`OPS["Enlarge"]`) is digested by the entries it reads, not by the whole registry (`taso.verify.content`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from taso.ops import OPS, SIGMOID, field
from taso.rules import SPECS_DIR, parse_rules, provenance, store
from taso.search import rulecache
from taso.verify import Prover, content, load_specs
from taso.verify.basis import Basis

SOFTSIGN_SPEC = '''"""Softsign: x / (1 + |x|), element-wise, so it moves through transposes."""

from taso.verify import Axiom, D, R, Symbol, ints, tensors

SYMBOLS = [Symbol("softsign", 1, dims=lambda i, a, x: D(x, i), rank=lambda a, x: R(x), op="Softsign")]


def axioms(f):
    (x,) = tensors("x")
    m, n = ints("m n")
    return [Axiom("softsign-transpose", f.softsign(f.tr(x)), f.tr(f.softsign(x)), {"x": (m, n)}, generic=True)]
'''
SOFTSIGN_TRANSPOSE = """
rule softsign moves through a transpose
graph(%x: float32[2,3]):
  %t = Transpose(%x) {perm=[1, 0]} : float32[3,2]
  %y = Softsign(%t) : float32[3,2]
  return %y
=>
graph(%x: float32[2,3]):
  %s = Softsign(%x) : float32[2,3]
  %y = Transpose(%s) {perm=[1, 0]} : float32[3,2]
  return %y
"""


@pytest.fixture
def softsign(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real catalogue entry for Softsign, in the registry every stage and spec reads, for this test only."""
    entry = replace(
        SIGMOID,
        name="Softsign",
        compute=lambda xs, a, n: ((xs[0] / (1 + np.abs(xs[0]))).astype(xs[0].dtype),),
        doc="x / (1 + |x|); over Z_p a keyed random function.",
        field=lambda xs, a, n, key: (field.keyed(xs[0], key, "Softsign"),),
    )
    monkeypatch.setitem(OPS, "Softsign", entry)


def test_a_new_catalogue_entry_and_its_spec_keep_every_shipped_proof_trusted(tmp_path: Path, softsign: None) -> None:
    """With Softsign in the catalogue and a spec for it beside the shipped ones, the new op's rule is proved and
    every proof of the shipped store (180 of them rest on Eye or Enlarge) is still trusted."""
    specs_dir = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs_dir)
    (specs_dir / "softsign.py").write_text(SOFTSIGN_SPEC)
    specs = load_specs(specs_dir)
    assert Prover(specs).verdict(parse_rules(SOFTSIGN_TRANSPOSE)[0]).status == "proved"
    rules = rulecache.proved_rules(store.open_store(store.DEFAULT_PATH))
    resting = [r for r in rules if {"eye", "enlarge"} & set(r.detail.get("symbols", ()))]
    assert len(rules) > 1000 and len(resting) > 100
    kept, skipped = provenance.trusted(rules, Basis.of(specs).digest_of)
    assert not skipped and len(kept) == len(rules)


def _reads_one_entry() -> object:
    return OPS["Eye"]


def _reads_them_all() -> list[str]:
    return sorted(OPS)


def test_a_registry_read_by_key_is_digested_by_that_entry_and_one_read_whole_by_all(softsign: None) -> None:
    """A function that reads one entry of a mapping names that entry alone (and whether it is there); one that
    reads the mapping whole still names every entry: a new op changes its digest, as it changes what it does."""
    one, every = content.function(_reads_one_entry), content.function(_reads_them_all)
    assert "OPS['Eye']=" in one and "Softsign" not in one
    assert "'Softsign'" in every and "'Eye'" in every
    del OPS["Softsign"]
    assert content.function(_reads_one_entry) == one and content.function(_reads_them_all) != every


ENTRY_DIGESTS = """
import json
from taso import ops
from taso.rules import provenance
print(json.dumps({"verifier": provenance.verifier_digest(),
                  "entries": {op: provenance._entry_digest(op) for op in ops.OPS}}))
"""


def test_an_entry_written_into_a_catalogue_file_leaves_every_other_binding_as_it_was(tmp_path: Path) -> None:
    """What a proof's binding reads of the code (`provenance.bound`: the verifier's code, and the catalogue
    entries of the rule's ops) is the same in a copy of the package whose elementwise.py gains a Softsign entry:
    only Softsign's own entry is new. (When the whole catalogue's files were verifier code, it all moved.)"""
    import subprocess
    import sys

    import taso

    package = Path(taso.__file__).parent
    shutil.copytree(package, tmp_path / "taso", ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "taso" / "ops" / "elementwise.py").open("a") as f:
        f.write(
            '\nSOFTSIGN = _unary("Softsign", lambda x: (x / (1 + np.abs(x))).astype(x.dtype), "x / (1 + |x|).", set())\n'
        )

    def digests(root: Path) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", ENTRY_DIGESTS],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        )
        return json.loads(out.stdout)

    before, after = digests(package.parent), digests(tmp_path)
    assert set(after["entries"]) - set(before["entries"]) == {"Softsign"}
    assert after["verifier"] == before["verifier"]
    assert {op: after["entries"][op] for op in before["entries"]} == before["entries"]
