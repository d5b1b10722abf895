"""The corpus of real exporter output (models/corpus/, made by models/export_corpus.py), with weights filled in.

    python models/corpus.py                          # list the corpus: exporter, opset, dtype, dims
    python models/corpus.py resnet50_ts -o r50.onnx  # write one model with seeded weights, ready for subst

The committed files keep every initializer's name, shape and dtype but not the data of float tensors over 64
elements (``doc_string == "stripped"``). `load` fills them with seeded values, the same for a given name and seed
whatever the order: matrices N(0, 1/fan_in) and conv kernels N(0, 2/fan_in) so activations stay in range through
the depth,
BatchNorm and LayerNorm scales and variances |N| + 0.5, other vectors N(0, 1) / 4. Integer, bool and small tensors (shapes, indices, masks, epsilons) were kept exact by the export. The zoo
regression, the tests and users share this one loader.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
MANIFEST: dict[str, dict] = json.loads((CORPUS / "manifest.json").read_text())
NAMES = sorted(name for name, entry in MANIFEST.items() if "error" not in entry)
"""Every exported model; the manifest also lists the exports that failed, with the exporter's error."""


def dims(name: str) -> dict[str, int]:
    """The model's symbolic dims at the sizes the corpus runs are costed at: batch 1, sequences of 16."""
    return sizes(MANIFEST[name]["dims"])


def sizes(names: list[str]) -> dict[str, int]:
    """Symbolic dims named as export_corpus.py names them at the corpus's sizes: batch 1, any other 16 (a
    model outside the corpus, bench/bench_fresh.py's, is costed and timed as the corpus is)."""
    return {d: 1 if d == "batch" else 16 for d in names}


Use = tuple[str, int, dict[str, int]]
"""(op, input index, int attributes): one place a value is read."""


def _uses(g: onnx.GraphProto) -> dict[str, list[Use]]:
    """Every place each value is read."""
    uses: dict[str, list[Use]] = {}
    for node in g.node:
        ints = {a.name: a.i for a in node.attribute if a.type == onnx.AttributeProto.INT}
        for i, value in enumerate(node.input):
            uses.setdefault(value, []).append((node.op_type, i, ints))
    return uses


POSITIVE = {("BatchNormalization", 1), ("BatchNormalization", 4), ("LayerNormalization", 1)}
"""Scales and variances: |N| + 0.5. A negative variance gives NaN everywhere, which any check passes; and the
TorchScript exporter writes equal initializers once, so a fresh BatchNorm's variance (ones) is an Identity of its
scale (ones): the scale must be filled as a variance too."""


def _fill(t: onnx.TensorProto, uses: list[Use], seed: int, residual: bool = False) -> onnx.TensorProto:
    shape = tuple(t.dims)
    rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
    value = rng.standard_normal(shape, dtype=np.float32)
    op, index, attrs = uses[0] if uses else ("", -1, {})
    if any((o, i) in POSITIVE for o, i, _ in uses):
        value = np.abs(value) + np.float32(0.5)
    elif len(shape) <= 1:
        value *= np.float32(0.25)
    else:
        if op == "MatMul" and index == 1:
            fan_in = shape[-2]
        elif op == "Gemm" and index == 1:
            fan_in = shape[1] if attrs.get("transB", 0) else shape[0]
        else:
            fan_in = int(np.prod(shape[1:]))
        # He init for convs (dynamo drops zero biases, and a bias-free conv stack loses half per ReLU), but a
        # small one where a conv ends a residual branch, as trained nets have: else ResNet-50's logits reach 1e3.
        gain = 0.5 if residual else 2.0 if op == "Conv" else 1.0
        value *= np.float32(np.sqrt(gain / max(fan_in, 1)))
    dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
    return numpy_helper.from_array(value.astype(dtype), t.name)


def fill(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` with every stripped tensor (initializers and Constant nodes) given seeded values."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    uses = _uses(m.graph)
    residual = {
        n.input[1]
        for n in m.graph.node
        if n.op_type == "Conv" and any(u[0] == "Add" for u in uses.get(n.output[0], []))
    }
    for t in m.graph.initializer:
        if t.doc_string == "stripped":
            t.CopyFrom(_fill(t, uses.get(t.name, []), seed, t.name in residual))
    for node in m.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.doc_string == "stripped":
                a.t.CopyFrom(_fill(a.t, uses.get(node.output[0], []), seed))
    return m


def load(name: str, seed: int = 0) -> onnx.ModelProto:
    """Corpus model ``name`` with seeded weights: a valid model that onnx's full check accepts."""
    if name not in MANIFEST:
        raise KeyError(f"{name} is not in the corpus; it has {', '.join(NAMES)}")
    if "error" in MANIFEST[name]:
        raise KeyError(f"{name} did not export: {MANIFEST[name]['error'].splitlines()[0]}")
    return fill(onnx.load(str(CORPUS / f"{name}.onnx")), seed)


def write(name: str, path: str | Path, seed: int = 0) -> Path:
    """Write corpus model ``name`` with seeded weights to ``path``."""
    onnx.save_model(load(name, seed), str(path))
    return Path(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", help="a corpus model (default: list them)")
    ap.add_argument("-o", "--output", type=Path, help="where to write it (default: NAME.onnx here)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.name is None:
        for name, e in MANIFEST.items():
            what = e.get("error", "").splitlines()[0][:80] if "error" in e else f"opset {e['opset']} {e['dtype']}"
            print(f"{name:<28}{e['exporter']:<26}{what}  {' '.join(e.get('dims') or [])}")
        return 0
    try:
        path = write(args.name, args.output or Path(f"{args.name}.onnx"), args.seed)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
