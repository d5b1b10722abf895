"""What a user met (issue 46), through the CLI as run: each bad input refused in one line on stderr (exit 2,
nothing written), reports that name what a user can act on, and onnxruntime's own log lines kept off stderr."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, prove_into, subst, subst_process, write_graph
from onnx import TensorProto, helper, numpy_helper
from test_provenance import DISTRIBUTE

from taso import onnx as onnx_io
from taso.errors import BadInput
from taso.execute import random_inputs
from taso.ir import find_cycle
from taso.rules import parse_rules, store

COSTS = ROOT / "taso" / "cost" / "reference_costs.json"
"""A cost table: nothing measured, the same costs on every machine."""


def _one_line_refusal(r, *words: str) -> str:  # noqa: ANN001 (subprocess.CompletedProcess)
    """The refusal's one line, checked: exit 2, no traceback, the last line on stderr (after any progress lines),
    each of ``words`` in it."""
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and lines[-1].startswith("subst: error: "), r.stderr
    assert sum(line.startswith("subst:") for line in lines) == 1, r.stderr
    for w in words:
        assert w in lines[-1], lines[-1]
    return lines[-1]


# ---- external data that leaves the model's folder ---------------------------------------------------------


def _external_model(folder: Path) -> Path:
    """A model in ``folder`` whose one weight is external data in ``w.bin`` beside it."""
    folder.mkdir()
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    model = _external_model(tmp_path / "m")
    outside = tmp_path / "secret.bin"
    os.replace(tmp_path / "m" / "w.bin", outside)
    (tmp_path / "m" / "w.bin").symlink_to(outside)
    _one_line_refusal(subst("info", model), "'w.bin'", "symbolic link", str(outside), "refused")


def test_external_data_with_a_second_hard_link_is_refused(tmp_path: Path) -> None:
    """A hard link inside the folder may name any file of the file system; the path cannot tell."""
    model = _external_model(tmp_path / "m")
    os.link(tmp_path / "m" / "w.bin", tmp_path / "elsewhere.bin")
    _one_line_refusal(subst("info", model), "'w.bin'", "2 hard links", "refused")
    os.unlink(tmp_path / "elsewhere.bin")
    assert subst("info", model).returncode == 0  # the file alone is read


# ---- stores that are not what they say --------------------------------------------------------------------


def _relu(path: Path, shape: list) -> Path:  # noqa: ANN001 (a shape: ints and dim names)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    return write_graph(graph, path)


def test_a_store_whose_schema_version_is_no_number_is_refused(tmp_path: Path) -> None:
    db = store.create(tmp_path / "s.db")
    store.set_meta(db, "schema_version", "abc")
    model, out = _relu(tmp_path / "m.onnx", [2]), tmp_path / "o.onnx"
    _one_line_refusal(subst("rules", "list", "--store", tmp_path / "s.db"), "schema version 'abc'")
    _one_line_refusal(subst("optimize", model, "-o", out, "--store", tmp_path / "s.db"), "schema version 'abc'")
    assert not out.exists()


@pytest.mark.parametrize("status", ["proved", "candidate"])
def test_a_store_row_whose_source_does_not_parse_is_refused(tmp_path: Path, status: str) -> None:
    path = tmp_path / "s.db"
    db = store.create(path)
    rule = parse_rules((ROOT / "specs" / "rules" / "reciprocal.rules").read_text())[0]
    store.add_rules(db, [rule])
    db.execute("UPDATE rules SET src = 'garbage(', status = ?", [status])
    db.conn.commit()
    before = path.read_bytes()
    model, out = _relu(tmp_path / "m.onnx", [2]), tmp_path / "o.onnx"
    _one_line_refusal(subst("rules", "show", rule.id, "--store", path), "rule 1 does not parse", "'garbage'")
    if status == "proved":
        _one_line_refusal(subst("optimize", model, "-o", out, "--store", path), "rule 1 does not parse")
        assert not out.exists()
    else:
        _one_line_refusal(subst("verify", "--store", path), "rule 1 does not parse")
    assert path.read_bytes() == before  # nothing written, not even the z3 version


# ---- sizes: too large for memory or for any tensor, and the check at the sizes asked for -------------------


def test_an_input_dim_of_2_to_the_40_is_refused_before_any_allocation(tmp_path: Path, empty_store: Path) -> None:
    model, out = _relu(tmp_path / "m.onnx", [2**40]), tmp_path / "o.onnx"
    r = subst("optimize", model, "-o", out, "--store", empty_store)
    _one_line_refusal(r, "input 'x'", "float32[1099511627776]", "8.0 TiB", "memory", "--no-check")
    assert not out.exists()


@pytest.mark.parametrize(
    "size, words",
    [
        ("1099511627776", ("input 'x'", "float32[1099511627776, 4]", "32.0 TiB", "memory")),
        ("99999999999999999999", ("--dim batch=99999999999999999999", "input 'x'", "4e+20 elements", "2^63 - 1")),
    ],
)
def test_a_dim_too_large_for_memory_or_any_tensor_is_refused(
    tmp_path: Path, empty_store: Path, size: str, words: tuple[str, ...]
) -> None:
    model, out = _relu(tmp_path / "m.onnx", ["batch", 4]), tmp_path / "o.onnx"
    _one_line_refusal(subst("optimize", model, "-o", out, "--store", empty_store, "--dim", f"batch={size}"), *words)
    assert not out.exists()


def test_a_string_input_is_named_a_string(tmp_path: Path, empty_store: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"]), helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2]), helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2]), helper.make_tensor_value_info("y", 1, [2])],
    )
    model, out = write_graph(graph, tmp_path / "m.onnx"), tmp_path / "o.onnx"
    line = _one_line_refusal(subst("optimize", model, "-o", out, "--store", empty_store), "'s' is a string tensor")
    assert "object" not in line


def test_dim_sizes_the_check_s_inputs(tmp_path: Path, empty_store: Path) -> None:
    """A model that runs at batch 3 alone (a Reshape to a fixed [3, 4]) is checked at --dim batch=3: the check
    drew batch 2 whatever --dim said, and refused the model as one onnxruntime cannot run."""
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [shape],
    )
    model, out = write_graph(graph, tmp_path / "m.onnx"), tmp_path / "o.onnx"
    r = subst("optimize", model, "-o", out, "--store", empty_store, "--dim", "batch=3")
    assert r.returncode == 0, r.stderr
    assert out.exists()


# ---- graphs onnx refuses: the refusal names what is wrong ------------------------------------------------


def test_a_cycle_is_refused_naming_its_nodes_and_values(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="start"),
        helper.make_node("Add", ["r", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["b"], name="back"),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    vi = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [4]) for v in "xy"]
    model = write_graph(helper.make_graph(nodes, "g", vi[:1], vi[1:]), tmp_path / "m.onnx")
    _one_line_refusal(subst("info", model), "cycle", "Add 'add' -> 'a' -> Relu 'back' -> 'b' -> Add 'add'")


def test_find_cycle_names_the_cycle_in_the_order_values_flow() -> None:
    nodes = [(["x"], ["p"]), (["p", "c"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["a"], ["y"])]
    assert find_cycle(nodes) == [1, 2, 3]
    assert find_cycle([(["x"], ["a"]), (["a"], ["b"]), (["a", "b"], ["y"])]) is None
    assert find_cycle([(["a"], ["a"])]) == [0]


def test_an_unsorted_graph_s_refusal_is_not_cut_mid_sentence(tmp_path: Path) -> None:
    """onnx's checker says so across three lines; the first alone ended at "of node:"."""
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="late"), helper.make_node("Relu", ["x"], ["a"], name="early")]
    vi = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [4]) for v in "xy"]
    model = write_graph(helper.make_graph(nodes, "g", vi[:1], vi[1:]), tmp_path / "m.onnx")
    line = _one_line_refusal(subst("info", model), "topologically sorted", "is not output of any previous nodes")
    assert "cycle" not in line


# ---- onnxruntime's own log lines ------------------------------------------------------------------------


def test_onnxruntime_s_log_lines_are_silenced_on_a_successful_run_unless_verbose(tmp_path: Path) -> None:
    """A weight-only Reshape onnxruntime cannot evaluate stays as it is (the precompute's failure is handled);
    onnxruntime logged it in red on stderr all the same, on a run that exits 0."""
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    s = numpy_helper.from_array(np.array([5], np.int64), "s")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["w", "s"], ["r"], name="bad"), helper.make_node("Add", ["x", "r"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
        [w, s],
    )
    model = write_graph(graph, tmp_path / "m.onnx")
    # processes of their own: --verbose sets onnxruntime's process-wide logger, which would outlast the run here
    quiet = subst_process("optimize", model, "-o", tmp_path / "o.onnx", "--no-check", "--costs", COSTS)
    assert quiet.returncode == 0, quiet.stderr
    assert "onnxruntime" not in quiet.stderr, quiet.stderr
    loud = subst_process("optimize", model, "-o", tmp_path / "p.onnx", "--no-check", "--costs", COSTS, "--verbose")
    assert loud.returncode == 0 and "[E:onnxruntime:" in loud.stderr, loud.stderr


# ---- reports a user can act on ----------------------------------------------------------------------------


def _distributed(path: Path) -> Path:
    """x @ w0 + x @ Transpose(t1) at a symbolic batch: DISTRIBUTE pays, and the Transpose of a weight is
    precomputed (a pass, no rule)."""
    w0 = numpy_helper.from_array(np.full((8, 5), 1.0, np.float32), "w0")
    t1 = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(5, 8), "t1")
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["t1"], ["w1"], perm=[1, 0]),
            helper.make_node("MatMul", ["x", "w0"], ["m0"]),
            helper.make_node("MatMul", ["x", "w1"], ["m1"]),
            helper.make_node("Add", ["m0", "m1"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
        [w0, t1],
    )
    return write_graph(graph, path)


def test_the_report_names_rules_by_id_passes_by_name_and_the_dims_used(tmp_path: Path) -> None:
    rule = replace(parse_rules(DISTRIBUTE)[0], status="proved")
    db = prove_into(tmp_path / "rules.db", [rule])
    args = ["optimize", _distributed(tmp_path / "m.onnx"), "--store", db, "--device", "estimate"]
    report = json.loads(subst(*args, "-o", tmp_path / "o.onnx", "--json").stdout)
    assert report["rules_applied"] == {rule.id: {"name": rule.name, "count": 1}}  # a rule id, nothing else
    assert report["passes_applied"] == {"precompute weight-only nodes": 1}
    assert report["dims"] == {"costed": {"batch": 1}, "checked": {"batch": 2}}
    for rule_id in report["rules_applied"]:
        assert subst("rules", "show", rule_id, "--store", db).returncode == 0
    text = subst(*args, "-o", tmp_path / "p.onnx", "--dim", "batch=3").stdout.splitlines()
    assert "dims      batch=3 (costed and checked at these sizes)" in text
    assert "passes    precompute weight-only nodes (1x)" in text
    applied = text.index("rules     1 proved in store; applied: by id (`subst rules show ID`):")
    assert text[applied + 1].split() == ["1x", rule.id, *rule.name.split()]  # the passes are not listed there


def test_every_draw_of_random_inputs_refuses_a_size_past_memory(tmp_path: Path) -> None:
    """Unit timings (`subst profile`, the cost model) draw inputs too, without the check's refusal first."""
    g = onnx_io.load_model(_relu(tmp_path / "m.onnx", ["batch", 4]))
    with pytest.raises(BadInput, match=r"input 'x' \(float32\[1099511627776, 4\]\) would take 32.0 TiB.*memory"):
        random_inputs(g, dims={"batch": 2**40})
    assert random_inputs(g, dims={"batch": 3})["x"].shape == (3, 4)
