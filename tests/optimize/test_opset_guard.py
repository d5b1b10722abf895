"""A rewrite never writes an op into a model whose opset predates it (`OpDef.min_opset`): the search leaves out
the rules that would (`taso.search.rulecache.usable_at`), and export refuses such a node as a last line. The
rule here is true (HardSwish is x times PyTorch's HardSigmoid) and writes HardSwish, ONNX's from opset 14."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import prove_into, write_graph
from onnx import TensorProto, helper

from taso import onnx as onnx_io
from taso.errors import BadInput
from taso.ir import Node
from taso.optimize import Settings, optimize
from taso.rules import parse_rules
from taso.search import rulecache

TO_HARDSWISH = """
rule x times pytorch's hardsigmoid is hardswish
graph(%x: float32[2,4]):
  %s = HardSigmoid(%x) {alpha=0.1666666716337204, beta=0.5} : float32[2,4]
  %a = Mul(%x, %s) : float32[2,4]
  return %a
=>
graph(%x: float32[2,4]):
  %a = HardSwish(%x) : float32[2,4]
  return %a
"""


@pytest.fixture(scope="module")
def hardswish_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rule = replace(parse_rules(TO_HARDSWISH)[0], status="proved")
    return prove_into(tmp_path_factory.mktemp("opset") / "rules.db", [rule])


def _hardswish_by_hand(path: Path, opset: int) -> Path:
    """x * HardSigmoid(x) as PyTorch exports hardswish where ONNX has no HardSwish (opset 13)."""
    nodes = [
        helper.make_node("HardSigmoid", ["x"], ["s"], alpha=float(np.float32(1 / 6)), beta=0.5),
        helper.make_node("Mul", ["x", "s"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])
    return write_graph(helper.make_graph(nodes, "hardswish", [x], [y]), path, opset=opset)


@pytest.mark.parametrize("opset", [13, 14])
def test_a_rule_writing_hardswish_is_applied_only_from_opset_14(
    opset: int, hardswish_store: Path, tmp_path: Path
) -> None:
    src, out = _hardswish_by_hand(tmp_path / "m.onnx", opset), tmp_path / "m.opt.onnx"
    report = optimize(src, out, hardswish_store, settings=Settings(device="estimate"))
    assert report.check is not None and report.check.ok, report.check
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert ("HardSwish" in [n.op_type for n in written.graph.node]) == (opset >= 14)


def test_the_search_leaves_out_rules_with_an_op_newer_than_the_model() -> None:
    rule = parse_rules(TO_HARDSWISH)[0]
    assert rulecache.usable_at([rule], 13) == [] and rulecache.usable_at([rule], 14) == [rule]


def test_export_refuses_an_op_newer_than_the_models_opset(tmp_path: Path) -> None:
    g = onnx_io.load_model(_hardswish_by_hand(tmp_path / "m.onnx", 13))
    swished = replace(g, nodes=(Node("HardSwish", ("x",), ("y",)),))
    with pytest.raises(BadInput, match="HardSwish 'y' needs opset 14; the model declares 13"):
        onnx_io.to_proto(swished)
