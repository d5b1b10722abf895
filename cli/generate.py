"""`subst generate` (enumerate small graphs, store candidate rules) and `subst rules` (browse a store)."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import click

from cli.options import store_option
from cli.progress import StageBars
from cli.target import generate_toward, target_lines
from taso.errors import BadInput
from taso.generate import FORMS, Executor, LocalExecutor, Result, Settings, load_config, save, settings_from
from taso.generate import generate as run_generate
from taso.generate.ray_executor import RayExecutor
from taso.generate.spool import default_folder, discard, stopped_at
from taso.generate.storing import Saved
from taso.ir import IRError
from taso.rules import ID_LENGTH, REVERSE, SPECS_DIR, STATUSES, Rule, parse_rules, store
from taso.verify import Unsupported, load_specs
from taso.verify.admit import admissible


def _form_table() -> str:
    return "\n".join(f"  {name:<15}{f.op:<14}{f.doc}" for name, f in FORMS.items())


@click.command(
    "generate",
    epilog="\b\nOp forms (default: all but sigmoid, tanh and the biased convs: TASO's set, which --ops taso names; "
    "--ops +bias adds the convs with a bias and two bias tensors to the pool):\n" + _form_table(),
)
@click.option(
    "--max-ops", type=click.IntRange(0, 12), help="Largest graph, in ops (6; 12 with --target).  [default: 3]"
)
@click.option(
    "--ops",
    metavar="FORMS",
    help="Comma-separated op forms, op names (Conv = every conv form), 'taso' (TASO's set, the default) or 'bias' "
    "(convs with a bias); start with + or - to add to or take from the default set, e.g. '-maxpool3,+sigmoid'.",
)
@click.option(
    "--config",
    type=click.Path(path_type=Path, dir_okay=False),
    help="JSON or TOML file with max_ops, ops (list of forms), inputs (list of {prefix, shape, kind, count}), "
    "constants ({form: shape}) and seed; flags override it.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="Processes (with --executor ray and no cluster: the CPUs of the Ray started here).  [default: all cores]",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where the work runs: processes of this machine, or Ray Core tasks (pip install 'subst[ray]').",
)
@click.option(
    "--address",
    metavar="ADDR",
    help="With --executor ray: the cluster to join (HOST:6379, or 'auto' for the one `ray start` made here); "
    "default: $RAY_ADDRESS, else a Ray started on this machine for the run and shut down after it.",
)
@click.option("--seed", type=int, default=None, help="Seed of the fingerprints' random inputs.  [default: 0]")
@click.option(
    "--work",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the levels on disk (gigabytes at --max-ops 4), kept if the run stops, removed once the rules "
    "are saved.  [default: a folder per settings under ~/.cache/subst/generate]",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Take up a stopped run of the same settings after the last level it completed (in --work's folder).",
)
@click.option(
    "--target",
    metavar="OP",
    help="Generate toward this op (or named target) of --targets instead of enumerating every graph: its "
    "spellings in catalogue ops, up to --max-ops (default: the target's), paired with it by fingerprint.",
)
@click.option(
    "--targets", "targets_file", type=click.Path(path_type=Path, dir_okay=False), help="TOML file of targets."
)
@store_option("Store to add the candidate rules to (created if missing).", writes=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def generate(
    max_ops: int | None,
    ops: str | None,
    config: Path | None,
    workers: int | None,
    executor: str,
    address: str | None,
    seed: int | None,
    work: Path | None,
    resume: bool,
    target: str | None,
    targets_file: Path | None,
    store_path: Path,
    as_json: bool,
) -> None:
    """Enumerate every graph of up to --max-ops ops, pair those that compute the same thing, store the pairs.

    Graphs are built from a fixed pool of small input tensors (2-D activations and weights, 4-D images, conv
    kernels, a scalar; conv biases with --ops +bias) and fingerprinted by exact evaluation over a prime field; relu and max pooling become
    random functions, so only identities that hold for every such function pair up. Only the cheapest graph
    of each fingerprint is grown further, and pairs implied by smaller ones are dropped. Every pair is stored
    with status `candidate`: run `subst verify` to prove them. Same flags and seed, same rules.

    \b
    Examples:
      subst generate                          # TASO's op set, 3 ops, into ./substitutions.db
      subst generate --ops +bias              # and convs with a bias: the shipped store
      subst generate --max-ops 4 --store big.db
      subst generate --ops matmul,add,concat1,split1 --max-ops 3 --store mm.db
      subst generate --ops=-maxpool3,+sigmoid --json
      subst generate --config my-pool.toml
      subst generate --max-ops 4 --executor ray                    # a Ray of this machine's cores
      ray start --head; subst generate --executor ray --address auto  # a cluster (ray start --address HEAD:6379)
      subst generate --max-ops 4 --resume     # after Ctrl-C: on from the last completed level

    Each level's graphs, classes and representatives are spooled to disk, so memory holds a bucket of them at
    a time; a run stopped by Ctrl-C, a kill or a lost cluster leaves the store as it was and its completed
    levels in the work folder, where --resume takes them up (the same settings only).

    With --target OP (e.g. LayerNormalization, Gelu, Softmax: specs/targets.toml lists them), only graphs whose
    every value is a piece of OP's defining expression are grown, up to 9-op patterns in seconds.
    """
    if target or targets_file:
        if ops or config or resume or work or seed is not None:
            raise BadInput("--target: --ops, --config, --seed, --work and --resume do not apply")
        data = generate_toward(target, targets_file, max_ops, executor, workers, address, store_path)
        click.echo(json.dumps(data, indent=2) if as_json else "\n".join(target_lines(data)))
        return
    try:
        cfg = load_config(config) if config else None
    except UnicodeDecodeError:
        raise BadInput(f"{config}: not UTF-8 text; a config is a JSON or TOML file") from None
    settings = settings_from(cfg, ops, max_ops, seed)
    if address and executor != "ray":
        raise BadInput("--address: give it with --executor ray")
    store.require_writable(store_path)  # refuse a store it cannot write before hours of work, not after
    folder = work or default_folder(settings)
    if not resume and (done := stopped_at(folder, settings)) >= 0:
        click.echo(f"starting afresh: {folder} held a run stopped after {done} ops (--resume takes it up)", err=True)
    job = _Job(settings, store_path, folder, resume)
    if executor == "ray":
        data = _apart(job, RayExecutor(address, workers))
    else:
        data = _generate_and_save(job, LocalExecutor(workers))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo("\n".join(_summary_lines(data)))


@dataclass(frozen=True)
class _Job:
    settings: Settings
    store_path: Path
    work: Path
    resume: bool


def _generate_and_save(job: _Job, runner: Executor) -> dict:
    """Generate, add the rules to the store, drop the work folder, and the summary. A run interrupted first says
    where its completed levels wait (an error says only itself: one line)."""
    start = time.perf_counter()
    try:  # progress on stderr: --json stays clean
        result = run_generate(job.settings, progress=_Bar(), executor=runner, work=job.work, resume=job.resume)
    except BaseException as e:
        if not isinstance(e, Exception) and (done := stopped_at(job.work, job.settings)) >= 0:  # Ctrl-C, SIGTERM
            click.echo(f"\nthe levels up to {done} ops are kept in {job.work}: --resume takes them up", err=True)
        raise
    try:
        saved = save(result, job.store_path)
    except (OSError, sqlite3.OperationalError) as e:
        msg = getattr(e, "strerror", None) or e
        raise BadInput(f"{job.store_path}: cannot write the store ({msg}); --resume judges the pairs again") from None
    discard(job.work)
    return _summary(result, time.perf_counter() - start, job.store_path, saved)


def _apart(job: _Job, runner: RayExecutor) -> dict:
    """A Ray run, made in a child process: Ray may end its driver's process when the cluster goes away under it
    (or raise there, as `RayExecutor.map` reports), and this one is left to say so in one line (exit 2). The store is written only once the work is done, through a
    temporary copy (`taso.generate.save`), so it stays as it was."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run_child, args=(job, runner, send))
    child.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        child.join()
        raise BadInput(
            f"--executor ray: the cluster failed mid-run (Ray ended the run, exit code {child.exitcode}); "
            "the store is unchanged"
        ) from None
    child.join()
    if not ok:
        raise value
    return value


def _run_child(job: _Job, runner: RayExecutor, send: Connection) -> None:
    try:
        send.send((True, _generate_and_save(job, runner)))
    except Exception as e:
        if not isinstance(e, BadInput):  # a bug: its traceback, from where it happened
            traceback.print_exc()
        send.send((False, e))


class _Bar(StageBars):
    """A progress bar per level, labelled with the graphs built, the classes, the rate, the time left and the
    memory of the run's processes; then one for judging the pairs, and one for folding the rules."""

    def __init__(self) -> None:
        super().__init__("representatives extended")
        self.base = self.seen = 0  # graphs built before this level, and so far

    def __call__(self, stage: str, done: int, total: int, counts: dict) -> None:
        if stage != self.stage:
            self.base, self.start = self.seen, time.perf_counter()
            self.unit = {"pairs": "pairs judged", "classes": "buckets filed", "fold": "rules folded"}.get(
                stage.split()[-1], "representatives extended"
            )
        elapsed = time.perf_counter() - self.start
        tail = f", {counts['memory'] / 2**30:.2f} GB" if counts.get("memory") else ""
        if elapsed > 0.5 and 0 < done < total:
            tail = f", {_clock(elapsed * (total - done) / done)} left" + tail
        if stage == "pairs":
            rate = f", {done / elapsed:,.0f} pairs/s" if elapsed > 0.5 else ""
            self.update(stage, done, total, f" pairs | {counts['classes']:,} classes{rate}{tail}")
            return
        if stage == "fold":
            self.update(stage, done, total, f"  fold | {counts['kept']:,} rules kept{tail}")
            return
        if stage.endswith("classes"):
            self.update(stage, done, total, f"{stage:>6} | {counts['classes']:,} classes{tail}")
            return
        self.seen = counts["graphs"]
        rate = f", {(self.seen - self.base) / elapsed:,.0f} graphs/s" if elapsed > 0.5 else ""
        label = f"{stage:>6} | {counts['graphs']:,} graphs, {counts['classes']:,} classes{rate}{tail}"
        self.update(stage, done, total, label)


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _summary(result: Result, wall: float, path: Path, saved: Saved) -> dict:
    return {
        "settings": result.settings.as_dict(),
        "graphs": {f"{n} ops": g for n, g in enumerate(result.graphs)},
        "graphs_total": sum(result.graphs),
        "classes": result.classes,
        "candidates": result.candidates,
        "rules": len(result.rules),
        "pruned": dict(result.pruned.most_common()),
        "store": str(path),
        "added": saved.added,
        "already_in_store": saved.already,
        "size_dependent": saved.size_dependent,
        "not_resized": saved.not_resized,
        "wall_s": round(wall, 2),
        "resumed_after_ops": result.resumed_after if result.resumed_after >= 0 else None,
    }


def _summary_lines(d: dict) -> list[str]:
    s = d["settings"]
    return [
        f"settings    up to {s['max_ops']} ops, {len(s['forms'])} op forms, "
        f"{sum(c['count'] for c in s['pool'])} input tensors, seed {s['seed']}",
        "graphs      " + ", ".join(f"{k}: {v:,}" for k, v in d["graphs"].items()) + f"  (total {d['graphs_total']:,})",
        f"classes     {d['classes']:,} fingerprints looked at",
        f"candidates  {d['candidates']:,} pairs of equal fingerprint",
        f"rules       {d['rules']:,} after pruning; {d['added']:,} added to {d['store']}"
        + (f" ({d['already_in_store']:,} already there)" if d["already_in_store"] else ""),
        f"sizes       {d['size_dependent']:,} dropped: they differ at grown sizes; "
        f"{d['not_resized']:,} stored on one check: their sizes cannot grow",
        f"time        {d['wall_s']:.1f} s"
        + (f" (resumed after {d['resumed_after_ops']} ops)" if d["resumed_after_ops"] is not None else ""),
        "pruned:",
        *(f"  {v:>12,}  {k}" for k, v in d["pruned"].items()),
    ]


# ---- browsing a store ---------------------------------------------------------------------------------------


_STORE_OPTION = store_option("Rule store to read.")


@click.group("rules")
def rules() -> None:
    """Browse the rules in a store: list them, show one, count them.

    \b
    Examples:
      subst rules stats
      subst rules list --op MatMul --max-ops 2
      subst rules list --status proved --json
      subst rules show 17
    """


def _where(op: str | None, max_ops: int | None, status: str | None) -> tuple[str | None, list]:
    where, args = [], []
    if op:
        where.append("(' ' || ops || ' ') LIKE ?")
        args.append(f"% {op} %")
    if max_ops is not None:
        where.append("src_ops <= ? AND dst_ops <= ?")
        args += [max_ops, max_ops]
    if status:
        where.append("status = ?")
        args.append(status)
    return " AND ".join(where) or None, args


@rules.command("add")
@store_option("Store to add the rules to (created if missing).", writes=True)
@click.argument("rules_files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def add_rules(store_path: Path, rules_files: tuple[Path, ...], as_json: bool) -> None:
    """Add hand-written rules from RULES_FILES to the store as candidates; `subst verify` then proves them.

    For identities the generator cannot find: ops without finite-field semantics (BatchNormalization), or
    attributes that should be free (a rule that holds for every stride and padding). Each rule is a block:

    \b
      rule NAME
      free: ATTR ...            (optional: attributes that match any value)
      graph(...): ...           (the source, as `subst rules show` prints graphs)
      =>
      graph(...): ...           (the target)

    The values written for free attributes are an example: the verifier's numeric pre-check runs it, z3
    proves the rule for every value. A target attribute whose value no source node has is a literal
    (`group=1` for a grouped conv made plain). Each rule is read as import reads a model's nodes: ops in the
    catalogue, attributes it models (defaults filled in), declared types the ones it computes, and a form the
    specs can lower; each rule that is not gets one line, and then nothing is added. Rules already in the store
    are left as they are; every file is read before any rule is added, so a broken file adds nothing.

    \b
    Example:
      subst rules add specs/rules/*.rules && subst verify     # into ./substitutions.db
    """
    written: dict[Path, list] = {}
    for path in rules_files:
        try:
            written[path] = parse_rules(path.read_text())
        except OSError as e:
            raise BadInput(f"{path}: cannot read ({e.strerror})") from None
        except UnicodeDecodeError:
            raise BadInput(f"{path}: not UTF-8 text; a rules file is text as `subst rules show` prints") from None
        except IRError as e:
            raise BadInput(f"{path}: {e}") from None
    written = _admitted(written)
    store.require_writable(store_path)
    db = store.open_store(store_path, create_missing=True)
    have = store.known(db)
    files = []
    for path, rules_in in written.items():
        keys = [(row["src"], row["dst"]) for row in (r.to_row() for r in rules_in)]
        new = [r for r, key in zip(rules_in, keys) if key not in have]
        added = store.add_rules(db, new, provenance={"written": path.name})
        have |= set(keys)
        files.append({"file": str(path), "rules": len(rules_in), "added": added})
    data = {"files": files, "added": sum(f["added"] for f in files), "store": str(store_path)}
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for f in files:
        click.echo(f"{f['added']} of {f['rules']} rules from {f['file']} added to {store_path} as candidates")


def _admitted(written: dict[Path, list[Rule]]) -> dict[Path, list[Rule]]:
    """Each file's rules in the catalogue's normal form, as import reads a model's nodes (`taso.verify.admit`);
    every rule that is not gets one line on stderr, and then nothing is added (BadInput)."""
    specs = load_specs(SPECS_DIR)
    out: dict[Path, list[Rule]] = {}
    refused = 0
    for path, rules_in in written.items():
        out[path] = []
        for r in rules_in:
            try:
                out[path].append(admissible(r, specs))
            except Unsupported as e:
                click.echo(f"{path}: rule {r.name!r}: {e}", err=True)
                refused += 1
    if refused:
        raise BadInput(f"{refused} rule(s) refused (see above): nothing added")
    return out


@rules.command("list")
@_STORE_OPTION
@click.option("--op", help="Only rules using this op on either side (e.g. Conv, MatMul).")
@click.option("--max-ops", type=click.IntRange(0), help="Only rules with at most this many ops on each side.")
@click.option("--status", type=click.Choice(STATUSES), help="Only rules with this status.")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True, help="At most this many (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON (graphs in text form).")
def list_rules(
    store_path: Path, op: str | None, max_ops: int | None, status: str | None, limit: int, as_json: bool
) -> None:
    """One line per rule: its store row, its id (what reports name it by), status, ops on each side, and its
    name: the one written by hand, else the algebra of each side."""
    db = store.open_store(store_path)
    where, args = _where(op, max_ops, status)
    rows = list(db["rules"].rows_where(where, args, order_by="id", limit=limit or None))
    if as_json:
        click.echo(json.dumps([_row_json(r) for r in rows], indent=2))
        return
    click.echo(f"{'row':>6}  {'id':<{ID_LENGTH}}  {'status':<10}{'ops':>7}  name")
    for r in rows:
        click.echo(f"{r['id']:>6}  {r['rule_id']}  {r['status']:<10}{r['src_ops']:>3}->{r['dst_ops']:<2}  {_title(r)}")
    total = db["rules"].count_where(where, args)
    if total > len(rows):
        click.echo(f"... {total - len(rows)} more (use --limit 0 for all)")


@rules.command("show")
@_STORE_OPTION
@click.argument("rule_id")
@click.option("--json", "as_json", is_flag=True, help="Print the rule as JSON.")
def show_rule(store_path: Path, rule_id: str, as_json: bool) -> None:
    """Both sides of rule RULE_ID, its fingerprint, provenance and verdict detail. RULE_ID is the id a report
    or `rules list` gives (``ID~reverse``, a rule applied backwards, shows that rule), or its store row."""
    db = store.open_store(store_path)
    r = store.find_rule(db, rule_id)
    if r is None:
        raise BadInput(f"{store_path}: no rule with id {rule_id}")
    if as_json:
        click.echo(json.dumps(_row_json(r), indent=2))
        return
    click.echo(f"rule {r['rule_id']} (row {r['id']})  {_title(r)}  [{r['status']}]  fingerprint {r['fingerprint']}")
    if rule_id.endswith(REVERSE):
        click.echo("applied backwards: the target below was rewritten into the source")
    click.echo(r["src"])
    click.echo("=>")
    click.echo(r["dst"])
    if r["conditions"] not in (None, "[]"):
        click.echo(f"conditions {r['conditions']}")
    if r["detail"] not in (None, "{}"):
        click.echo(f"detail     {r['detail']}")
    click.echo(f"provenance {r['provenance']}")


@rules.command("stats")
@_STORE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def rule_stats(store_path: Path, as_json: bool) -> None:
    """How many rules, by status, by size (source ops -> target ops) and by op."""
    db = store.open_store(store_path)
    by_status = {r["status"]: r["n"] for r in db.query("SELECT status, count(*) AS n FROM rules GROUP BY status")}
    by_size = {
        f"{r['src_ops']}->{r['dst_ops']}": r["n"]
        for r in db.query("SELECT src_ops, dst_ops, count(*) AS n FROM rules GROUP BY src_ops, dst_ops ORDER BY 1, 2")
    }
    by_op: dict[str, int] = {}
    for r in db.query("SELECT ops FROM rules"):
        for op in (r["ops"] or "").split():
            by_op[op] = by_op.get(op, 0) + 1
    data = {
        "store": str(store_path),
        "rules": sum(by_status.values()),
        "by_status": by_status,
        "by_size": by_size,
        "by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{data['rules']} rules in {store_path}")
    click.echo("status  " + ", ".join(f"{k} {v}" for k, v in by_status.items()))
    click.echo("size    " + ", ".join(f"{k}: {v}" for k, v in by_size.items()))
    click.echo("ops     " + ", ".join(f"{k} {v}" for k, v in data["by_op"].items()))


def _title(row: dict) -> str:
    return store.rule_of(row).title


def _row_json(r: dict) -> dict:
    out = {**r, "title": _title(r)}
    for k in ("conditions", "provenance", "detail"):
        out[k] = json.loads(r[k]) if r.get(k) else None
    return out
