"""What a proof rests on, and its digest: the specs' parts a proof used, as they are loaded, not the files.

A proof from the specs (`taso.verify.run.Prover`) used the axioms its unsat core names; the shape rules and
requirements of the symbols that its terms and those axioms mention (a rule's solver gets the shape rules of the
symbols its terms and given axioms hold, `taso.verify.run.reachable`; only those in play can fire); and the way each of the rule's ops is lowered onto symbols (a spec's
lowering function, or the one symbol that names the op). The digest a verdict records covers exactly these, each
from its content (`taso.verify.content`): an axiom's quantified formula, a symbol's shape axioms, requirement,
attributes and semantics, a lowering's code. So a spec for a new op, a comment or an import line keeps every
shipped proof trusted, while a change to anything a proof used, or its removal, makes optimize skip that rule
until `subst verify --force` proves it again.

Loading the specs to take these digests costs seconds (1.8 s of a cold start on the 2-core machine); `for_folder`
keeps each part's digest in the user's cache, filed under a digest of the specs' files and of the code that reads
them (`files_key`), so optimize pays it once per change; and the shipped specs' digests ship too (`SHIPPED`,
written by `make rulecache`), read where their key is the one the specs under the folder have, so a cold start
pays nothing. The key names no Python version: the parts are digested from syntax trees and z3 terms, which every
Python reads alike (tests/test_provenance.py holds the shipped specs to it), and a file's bytes, not its reader,
say whether what a proof rested on changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import z3

from taso.cachedir import cache_folder
from taso.rules import Rule
from taso.verify import content
from taso.verify.spec import Specs, Symbol, load_specs

SHIPPED = Path(__file__).with_name("basis.json")
"""The shipped specs' `Basis` (`ship`): ``{"key": files_key, "parts": ...}``, read only where the key is the
folder's; a stale or missing one is passed by."""
MISSING = None
"""The digest of a proof one of whose parts the specs no longer have: it matches no recorded digest."""


class Basis:
    """The digests of the parts of one set of specs that proofs rest on, by kind and name."""

    def __init__(self, parts: Mapping[str, str]) -> None:
        self.parts = dict(parts)
        """"axiom NAME", "symbol NAME" or "lowering OP" -> the digest of its content."""

    @classmethod
    def of(cls, specs: Specs) -> Basis:
        """Every part of ``specs`` a proof may rest on, digested."""
        parts = {f"axiom {a.name}": content.digest(content.term(a.formula)) for a in specs.axioms}
        parts |= {f"symbol {s.name}": _symbol(s) for s in specs.symbols.values()}
        parts |= {
            f"lowering {op}": "custom " + content.digest(content.function(fn)) for op, fn in specs.lowerings.items()
        }
        parts |= {f"lowering {op}": f"plain {s.name}" for op, s in specs.by_op.items()}
        return cls(parts)

    def digest(self, ops: Iterable[str], symbols: Iterable[str], axioms: Iterable[str]) -> str | None:
        """The digest of a proof of a rule over ``ops`` that used ``axioms`` and ``symbols``; `MISSING` where the
        specs lack one of them."""
        keys = sorted(
            {*(f"lowering {o}" for o in ops), *(f"symbol {s}" for s in symbols), *(f"axiom {a}" for a in axioms)}
        )
        if any(k not in self.parts for k in keys):
            return MISSING
        return content.digest("\n".join(f"{k} {self.parts[k]}" for k in keys))

    def digest_of(self, rule: Rule) -> str | None:
        """The digest of ``rule``'s recorded proof under these specs (what `taso.rules.provenance` compares)."""
        return self.digest(rule.ops, rule.detail.get("symbols", ()), rule.detail.get("axioms", ()))


def _symbol(s: Symbol) -> str:
    """A symbol's content: its signature, shape axioms, requirement, and the semantics the spec check runs. The
    shape axioms are the very terms a `Prover` asserts (z3 shares equal terms), and the requirement is read from
    its code: taking a digest makes no new z3 term, which could change the path of later proofs."""
    required = "" if s.requires is None else content.function(s.requires)
    semantics = {
        "fixed": repr(sorted(s.fixed.items(), key=str)),
        "derived": {k: content.function(f) for k, f in sorted(s.derived.items())},
        "compute": "" if s.compute is None else content.function(s.compute),
    }
    text = [s.name, str(s.arity), repr(s.attrs), s.op, *map(content.term, s.shape_axioms()), required, repr(semantics)]
    return content.digest("\n".join(text))


def for_folder(folder: str | Path) -> Basis:
    """The `Basis` of the specs under ``folder``, from the user's cache where these files were digested before
    (by this code), else from the specs loaded (`load_specs` refuses a broken folder: `BadInput`). A cached one
    is used only where it names the key it is filed under and its parts are the ones its digest vouches for
    (`_vouched`): an empty, cut or misfiled file is passed by, and the specs loaded again."""
    root = Path(folder)
    key = files_key(root)
    with contextlib.suppress(OSError, ValueError):
        parts = _vouched(json.loads(SHIPPED.read_text()), key)
        if parts is not None:
            return Basis(parts)
    try:
        path = cache_folder("specs-basis") / f"{key}.json"
    except OSError:
        return Basis.of(load_specs(root))  # no cache folder: the specs loaded, every time
    with contextlib.suppress(OSError, ValueError):
        parts = _vouched(json.loads(path.read_text()), key)
        if parts is not None:
            return Basis(parts)
    basis = Basis.of(load_specs(root))
    with contextlib.suppress(OSError):  # an unwritable cache only means loading the specs again next time
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            json.dump(_record(key, basis.parts), f, sort_keys=True)
        os.replace(f.name, path)
    return basis


def _record(key: str, parts: Mapping[str, str]) -> dict:
    """What a cached or shipped `Basis` holds: the key of the spec files it was taken from, its parts, and the
    digest of both."""
    return {"key": key, "parts": dict(parts), "digest": _digest(key, parts)}


def _digest(key: str, parts: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps([key, sorted(parts.items())]).encode()).hexdigest()


def _vouched(record: object, key: str) -> dict[str, str] | None:
    """The parts ``record`` (`_record`) holds where it was taken for ``key`` and they are those its digest
    covers, else None."""
    if not isinstance(record, dict) or record.get("key") != key or not isinstance(record.get("parts"), dict):
        return None
    parts = record["parts"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items()):
        return None
    return parts if record.get("digest") == _digest(key, parts) else None


def ship(folder: str | Path) -> None:
    """Write the `Basis` of the specs under ``folder`` as `SHIPPED` (through a temp file and a rename): for
    `make rulecache` only, since a run never writes into the package."""
    root = Path(folder)
    text = json.dumps(_record(files_key(root), Basis.of(load_specs(root)).parts), indent=0, sort_keys=True)
    with tempfile.NamedTemporaryFile("w", dir=SHIPPED.parent, delete=False, suffix=".tmp") as f:
        f.write(text + "\n")
    os.chmod(f.name, 0o644)  # package data: read by every user
    os.replace(f.name, SHIPPED)


def files_key(root: Path) -> str:
    """A digest of the spec files' names and bytes, of the code that turns them into a `Basis` and of the z3
    that builds their terms (pinned): equal keys, equal parts, under any Python version (the module says why)."""
    h = hashlib.sha256(f"{sys.implementation.name} {z3.get_full_version()}".encode())
    here = Path(__file__).resolve().parent
    for p in (here / "basis.py", here / "content.py", here / "spec.py", here / "elementwise.py"):
        h.update(p.read_bytes())
    for p in sorted(root.glob("*.py")):
        if not p.name.startswith("_"):
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:32]
