"""The certificate of a rewrite, and `certify`: every step from a model to its rewrite checked again.

`optimize` lists the steps it took from the imported model to its result (`taso.optimize.steps`): each pass
application with its validation, each batch of rule applications with the rules' ids and proof records, and
the `digest` of the graph before and after each. `certify` re-checks that list for a model and its rewrite,
without trusting any of it: the chain must start at the model, each step from the graph the step before it
made, and end at the rewrite; a pass step is replayed (the passes are deterministic) and validated again by
running its graphs; a rules step's rules must be in the store, proved and trusted under the specs now
(`taso.rules.provenance`), with the proof record the certificate carries, the ``always`` rules replayed, the
search's step (which a cost model found, so it is not replayed) the last, and its graphs run against each other
(`check.compare`, against a float64 reference). The verdict is what a user keeps beside the model.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from taso import onnx as onnx_io
from taso import pet
from taso.errors import BadInput
from taso.execute import check
from taso.ir import Graph
from taso.optimize import steps
from taso.rules import REVERSE, Rule, provenance, store
from taso.search import apply_everywhere, rulecache
from taso.verify import basis

FORMAT = "subst-certificate/1"
ALWAYS = "always rules"
"""The name of the step of the rules marked ``always`` (`taso.optimize.rewrites.apply_always`): replayed."""
SEARCH = "search"
"""The name of the search's step: found by a cost model, not replayed; it must be the last step."""


def certificate(
    imported: Graph, graph: Graph, made: Sequence[steps.Step], declined: Sequence[dict], dims: Mapping[str, int]
) -> dict:
    """The certificate of the rewrite of ``imported`` into ``graph`` by ``made``: what `certify` re-checks."""
    return {
        "format": FORMAT,
        "input": steps.digest(imported),
        "output": steps.digest(graph),
        "dims": dict(dims),
        "steps": [s.as_dict() for s in made],
        "declined": list(declined),
    }


def refuse_unwritable(path: Path, models: Sequence[Path]) -> None:
    """Refuse a certificate path before any work: a folder, a missing folder, or one of the ``models``."""
    if path.is_dir():
        raise BadInput(f"--certificate {path}: is a folder")
    if not path.parent.is_dir():
        raise BadInput(f"--certificate {path}: folder {path.parent} does not exist")
    if path.resolve() in {m.resolve() for m in models}:
        raise BadInput(f"--certificate {path}: is a model this run reads or writes; choose another path")


def write(path: Path, cert: dict) -> None:
    """``cert`` written to ``path`` through a temp file and a rename: never half a certificate."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(cert, indent=1, default=str) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: Path) -> tuple[dict, list[steps.Step]]:
    """The certificate at ``path`` and its steps; raises `BadInput` where it is no certificate."""
    try:
        cert = json.loads(path.read_text())
    except OSError as e:
        raise BadInput(f"{path}: cannot read the certificate ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not a certificate (not JSON: {e})") from None
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise BadInput(f"{path}: not a certificate (its format is not {FORMAT})")
    try:
        made = [steps.Step.from_dict(s) for s in cert["steps"]]
        cert["input"], cert["output"], cert["dims"] = str(cert["input"]), str(cert["output"]), dict(cert["dims"])
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"{path}: not a certificate (malformed: {e!r})") from None
    return cert, made


@dataclass
class Verdict:
    """`certify`'s verdict: each step checked (its index, name, kind and what checked it), and the first
    failure, which names its step (empty where certified)."""

    original: str
    rewrite: str
    checked: list[dict] = field(default_factory=list)
    failure: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failure

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def lines(self) -> list[str]:
        kinds = [c["kind"] for c in self.checked]
        return [
            f"original  {self.original}",
            f"rewrite   {self.rewrite}",
            *(f"step {c['step']:>3}  {c['kind']:<5} {c['name']}: {c['note']}" for c in self.checked),
            f"steps     {len(kinds)} checked: {kinds.count(steps.RULES)} by proved rules, "
            f"{kinds.count(steps.PASS)} by passes",
            f"verdict   {'CERTIFIED: every step accounted for' if self.ok else 'NOT CERTIFIED: ' + self.failure}",
            f"time      {self.seconds:.2f}s",
        ]


class _Failed(Exception):
    """A step (or the chain) that does not check: the message names it."""


def certify(
    original: str | Path,
    rewrite: str | Path,
    certificate_path: str | Path,
    store_path: str | Path = store.DEFAULT_PATH,
    specs: str | Path = provenance.SPECS_DIR,
) -> Verdict:
    """Re-check every step the certificate lists from ``original`` to ``rewrite``; raises `BadInput` where a
    file cannot be read as what it should be."""
    t0 = time.perf_counter()
    cert, made = read(Path(certificate_path))
    graph, _ = onnx_io.import_model(original)
    out, _ = onnx_io.import_model(rewrite)
    db = store.open_store(store_path, read_only=True)
    rules = rulecache.proved_rules(db)
    proved, _ = provenance.trusted(rules, basis.for_folder(specs).digest_of, db if rulecache.as_stored() else None)
    verdict = Verdict(str(original), str(rewrite))
    chain = _Chain(out, {r.id: r for r in proved}, [r for r in proved if r.always], steps.Validator(cert["dims"]))
    try:
        if steps.digest(graph) != cert["input"]:
            raise _Failed(f"the certificate is of another model than {original}")
        for k, s in enumerate(made, 1):
            try:
                graph, note = chain.check(graph, s, last=k == len(made))
            except _Failed as e:
                raise _Failed(f"step {k} ({s.name}): {e}") from None
            verdict.checked.append({"step": k, "kind": s.kind, "name": s.name, "note": note})
        if steps.digest(graph) != steps.digest(out) or cert["output"] != steps.digest(out):
            raise _Failed(f"the steps do not lead to {rewrite}: it was changed after the rewrite, or a step is missing")
    except _Failed as e:
        verdict.failure = str(e)
    verdict.seconds = time.perf_counter() - t0
    return verdict


@dataclass
class _Chain:
    """What checking a chain of steps needs: the rewrite, the rules trusted now, the validator of its graphs."""

    out: Graph
    trusted: dict[str, Rule]
    always: list[Rule]
    validator: steps.Validator

    def check(self, graph: Graph, s: steps.Step, last: bool) -> tuple[Graph, str]:
        """The graph step ``s`` makes from ``graph``, and what checked it; raises `_Failed`."""
        if s.before != steps.digest(graph):
            raise _Failed("does not start from the graph the step before it made")
        after = self._pass(graph, s) if s.kind == steps.PASS else self._rules(graph, s, last)
        if steps.digest(after) != s.after:
            raise _Failed("replayed, it makes another graph than the certificate says")
        again = steps.step(s.kind, s.name, graph, after)
        if (again.removed, again.added) != (s.removed, s.added):
            raise _Failed("the nodes it names as removed and added are not the ones it changed")
        if s.kind == steps.PASS:
            evidence = self._validate(graph, after)
            return (
                after,
                f"replayed and validated at sizes {evidence['sizes']}, max |diff| {evidence['max_abs_diff']:.3g}",
            )
        return after, self._compared(graph, after, s)

    def _pass(self, graph: Graph, s: steps.Step) -> Graph:
        run = steps.PASSES.get(s.name)
        if run is None:
            raise _Failed("no pass of that name")
        return run(graph)[0]

    def _rules(self, graph: Graph, s: steps.Step, last: bool) -> Graph:
        for r in s.rules:
            if str(r.get("id", "")).startswith(pet.PREFIX):
                continue  # a PET mutant is no rule: its exact correction rests on the comparison of the step's graphs
            rule = self.trusted.get(str(r.get("id", "")).removesuffix(REVERSE))
            if rule is None:
                raise _Failed(f"rule {r.get('id')} is not a proved rule of the store trusted under the specs")
            if r.get("proof") != rule.detail.get("proof"):
                raise _Failed(f"rule {r.get('id')}: its proof record is not the store's")
        if s.name == ALWAYS:
            return apply_everywhere(graph, self.always)[0]
        if not last:
            raise _Failed("found by a search, it is not replayed, so it must be the last step")
        return self.out

    def _validate(self, before: Graph, after: Graph) -> dict:
        try:
            return self.validator.validate(before, after)
        except steps.Invalid as e:
            raise _Failed(f"its graphs differ: {e}") from None
        except steps.Unevaluated as e:
            raise _Failed(f"cannot be validated: {e}") from None

    def _compared(self, before: Graph, after: Graph, s: steps.Step) -> str:
        """The rules step's graphs run against each other on the validator's input sets, judged against a
        float64 reference (`check.compare`): a proved rule rounds differently, not more."""
        try:
            self.validator.outputs(before)
        except check.RunError as e:
            raise _Failed(f"cannot be run: {e}") from None
        with tempfile.TemporaryDirectory(prefix="subst-certify-") as tmp:
            a = onnx_io.save_model(before, Path(tmp) / "before.onnx")
            b = onnx_io.save_model(after, Path(tmp) / "after.onnx")
            result = check.compare(a, b, before, inputs=check.Inputs(tuple(self.validator.sets)))
        if not result.ok:
            raise _Failed(f"its graphs differ: {result.summary()}")
        ids = ", ".join(f"{r['id']} x{r.get('count')}" for r in s.rules)
        return f"{len(s.rules)} proved rule(s) trusted ({ids}); graphs agree: {result.summary()}"
