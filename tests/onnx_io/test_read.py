"""Reading files: opset upgrades (counted apart from the file's nodes) and models older than onnxruntime runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
from conftest import subst, zoo
from onnx import TensorProto, helper, numpy_helper

from .roundtrip import round_trip


def test_light_models_are_upgraded_to_opset_13(tmp_path: Path, save) -> None:
    src = save(zoo.materialize(onnx.load(str(zoo.LIGHT_DIR / "light_squeezenet.onnx"))), "src.onnx")
    assert onnx.load(str(src)).opset_import[0].version < 13
    out = round_trip(src, tmp_path)
    assert {(o.domain, o.version) for o in onnx.load(str(out)).opset_import} == {("", 13)}


def test_reports_count_the_file_s_nodes_then_what_the_opset_upgrade_added(
    tmp_path: Path, save, empty_store: Path
) -> None:
    """SqueezeNet is opset 9: the upgrade to 13 adds nodes, which the report once counted as the file's own."""
    src = save(zoo.materialize(onnx.load(str(zoo.LIGHT_DIR / "light_squeezenet.onnx"))), "src.onnx")
    in_file = len(onnx.load(str(src)).graph.node)
    r = subst("optimize", src, "-o", tmp_path / "o.onnx", "--store", empty_store, "--report", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())  # the dict --json prints
    upgrade, added = report["upgrade"], report["nodes_before"] - in_file
    assert added > 0 and upgrade == {"opset": 9, "to": 13, "nodes": in_file, "added": added, "checked_upgraded": False}
    text = r.stdout
    assert f"nodes     {in_file} in the file; upgraded opset 9 -> 13 (+{added} nodes); {in_file + added} -> " in text
    info = json.loads(subst("info", src, "--json").stdout)
    assert info["file"] == {"opset": 9, "nodes": in_file, "upgrade": f"upgraded opset 9 -> 13 (+{added} nodes)"}
    assert info["nodes"] == in_file + added and info["opsets"] == {"": 13}  # the rest: the graph subst works on


def test_a_model_older_than_onnxruntime_runs_is_checked_against_its_upgrade(tmp_path: Path, empty_store: Path) -> None:
    """onnxruntime has no kernel for Add-6: such a model was refused though its upgrade runs and is right."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "opset6",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("x", "b")],  # IR 3: weights listed
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.full((2, 3), -0.5, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    model.ir_version = 3
    src = tmp_path / "old.onnx"
    onnx.save_model(model, str(src))
    r = subst("optimize", src, "-o", tmp_path / "o.onnx", "--store", empty_store)
    assert r.returncode == 0, r.stderr
    assert "against the upgrade (onnxruntime runs no opset 6)" in r.stdout and "check     match" in r.stdout
    r = subst("optimize", src, "-o", tmp_path / "p.onnx", "--store", empty_store, "--json")
    assert json.loads(r.stdout)["upgrade"]["checked_upgraded"] is True
    assert sorted(os.listdir(tmp_path)) == ["empty.db", "o.onnx", "old.onnx", "p.onnx"]  # the upgrade was staged
