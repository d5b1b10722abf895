"""Only taso/onnx/ knows protobuf: ruff's ban says so for new code, and the modules that exist keep to it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PROTOBUF = {"onnx", "google"}
"""Top-level packages that hand out protobuf messages."""


def _imported(path: Path) -> set[str]:
    """The top-level packages a module imports, at any depth of its code (imports inside functions count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_onnx_package_imports_protobuf() -> None:
    outside = [p for folder in ("taso", "cli") for p in (ROOT / folder).rglob("*.py") if p.parent != ROOT / "taso" / "onnx"]
    assert len(outside) > 40  # the scan sees the code base, not an empty folder
    offenders = {str(p.relative_to(ROOT)): sorted(_imported(p) & PROTOBUF) for p in outside if _imported(p) & PROTOBUF}
    assert offenders == {}


@pytest.mark.parametrize(
    ("path", "banned"),
    [("taso/ir/new.py", True), ("taso/ops/new.py", True), ("cli/new.py", True), ("taso/onnx/new.py", False)],
)
@pytest.mark.parametrize(
    "line", ["import onnx", "from onnx import helper", "from onnx.numpy_helper import to_array", "import google.protobuf"]
)
def test_ruff_refuses_protobuf_outside_the_onnx_package(path: str, banned: bool, line: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"],
        input=f"{line}\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ("TID251" in r.stdout) == banned, r.stdout + r.stderr
