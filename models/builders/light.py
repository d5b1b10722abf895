"""The onnx wheel's light models (structure only) with seeded random weights in place of their stand-ins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_models() -> list[Path]:
    """The structure-only models that ship inside the onnx wheel."""
    return sorted(LIGHT_DIR.glob("light_*.onnx"))


def weight_count(model: onnx.ModelProto) -> int:
    """How many weights `materialize` gives ``model``: the elements of its ConstantOfShape stand-ins (VGG-19's
    144 M make its round trip take a minute on the 2-core machine, SqueezeNet's 1.2 M a few seconds)."""
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"}
    stand_ins = [n.input[0] for n in model.graph.node if n.op_type == "ConstantOfShape"]
    return sum(int(np.prod(shapes[s])) for s in stand_ins if s in shapes)


def _random_weight(
    rng: np.random.Generator, name: str, shape: tuple[int, ...], span: tuple[float, float] | None
) -> onnx.TensorProto:
    """Uniform over ``span`` (BatchNorm scales and variances), else normal with std 1/sqrt(fan-in) so activations
    stay in range through 100+ layers. Drawn in float32: VGG-19's 143M weights in float64 cost seconds and a
    1 GB temporary."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    if span is not None:
        value = rng.random(shape, dtype=np.float32) * np.float32(span[1] - span[0]) + np.float32(span[0])
    else:
        value = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(max(fan_in, 1)))
    return numpy_helper.from_array(value, name)


def materialize(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace weight stand-ins with seeded random initializers: ConstantOfShape nodes fed by constant shapes,
    and float initializers holding one repeated value (some light models ship BatchNorm scales and biases so).

    BatchNorm scales and variances are found by where they are used, not by name: Caffe2's models call the
    variance ``_riv_``, and a negative one made every output NaN, which any equivalence check passes. A BatchNorm
    that feeds a residual sum gets a small scale, as trained networks have, or the logits of ResNet-50 and
    ShuffleNet reach the hundreds and their softmax saturates (a saturated output hides wrong rewrites too).
    """
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    merged = {i for n in g.node if n.op_type in ("Add", "Sum") for i in n.input}
    spans: dict[str, tuple[float, float]] = {}
    for n in g.node:
        if n.op_type == "BatchNormalization":
            spans[n.input[1]] = (0.1, 0.3) if n.output[0] in merged else (0.5, 1.5)
            spans[n.input[4]] = (0.5, 1.5)

    def span(name: str) -> tuple[float, float] | None:
        return spans.get(name, (0.5, 1.5) if "var" in name or "scale" in name else None)

    inits = {t.name: t for t in g.initializer}
    keep, new_inits = [], []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            new_inits.append(_random_weight(rng, node.output[0], shape, span(node.output[0])))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in g.node for i in n.input}
    kept_inits = []
    for t in g.initializer:
        if t.name in used:
            a = numpy_helper.to_array(t)
            constant = a.dtype.kind == "f" and a.size > 1 and np.all(a == a.flat[0])
            kept_inits.append(_random_weight(rng, t.name, a.shape, span(t.name)) if constant else t)
    kept_inits += new_inits
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    names = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in names and (i.name in used or i.name in {o.name for o in g.output})]
    del g.input[:]
    g.input.extend(inputs)
    if m.ir_version < 4:
        m.ir_version = 4
    return m
