"""The command line as a user meets it: one clear line and exit 2 on bad input, nothing half-written."""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, prove_into, subst
from onnx import TensorProto, helper, numpy_helper
from test_check import vad_inputs, vad_model
from test_provenance import DISTRIBUTE

from taso import onnx as onnx_io
from taso.cost.tables import PRIORS
from taso.errors import CheckFailed
from taso.execute import compare, tolerance
from taso.ir import Graph, Node
from taso.optimize import optimize
from taso.rules import parse_rules, store


def _tiny(opset: int = 17, domain: str = "", op: str = "Relu") -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="n", domain=domain)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _outside_external_data(folder: Path) -> Path:
    model = _tiny()
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../secret.bin")
    model.graph.initializer.append(w)
    model.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"], name="add"))
    model.graph.output[0].name = "z"
    (folder.parent / "secret.bin").write_bytes(b"\0" * 24)
    path = folder / "escape.onnx"
    onnx.save_model(model, str(path))
    return path


def _bad_inputs(tmp: Path, bert: Path) -> dict[str, tuple[list[str], str]]:
    """case -> (arguments, text the one-line message must contain)."""
    (tmp / "text.onnx").write_text("definitely not a protobuf\n")
    (tmp / "truncated.onnx").write_bytes(bert.read_bytes()[: bert.stat().st_size // 3])
    onnx.save_model(_tiny(domain="com.nobody"), str(tmp / "domain.onnx"))
    onnx.save_model(_tiny(op="NoSuchOp"), str(tmp / "unknown_op.onnx"))
    onnx.save_model(_tiny(opset=99), str(tmp / "opset99.onnx"))
    escape = _outside_external_data(tmp)
    (tmp / "a_file").write_text("x")
    (tmp / "latin1.json").write_bytes('{"max_ops": 2, "note": "été"}'.encode("latin-1"))
    (tmp / "costs_object.json").write_text('{"foo": 1}')
    (tmp / "costs_list.json").write_text("[1, 2, 3]")
    out = str(tmp / "out.onnx")
    opt = ["optimize", bert, "-o", out]
    nodir = tmp / "no" / "s.db"
    costs = [*opt, "--store", ROOT / "substitutions.db", "--costs"]
    ids = np.ones((1, 8), np.int64)
    np.savez(tmp / "bert.npz", input_ids=ids, attention_mask=ids)
    np.savez(tmp / "extra.npz", input_ids=ids, attention_mask=ids, token_type_ids=ids)
    np.savez(tmp / "lacking.npz", input_ids=ids)
    np.savez(tmp / "int32.npz", input_ids=ids.astype(np.int32), attention_mask=ids)
    np.savez(tmp / "rank1.npz", input_ids=ids[0], attention_mask=ids)
    np.savez(tmp / "two_seqs.npz", input_ids=ids, attention_mask=np.ones((1, 9), np.int64))
    np.savez(tmp / "objects.npz", input_ids=np.array([None, 1], object), attention_mask=ids)
    np.save(tmp / "one.npy", ids)
    vad = vad_model(tmp / "vad.onnx")
    np.savez(tmp / "vad_batch2.npz", **{**vad_inputs(8000), "x": np.ones((2, 512), np.float32)})
    np.savez(tmp / "vad_24000.npz", **vad_inputs(24000))
    store.create(tmp / "empty.db")
    inputs = [*opt, "--check-inputs"]
    on_vad = ["optimize", vad, "-o", out, "--store", tmp / "empty.db", "--device", "estimate"]
    return {
        "missing file": (["optimize", tmp / "nope.onnx", "-o", out], "no such file"),
        "not onnx": (["optimize", tmp / "text.onnx", "-o", out], "not an ONNX model"),
        "truncated": (["optimize", tmp / "truncated.onnx", "-o", out], "not an ONNX model"),
        "unknown op domain": (["optimize", tmp / "domain.onnx", "-o", out], "domain 'com.nobody'"),
        "unknown op": (["optimize", tmp / "unknown_op.onnx", "-o", out], "NoSuchOp"),
        "unsupported opset": (["optimize", tmp / "opset99.onnx", "-o", out], "opset 99"),
        "external data escapes": (["optimize", escape, "-o", out], "outside the model's folder"),
        "output folder missing": (["optimize", bert, "-o", tmp / "no" / "dir" / "o.onnx"], "does not exist"),
        "output under a file": (["optimize", bert, "-o", tmp / "a_file" / "o.onnx"], "is not a folder"),
        "output is a folder": (["optimize", bert, "-o", tmp], "is a folder"),
        "output overwrites input": (["optimize", bert, "-o", bert], "overwrite the input"),
        "bad flag": (["optimize", bert, "-o", out, "--bogus"], "No such option"),
        "bad flag value": (["optimize", bert, "-o", out, "--rtol", "lots"], "'lots' is not a valid float"),
        "missing store": (["optimize", bert, "-o", out, "--store", tmp / "none.db"], "no such store"),
        "store not sqlite": (["optimize", bert, "-o", out, "--store", tmp / "text.onnx"], "not a subst store"),
        "info on corrupt model": (["info", tmp / "truncated.onnx"], "not an ONNX model"),
        "costs not UTF-8": ([*costs, tmp / "latin1.json"], "not UTF-8"),
        "costs of other keys": ([*costs, tmp / "costs_object.json"], "not a cost table"),
        "costs a list": ([*costs, tmp / "costs_list.json"], "not a cost table"),
        "cuda graph on the cpu": ([*opt, "--cuda-graph"], "CUDA graphs need --device cuda"),
        "cuda graph from a table": ([*costs, PRIORS[0], "--cuda-graph", "--device", "cuda"], "measures nothing"),
        "no prior from a table": ([*costs, PRIORS[0], "--no-prior"], "--no-prior: measures every unit"),
        "no prior estimated": ([*opt, "--device", "estimate", "--no-prior"], "--no-prior: measures every unit"),
        "config not UTF-8": (["generate", "--config", tmp / "latin1.json", "--store", tmp / "new.db"], "not UTF-8"),
        "rules file not UTF-8": (["rules", "add", tmp / "latin1.json", "--store", tmp / "new.db"], "not UTF-8"),
        "rule id past SQLite's": (["rules", "show", str(2**64)], "no rule with id 18446744073709551616"),
        "rule id unknown": (["rules", "show", "0123456789"], "no rule with id 0123456789"),
        "rules into a missing folder": (
            ["rules", "add", ROOT / "specs/rules/batchnorm.rules", "--store", nodir],
            "folder",
        ),
        "report folder missing": ([*opt, "--report", tmp / "no" / "r.json"], "does not exist"),
        "report onto a folder": ([*opt, "--report", tmp], "is a folder"),
        "report onto the output": ([*opt, "--report", out], "a model this run reads or writes"),
        "alpha nan": ([*opt, "--alpha", "nan"], "not a finite number"),
        "alpha negative": ([*opt, "--alpha", "-1"], "x>0"),
        "rtol negative": ([*opt, "--rtol", "-1"], "x>=0"),
        "atol infinite": ([*opt, "--atol", "inf"], "not a finite number"),
        "time limit nan": ([*opt, "--time-limit", "nan"], "not a finite number"),
        "measure limit negative": ([*opt, "--measure-limit", "-1"], "x>=0"),
        "budget zero": ([*opt, "--budget", "0"], "x>=1"),
        "verify timeout nan": (["verify", "--timeout", "nan", "--store", tmp / "new.db"], "not a finite number"),
        "unknown dim": ([*opt, "--dim", "foo=3"], "its inputs have batch, seq"),
        "profile unknown dim": (["profile", bert, "--dim", "sequence=8"], "batch, seq"),
        "check inputs missing": ([*inputs, tmp / "none.npz"], "none.npz: no such file"),
        "check inputs a folder": ([*inputs, tmp], "is a folder"),
        "check inputs not npz": ([*inputs, tmp / "text.onnx"], "not an npz file"),
        "check inputs one array": ([*inputs, tmp / "one.npy"], "one .npy array, not an npz"),
        "check inputs of objects": ([*inputs, tmp / "objects.npz"], "not an npz of plain arrays"),
        "check inputs name no input": ([*inputs, tmp / "extra.npz"], "'token_type_ids' is not an input of the model"),
        "check inputs lack one": ([*inputs, tmp / "lacking.npz"], "no array for input 'attention_mask'"),
        "check inputs dtype": ([*inputs, tmp / "int32.npz"], "'input_ids' is int32, the model takes int64"),
        "check inputs rank": ([*inputs, tmp / "rank1.npz"], "the model takes rank 2"),
        "check inputs two sizes of a dim": (
            [*inputs, tmp / "two_seqs.npz"],
            "gives seq=9, but 'input_ids' gives seq=8",
        ),
        "check inputs against --dim": ([*inputs, tmp / "bert.npz", "--dim", "seq=4"], "seq=8, but --dim seq=4"),
        "check inputs and no check": ([*inputs, tmp / "bert.npz", "--no-check"], "the check is off"),
        "check inputs fixed dim": ([*on_vad, "--check-inputs", tmp / "vad_batch2.npz"], "fixes its dim 0 at 1"),
        "check inputs the original rejects": (
            [*on_vad, "--check-inputs", tmp / "vad_24000.npz"],
            "cannot run the original model on --check-inputs",
        ),
        "inputs that need meaningful values": (on_vad, "'sr' (int64) likely needs meaningful values"),
    }


CASE_NAMES = [
    "missing file",
    "not onnx",
    "truncated",
    "unknown op domain",
    "unknown op",
    "unsupported opset",
    "external data escapes",
    "output folder missing",
    "output under a file",
    "output is a folder",
    "output overwrites input",
    "bad flag",
    "bad flag value",
    "missing store",
    "store not sqlite",
    "info on corrupt model",
    "costs not UTF-8",
    "costs of other keys",
    "costs a list",
    "cuda graph on the cpu",
    "cuda graph from a table",
    "no prior from a table",
    "no prior estimated",
    "config not UTF-8",
    "rules file not UTF-8",
    "rule id past SQLite's",
    "rules into a missing folder",
    "report folder missing",
    "report onto a folder",
    "report onto the output",
    "alpha nan",
    "alpha negative",
    "rtol negative",
    "atol infinite",
    "time limit nan",
    "measure limit negative",
    "budget zero",
    "verify timeout nan",
    "unknown dim",
    "profile unknown dim",
    "check inputs missing",
    "check inputs a folder",
    "check inputs not npz",
    "check inputs one array",
    "check inputs of objects",
    "check inputs name no input",
    "check inputs lack one",
    "check inputs dtype",
    "check inputs rank",
    "check inputs two sizes of a dim",
    "check inputs against --dim",
    "check inputs and no check",
    "check inputs fixed dim",
    "check inputs the original rejects",
    "inputs that need meaningful values",
]


PROGRESS_LINE = re.compile(r"^.+ \([\d,]+/[\d,]+ \w+(, [^)]*)?\)$")
"""A line `cli.progress.StageBars` writes off a terminal as a stage ends: a log of work done before the error."""


def _without_progress(stderr: str) -> list[str]:
    return [line for line in stderr.strip().splitlines() if not PROGRESS_LINE.match(line)]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_is_one_line_exit_2_nothing_written(case: str, tmp_path: Path, bert_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    args, expected = _bad_inputs(work, bert_path)[case]
    before = set(os.listdir(work))
    r = subst(*args)
    assert r.returncode == 2, r.stderr
    lines = _without_progress(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("subst: error:"), r.stderr
    assert expected in lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert set(os.listdir(work)) == before  # no output, no temp folder left behind
    assert bert_path.stat().st_size > 0


def test_unwritable_output_folder(tmp_path: Path, bert_path: Path) -> None:
    """With the shipped store (proved rules): the folder is tried before any search or measurement."""
    if os.geteuid() == 0:
        target = Path("/proc/subst-test.onnx")  # even root cannot create files in /proc
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = locked / "o.onnx"
    r = subst("optimize", bert_path, "-o", target)
    assert r.returncode == 2 and "cannot write" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not target.exists()


def _sabotage(g: Graph) -> tuple[Graph, dict[str, int]]:
    """A wrong rewrite: every Tanh becomes a Relu. The check must catch it."""
    nodes = tuple(replace(n, op="Relu") if n.op == "Tanh" else n for n in g.nodes)
    assert nodes != g.nodes
    return replace(g, nodes=nodes), {"tanh-is-relu": 1}


def test_check_refuses_a_wrong_rewrite_and_writes_nothing(tmp_path: Path, bert_path: Path) -> None:
    out = tmp_path / "out.onnx"
    with pytest.raises(CheckFailed, match="pooler_output") as info:
        optimize(bert_path, out, rewrite=_sabotage)
    assert info.value.report.rules_applied == {"tanh-is-relu": {"name": "tanh-is-relu", "count": 1}}
    assert not out.exists() and os.listdir(tmp_path) == []


def test_check_catches_a_model_onnxruntime_cannot_run(tmp_path: Path, bert_path: Path) -> None:
    def broken(g: Graph) -> tuple[Graph, dict[str, int]]:
        return replace(
            g, nodes=tuple(replace(n, op="Relu") if n.op == "Softmax" and isinstance(n, Node) else n for n in g.nodes)
        ), {}

    out = tmp_path / "out.onnx"
    with pytest.raises(CheckFailed):
        optimize(bert_path, out, rtol=0, atol=0, rewrite=broken)
    assert not out.exists()


def test_optimize_report_and_json(tmp_path: Path, bert_path: Path, empty_store: Path) -> None:
    out = tmp_path / "o.onnx"
    r = subst("optimize", bert_path, "-o", out, "--store", empty_store, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["check"]["ok"] and report["nodes_before"] == report["nodes_after"] == 83
    assert out.is_file()
    r = subst("optimize", bert_path, "-o", tmp_path / "p.onnx", "--store", empty_store)
    assert r.returncode == 0 and "check     match" in r.stdout


def test_shipped_store_optimizes_the_bundled_model(tmp_path: Path, bert_path: Path) -> None:
    """What `make run` does, costed with the committed reference table so nothing is measured or cached."""
    shipped = ROOT / "substitutions.db"
    before = shipped.read_bytes()
    r = subst(
        "optimize",
        bert_path,
        "-o",
        tmp_path / "o.onnx",
        "--costs",
        ROOT / "taso" / "cost" / "reference_costs.json",
        "--dim",
        "batch=1",
        "--dim",
        "seq=32",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["check"]["ok"] and shipped.read_bytes() == before
    # progress goes to stderr (a line per finished stage when it is not a terminal), so stdout stays JSON
    # ... and says how long each took (nothing is measured with a cost table)
    stages = re.findall(r"^(\w[\w ]*) \((\d+)/(\d+) steps, \d+\.\d s\)$", r.stderr, re.M)
    assert [s for s, done, total in stages if done == total and int(total) > 0] == [
        "importing",
        "reading rules",
        "preparing the cost model",
        "searching regions",
        "exporting",
        "checking",
    ]


def test_no_check_skips_onnxruntime(tmp_path: Path, bert_path: Path, empty_store: Path) -> None:
    r = subst("optimize", bert_path, "-o", tmp_path / "o.onnx", "--store", empty_store, "--no-check", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["check"] is None


def test_info_reports_coverage(bert_path: Path) -> None:
    r = subst("info", bert_path, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["census"]["MatMul"] == {"count": 16, "covered": 16}
    assert data["census"]["Erf"] == {"count": 2, "covered": 2} and "Erf" not in data["not_covered"]
    # the position-id Gather reads a constant index; the two embedding lookups read token ids, computed
    assert data["census"]["Gather"] == {"count": 3, "covered": 1}
    assert data["not_covered"]["Gather"] == {"Gather indices not a constant": 2}
    assert data["not_covered"]["Range"] == {"not in the catalogue": 1}
    assert data["inputs"] == {"input_ids": "int64[batch,seq]", "attention_mask": "int64[batch,seq]"}


def test_help_teaches() -> None:
    r = subst("--help")
    assert r.returncode == 0 and "subst optimize IN -o OUT" in r.stdout and "Exit codes" in r.stdout
    r = subst("optimize", "--help")
    assert r.returncode == 0 and "--no-check" in r.stdout and "Example" in r.stdout
    assert "--check-inputs FILE.npz" in r.stdout and "np.savez" in r.stdout
    assert "--no-prior Measure every unit here" in " ".join(r.stdout.split())  # for building a device's table


def test_a_model_that_runs_only_on_meaningful_inputs_is_checked_on_the_users(tmp_path: Path, empty_store: Path) -> None:
    """The voice-activity model in miniature: refused without --check-inputs (exit 2, the message says what to
    do), optimized with two input sets (8000 and 16000 Hz, 512 samples binding the symbolic dim), the check
    passing on both and the report saying whose inputs it ran on."""
    vad = vad_model(tmp_path / "vad.onnx")
    out = tmp_path / "out.onnx"
    base = ["optimize", vad, "-o", out, "--store", empty_store, "--device", "estimate"]
    r = subst(*base)
    assert r.returncode == 2 and "--check-inputs FILE.npz" in r.stderr and not out.exists()
    for sr in (8000, 16000):
        np.savez(tmp_path / f"{sr}.npz", **vad_inputs(sr, seed=sr))
    r = subst(*base, "--check-inputs", tmp_path / "8000.npz", "--check-inputs", tmp_path / "16000.npz", "--json")
    assert r.returncode == 0, r.stderr
    check = json.loads(r.stdout)["check"]
    assert check["ok"] and check["inputs"] == "given" and check["runs"] == 2
    assert check["mode"] == "identical"  # an empty store rewrites nothing: the original's outputs on both sets
    assert out.is_file()


def test_check_does_not_pass_on_outputs_that_are_all_nan(tmp_path: Path, save, empty_store: Path) -> None:
    """NaN == NaN would make any rewrite 'match': an original with no finite output cannot be checked."""
    graph = helper.make_graph(
        [
            helper.make_node("Abs", ["x"], ["a"], name="abs"),
            helper.make_node("Neg", ["a"], ["n"], name="neg"),
            helper.make_node("Add", ["n", "minus_one"], ["m"], name="shift"),
            helper.make_node("Sqrt", ["m"], ["y"], name="sqrt"),
        ],
        "nan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(-1.0, np.float32), "minus_one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out = tmp_path / "o.onnx"
    with pytest.raises(CheckFailed, match="no finite values"):
        optimize(save(model, "nan.onnx"), out, empty_store)
    assert not out.exists()


def test_float16_outputs_are_compared_at_float16_tolerance_unless_one_is_given(tmp_path: Path, save) -> None:
    """Two float16 models apart by 0.5 % (a few float16 steps): equal at float16's default, not at float32's."""

    def scaled(factor: float, name: str) -> Path:
        graph = helper.make_graph(
            [helper.make_node("Mul", ["x", "k"], ["y"], name="scale")],
            "scale",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 64])],
            initializer=[numpy_helper.from_array(np.array(factor, np.float16), "k")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return save(model, name)

    a, b = scaled(1.0, "a.onnx"), scaled(1.005, "b.onnx")
    g = onnx_io.load_model(a)
    default = compare(a, b, g)
    assert default.ok and (default.rtol, default.atol) == (1e-2, 1e-3)
    assert not compare(a, b, g, rtol=1e-3, atol=1e-5).ok
    assert tolerance(np.dtype("float32"), None, None) == (1e-3, 1e-5)


def test_rules_add_adds_written_rules_once_and_refuses_a_broken_file_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    rules_file = ROOT / "specs" / "rules" / "batchnorm.rules"
    first = subst("rules", "add", rules_file, "--store", db, "--json")
    again = subst("rules", "add", rules_file, "--store", db, "--json")
    assert first.returncode == again.returncode == 0, first.stderr
    written = len(parse_rules(rules_file.read_text()))
    assert written >= 2 and (json.loads(first.stdout)["added"], json.loads(again.stdout)["added"]) == (written, 0)
    broken = tmp_path / "broken.rules"
    broken.write_text("rule half\nfree: pads\ngraph(%x: float32[2]):\n  return %x\n")
    r = subst("rules", "add", broken, "--store", db)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "broken.rules" in r.stderr


# ---- read-only stores, signals, pipes -----------------------------------------------------------------------

PR_CAPBSET_DROP = 24
DAC_CAPABILITIES = (1, 2, 3)
"""CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: what lets root write a file its mode calls read-only."""


def _as_a_user() -> None:
    """In the child before exec: drop root's power over file modes, so a read-only store is read-only to the
    command under test as it is to a user (the test suite may run as root, in a container)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in DAC_CAPABILITIES:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")


def subst_as_a_user(*args: object) -> subprocess.CompletedProcess:
    """`conftest.subst`, run without root's override of file modes."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=_as_a_user if os.geteuid() == 0 else None,
    )


@contextmanager
def _read_only(store_path: Path, folder: bool) -> Iterator[None]:
    """The store file (or its folder) made read-only for the block, then writable again for tmp_path's cleanup."""
    target = store_path.parent if folder else store_path
    mode = target.stat().st_mode
    target.chmod(0o555 if folder else 0o444)
    try:
        yield
    finally:
        target.chmod(mode)


@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
@pytest.mark.parametrize("command", ["generate", "verify"])
def test_a_read_only_store_is_refused_up_front_in_one_line(tmp_path: Path, command: str, folder: bool) -> None:
    db = tmp_path / "ro" / "s.db"
    db.parent.mkdir()
    r = subst("rules", "add", ROOT / "specs" / "rules" / "batchnorm.rules", "--store", db)
    assert r.returncode == 0, r.stderr
    before, listing = db.read_bytes(), sorted(os.listdir(db.parent))
    args = ["--max-ops", "1"] if command == "generate" else ["--workers", "1"]
    with _read_only(db, folder):
        r = subst_as_a_user(command, *args, "--store", db)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("subst: error:") and "read-only" in r.stderr and len(r.stderr.splitlines()) == 1
    assert db.read_bytes() == before and sorted(os.listdir(db.parent)) == listing


def _costs(cache: Path) -> int:
    """How many unit costs the cost cache under ``cache`` (an XDG_CACHE_HOME) holds."""
    with sqlite3.connect(cache / "subst" / "costs.db") as db:
        return db.execute("SELECT count(*) FROM costs").fetchone()[0]


def test_profile_with_a_read_only_cost_cache_measures_and_says_it_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "relu.onnx"
    onnx.save_model(_tiny(), str(model))
    args = ("profile", model, "--device", "cpu", "--no-measure-model", "--json")
    r = subst(*args)
    assert r.returncode == 0 and json.loads(r.stdout)["warnings"] == []  # a writable cache caches, and says nothing
    folder = tmp_path / "cache" / "subst"
    before, listing = (folder / "costs.db").read_bytes(), sorted(os.listdir(folder))
    assert _costs(tmp_path / "cache") > 0
    with _read_only(folder / "costs.db", folder=True):
        r = subst_as_a_user(*args[:-1], "--refresh")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"costs not cached: the cost cache {folder / 'costs.db'} is read-only") == 1
    assert (folder / "costs.db").read_bytes() == before and sorted(os.listdir(folder)) == listing


def test_a_cost_cache_that_is_no_database_is_passed_by_and_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    broken = tmp_path / "cache" / "subst" / "costs.db"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a database, but not ours to delete either" * 100)
    model = tmp_path / "relu.onnx"
    onnx.save_model(_tiny(), str(model))
    r = subst("profile", model, "--device", "cpu", "--no-measure-model", "--json")
    assert r.returncode == 0, r.stderr
    (warning,) = json.loads(r.stdout)["warnings"]
    assert warning.startswith(f"costs not cached: the cost cache {broken} cannot be read")
    assert broken.read_bytes() == b"not a database, but not ours to delete either" * 100


def test_a_cache_folder_that_cannot_be_made_costs_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a_file").write_text("XDG_CACHE_HOME names a file, not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a_file"))
    model = tmp_path / "relu.onnx"
    onnx.save_model(_tiny(), str(model))
    r = subst("profile", model, "--device", "cpu", "--no-measure-model", "--json")
    assert r.returncode == 0, r.stderr
    (warning,) = json.loads(r.stdout)["warnings"]
    assert warning.startswith(f"costs not cached: cannot make the cache folder {tmp_path / 'a_file' / 'subst'}")


def test_optimize_reads_a_read_only_store_and_caches_costs_per_user(tmp_path: Path, own_cache: Path) -> None:
    """The store is only read (opened read-only): what a run measures goes to the user's cost cache, so a
    read-only store (a shared one, the shipped one) costs nothing twice and warns of nothing. The model's op
    is one the rule mentions: a unit no rewrite touches is not measured."""
    (tmp_path / "ro").mkdir()
    db = prove_into(tmp_path / "ro" / "rules.db", [replace(parse_rules(DISTRIBUTE)[0], status="proved")])
    model = tmp_path / "add.onnx"
    tiny = _tiny(op="Add")
    tiny.graph.node[0].input.append("x")
    onnx.save_model(tiny, str(model))
    before, listing = db.read_bytes(), sorted(os.listdir(db.parent))
    with _read_only(db, folder=True):
        r = subst_as_a_user("optimize", model, "-o", tmp_path / "o.onnx", "--store", db, "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert "warning" not in report["cost"] and report["check"]["ok"]
    assert db.read_bytes() == before and sorted(os.listdir(db.parent)) == listing
    assert _costs(tmp_path / "cache") > 0


def test_sigterm_during_optimize_leaves_no_temp_folder(tmp_path: Path, bert_path: Path, empty_store: Path) -> None:
    """As `timeout` stops a run: the staging folder beside the output exists from import to the final move, so
    the signal is sent once it appears, and must unwind through the code that removes it."""
    out = tmp_path / "out"
    out.mkdir()
    args = [sys.executable, "-m", "cli.main", "optimize", bert_path, "-o", out / "o.onnx", "--store", empty_store]
    for _ in range(3):  # on a loaded machine the run may end (in a second or so) before this loop sees its folder
        run = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while run.poll() is None and not list(out.glob(".subst-*")):
            time.sleep(0.001)
        if run.poll() is None:
            break
        run.communicate()
        (out / "o.onnx").unlink(missing_ok=True)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "subst: terminated (SIGTERM); its temp files removed"  # after progress
    assert "Traceback" not in err
    assert os.listdir(out) == []


def test_rules_list_into_a_pipe_closed_early_is_quiet_and_ok() -> None:
    """`subst rules list --limit 0 | head`: the reader leaving is no error (it was exit 1, silently)."""
    args = [sys.executable, "-m", "cli.main", "rules", "list", "--limit", "0"]
    run = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    header = run.stdout.readline()  # type: ignore[union-attr]
    run.stdout.close()  # type: ignore[union-attr]
    err = run.stderr.read()  # type: ignore[union-attr]
    assert run.wait(timeout=60) == 0 and err == b"" and header.split()[0] == b"row"
    listed = json.loads(subst("rules", "list", "--limit", "0", "--json").stdout)
    assert len(listed) == json.loads(subst("rules", "stats", "--json").stdout)["rules"] > 50 * 64  # 0: all


def _two_matmuls_added(save, outputs: tuple[str, ...]) -> Path:  # noqa: ANN001 (the save fixture)
    """x @ w0 + x @ w1, which DISTRIBUTE rewrites as x @ (w0 + w1), with ``outputs`` as the model's outputs."""
    weights = [numpy_helper.from_array(np.full((8, 5), i + 1.0, np.float32), f"w{i}") for i in (0, 1)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]) for i in (0, 1)]
        + [helper.make_node("Add", ["m0", "m1"], ["y"])],
        "distribute",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4, 5]) for o in outputs],
        initializer=weights,
    )
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "m.onnx")


def test_declined_rewrites_are_counted_in_words_a_user_reads(tmp_path: Path, save) -> None:
    """A rule matches, but a value it would remove is also a model output: the report says that, in the text
    and in --json, counted by what stood in the way (it said 'an internal source value is a graph output')."""
    db = prove_into(tmp_path / "rules.db", [replace(parse_rules(DISTRIBUTE)[0], status="proved")])
    model = _two_matmuls_added(save, outputs=("y", "m0"))
    args = ("optimize", model, "--store", db, "--device", "estimate")
    text = subst(*args, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json").stdout  # --json's dict, too
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["search"]["declined"] == {"a value the rewrite would remove is a model output": 2}
    rule = parse_rules(DISTRIBUTE)[0]  # each reason named with an example: the rule's id and the node it matched
    assert report["search"]["declined_at"] == {
        "a value the rewrite would remove is a model output": f"{rule.id} at a MatMul"
    }
    assert f"declined  a value the rewrite would remove is a model output (2), e.g. {rule.id} at a MatMul" in text


def test_the_report_names_each_applied_rule_by_an_id_rules_show_finds(tmp_path: Path, save) -> None:
    """`subst optimize` counts applied rules by id with the name beside it, in --json and the text; each id is
    one `subst rules show` finds in the store the run read, and `rules list` gives the same id and name."""
    rule = replace(parse_rules(DISTRIBUTE)[0], status="proved")
    db = prove_into(tmp_path / "rules.db", [rule])
    model = _two_matmuls_added(save, outputs=("y",))
    args = ("optimize", model, "--store", db, "--device", "estimate")
    text = subst(*args, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json").stdout  # --json's dict, too
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rules_applied"] == {rule.id: {"name": rule.name, "count": 1}}
    assert re.search(rf"^ +1x {rule.id} +{re.escape(rule.name)}$", text, re.M), text
    shown = subst("rules", "show", rule.id, "--store", db)
    assert shown.returncode == 0 and shown.stdout.startswith(f"rule {rule.id} (row 1)  {rule.name}  [proved]")
    assert json.loads(subst("rules", "show", rule.id, "--store", db, "--json").stdout)["rule_id"] == rule.id
    (listed,) = subst("rules", "list", "--store", db).stdout.splitlines()[1:]
    assert listed.split()[:2] == ["1", rule.id] and listed.endswith(rule.name)
