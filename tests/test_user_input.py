"""Bad input a user met (issue 46): each case one line on stderr, exit 2, nothing written; the CLI as run."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from conftest import subst
from onnx import TensorProto, helper, numpy_helper


def _one_line_refusal(r, *words: str) -> str:  # noqa: ANN001 (subprocess.CompletedProcess)
    """The refusal's one line, checked: exit 2, no traceback, each of ``words`` in it."""
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("subst: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


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
