"""Random ONNX models for the differential fuzz of `optimize --no-check` (tests/test_fuzz.py, bench/bench_fuzz.py).

A model is drawn from a seed (`model`), so a failure is one number to report and replay. It reads one or two
inputs, static or with the symbolic dims of `SIZES`, some with an empty (0) dim, and applies the ops the catalogue
covers and the passes before the search touch: Conv, MatMul, Gemm, Add, Mul, Relu, Concat, Split, Transpose,
Reshape (static, with 0 and -1, and computed by Shape/Gather/Slice/Mul/Unsqueeze/Concat shape arithmetic),
attention's head split and merge, Flatten, Squeeze/Unsqueeze, pools, BatchNorm; values it leaves unread are dead
branches, and some value and node names are the ones the passes pick for what they add (``view_0``,
``Transpose/regrouped``). `differ` runs a model and
its optimized form in onnxruntime at both sets of sizes and says how they differ, if they do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import sqlite_utils
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.search import rulecache

Dim = int | str
SIZES = ({"N": 1, "S": 3}, {"N": 3, "S": 5})
"""The two sets of sizes the symbolic dims run at."""
RTOL, ATOL = 1e-3, 1e-4
"""float32 after reassociation (merged convs and matmuls sum in another order), on values of about 1."""
CLASHING = ("view_", "shapefold_", "subst_", "folded__", "")
"""Stems of value names: the passes' own for the values they add, and plain ones."""


class _Builder:
    """The nodes, initializers and typed values of one model as it is drawn."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.values: list[tuple[str, list[Dim]]] = []
        self.names: set[str] = set()
        self.node_names: set[str] = set()

    def fresh(self, stem: str = "v") -> str:
        prefix = str(self.rng.choice(CLASHING)) or stem
        k = 0
        while f"{prefix}{k}" in self.names:
            k += 1
        self.names.add(f"{prefix}{k}")
        return f"{prefix}{k}"

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const((self.rng.standard_normal(shape) * 0.5).astype(np.float32))

    def node(
        self, op: str, inputs: list[str], shapes: list[list[Dim]], keep: bool = True, **attrs: object
    ) -> list[str]:
        """A node; its outputs join the values drawn from (``keep``) with ``shapes``."""
        outs = [self.fresh() for _ in shapes]
        name = ""
        if self.rng.random() < 0.3:  # the names the view pass gives what it writes, and others
            stem = f"{op}/{self.rng.choice(['regrouped', 'moved', 'atoms', 'n'])}"
            name = stem if stem not in self.node_names else f"{stem}{len(self.node_names)}"
            self.node_names.add(name)
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        if keep:
            self.values += list(zip(outs, shapes))
        return outs

    def pick(self, ok: Callable[[list[Dim]], bool]) -> tuple[str, list[Dim]] | None:
        fits = [v for v in self.values if ok(v[1])]
        return fits[self.rng.integers(len(fits))] if fits else None


def _static(dims: list[Dim]) -> bool:
    return all(isinstance(d, int) for d in dims)


def _unary(b: _Builder) -> None:
    x = b.pick(lambda s: True)
    if x:
        b.node(str(b.rng.choice(["Relu", "Relu", "Tanh", "Sigmoid"])), [x[0]], [x[1]])


def _binary(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return
    name, shape = x
    op = str(b.rng.choice(["Add", "Mul"]))
    same = [v for v in b.values if v[1] == shape and v[0] != name]
    if same and b.rng.random() < 0.5:
        other = same[b.rng.integers(len(same))][0]
    elif len(shape) == 4 and isinstance(shape[1], int) and b.rng.random() < 0.5:
        other = b.weight(shape[1], 1, 1)  # per channel, as a BatchNorm's scale or a conv's bias
    elif isinstance(shape[-1], int) and b.rng.random() < 0.7:
        other = b.weight(shape[-1])
    else:
        other = b.weight()
    args = [name, other] if b.rng.random() < 0.7 else [other, name]
    out = b.node(op, args, [shape])[0]
    if other not in dict(b.values) and b.rng.random() < 0.5:  # a second constant after the first: folded together
        b.node(str(b.rng.choice(["Add", "Mul"])), [out, b.weight()], [shape])


def _matmul(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) >= 2 and isinstance(s[-1], int))
    if x is None:
        return
    m = int(b.rng.integers(1, 7))
    w = b.weight(x[1][-1], m)
    out = [*x[1][:-1], m]
    b.node("MatMul", [x[0], w], [out])
    if b.rng.random() < 0.4:  # a sibling sharing the input: what the merges look for
        b.node("MatMul", [x[0], b.weight(x[1][-1], m)], [out])


def _gemm(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) == 2 and isinstance(s[1], int))
    if x is None:
        return
    k, m = x[1][1], int(b.rng.integers(1, 7))
    trans_b = int(b.rng.integers(2))
    w = b.weight(m, k) if trans_b else b.weight(k, m)
    args = [x[0], w] + ([b.weight(m)] if b.rng.random() < 0.7 else [])
    alpha, beta = float(b.rng.choice([1.0, 0.5])), float(b.rng.choice([1.0, 2.0]))
    b.node("Gemm", args, [[x[1][0], m]], transB=trans_b, alpha=alpha, beta=beta)


def _window(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _conv(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) == 4 and _static(s[1:]) and s[1] > 0)  # type: ignore[operator]
    if x is None:
        return
    n, c, h, w = x[1]
    k = int(b.rng.choice([1, 3]))
    pad, stride = int(b.rng.integers(0, k // 2 + 1)), int(b.rng.choice([1, 1, 2]))
    if _window(h, k, stride, pad) < 1 or _window(w, k, stride, pad) < 1:  # type: ignore[arg-type]
        return
    group = c if b.rng.random() < 0.2 else 1
    o = c * int(b.rng.integers(1, 3)) if group > 1 else int(b.rng.integers(1, 7))
    out = [n, o, _window(h, k, stride, pad), _window(w, k, stride, pad)]  # type: ignore[arg-type]
    for _ in range(1 + (b.rng.random() < 0.4)):  # siblings on one input
        args = [x[0], b.weight(o, c // group, k, k)] + ([b.weight(o)] if b.rng.random() < 0.6 else [])  # type: ignore[operator]
        b.node("Conv", args, [out], kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2, group=group)


def _conv_then(b: _Builder) -> None:
    """A Conv followed by what the passes fold into it or move about it: a BatchNorm, a per-channel Mul or Add,
    a Relu."""
    before = len(b.values)
    _conv(b)
    if len(b.values) == before:
        return
    name, shape = b.values[-1]
    then = str(b.rng.choice(["BatchNormalization", "Mul", "Add", "Relu"]))
    c = shape[1]
    if then == "BatchNormalization":
        var = (b.rng.random(c) + 0.5).astype(np.float32)  # type: ignore[arg-type]
        args = [name, b.weight(c), b.weight(c), b.weight(c), b.const(var)]  # type: ignore[arg-type]
        b.node(then, args, [shape], epsilon=1e-5)
    elif then == "Relu":
        b.node(then, [name], [shape])
    else:
        b.node(then, [name, b.weight(c, 1, 1)], [shape])  # type: ignore[arg-type]


def _pool(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) == 4 and _static(s[1:]) and min(s[1:]) > 0)  # type: ignore[type-var]  # only N empty
    if x is None:
        return
    n, c, h, w = x[1]
    op = str(b.rng.choice(["MaxPool", "AveragePool", "GlobalAveragePool"]))
    if op == "GlobalAveragePool":
        b.node(op, [x[0]], [[n, c, 1, 1]])
        return
    k, stride = int(b.rng.choice([2, 3])), int(b.rng.choice([1, 2]))
    pad = int(b.rng.integers(0, k // 2 + 1))
    if _window(h, k, stride, pad) < 1 or _window(w, k, stride, pad) < 1:  # type: ignore[arg-type]
        return
    out = [n, c, _window(h, k, stride, pad), _window(w, k, stride, pad)]  # type: ignore[arg-type]
    b.node(op, [x[0]], [out], kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2)


def _batchnorm(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) == 4 and isinstance(s[1], int) and s[1] > 0)
    if x is None:
        return
    c = x[1][1]
    var = (b.rng.random(c) + 0.5).astype(np.float32)  # type: ignore[arg-type]
    args = [x[0], b.weight(c), b.weight(c), b.weight(c), b.const(var)]  # type: ignore[arg-type]
    b.node("BatchNormalization", args, [x[1]], epsilon=1e-5)


def _concat(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return
    name, shape = x
    axis = int(b.rng.integers(len(shape)))
    mates = [
        v
        for v in b.values
        if len(v[1]) == len(shape) and all(d == e or k == axis for k, (d, e) in enumerate(zip(v[1], shape)))
    ]
    other = mates[b.rng.integers(len(mates))]
    a, c = shape[axis], other[1][axis]
    total = a + c if isinstance(a, int) and isinstance(c, int) else None  # a dim param's sum has no name: dead
    args = [name, other[0]] if b.rng.random() < 0.5 else [other[0], name]
    b.node("Concat", args, [[*shape[:axis], total, *shape[axis + 1 :]]], keep=total is not None, axis=axis)


def _split(b: _Builder) -> None:
    x = b.pick(lambda s: any(isinstance(d, int) and d >= 2 for d in s))
    if x is None:
        return
    shape = x[1]
    axis = int(b.rng.choice([k for k, d in enumerate(shape) if isinstance(d, int) and d >= 2]))
    size = shape[axis]
    cut = sorted(b.rng.choice(range(1, size), size=min(int(b.rng.integers(1, 3)), size - 1), replace=False))  # type: ignore[arg-type]
    sizes = np.diff([0, *cut, size]).astype(np.int64)
    outs = [[*shape[:axis], int(s), *shape[axis + 1 :]] for s in sizes]
    b.node("Split", [x[0], b.const(sizes)], outs, axis=axis)


def _transpose(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return
    perm = [int(p) for p in b.rng.permutation(len(x[1]))]
    b.node("Transpose", [x[0]], [[x[1][p] for p in perm]], perm=perm)


def _factor(rng: np.random.Generator, size: int) -> list[int]:
    """``size`` as a product of one to three ints (in a random order)."""
    parts = [size]
    for _ in range(int(rng.integers(0, 3))):
        k = int(rng.integers(len(parts)))
        divisors = [d for d in range(2, parts[k]) if parts[k] % d == 0]
        if divisors:
            d = int(rng.choice(divisors))
            parts[k : k + 1] = [d, parts[k] // d]
    return parts


def _reshape(b: _Builder) -> None:
    """A Reshape whose leading dim (symbolic or not) is kept, the rest regrouped: the target a constant with 0
    and -1, or computed from the input's shape as exporters write it. An empty input's target holds sizes 0,
    which only ``allowzero`` reads as sizes (without it a 0 copies the input's dim)."""
    x = b.pick(lambda s: len(s) >= 1 and _static(s[1:]) and s[0] != 0)  # [0, -1] of an empty lead: no size
    if x is None:
        return
    name, shape = x
    rest = math.prod(shape[1:])  # type: ignore[arg-type]
    if rest:
        parts = _factor(b.rng, rest)
    else:
        parts = [int(p) for p in b.rng.permutation([0, *b.rng.integers(1, 4, size=int(b.rng.integers(0, 2)))])]
    entries = list(parts)
    if rest and b.rng.random() < 0.5:
        entries[int(b.rng.integers(len(entries)))] = -1
    allowzero = int(not rest or (-1 not in entries and b.rng.random() < 0.2))
    style = b.rng.random()
    if style < 0.4 or not rest and not isinstance(shape[0], int):  # the leading dim read from the shape at run time
        s = b.node("Shape", [name], [[len(shape)]], keep=False)[0]
        lead = b.node("Gather", [s, b.const(np.array(0, np.int64))], [[]], keep=False)[0]
        if b.rng.random() < 0.5:  # through shape arithmetic: (lead * k) / k
            k = b.const(np.array(int(b.rng.integers(1, 4)), np.int64))
            lead = b.node("Div", [b.node("Mul", [lead, k], [[]], keep=False)[0], k], [[]], keep=False)[0]
        lead1 = b.node("Unsqueeze", [lead, b.const(np.array([0], np.int64))], [[1]], keep=False)[0]
        target = b.node(
            "Concat", [lead1, b.const(np.array(entries, np.int64))], [[len(parts) + 1]], keep=False, axis=0
        )[0]
    elif isinstance(shape[0], int) and (style < 0.7 or not rest):
        target = b.const(np.array([shape[0], *entries], np.int64))
    else:  # the leading dim copied
        target, allowzero = b.const(np.array([0, *entries], np.int64)), 0
    b.node("Reshape", [name, target], [[shape[0], *parts]], allowzero=allowzero)


def _regroup(b: _Builder) -> None:
    """A Reshape that copies the leading dims (0; symbolic ones too) and regroups the static trailing ones,
    as attention's head split and merge do: with a Transpose, what the view pass composes."""
    x = b.pick(lambda s: len(s) >= 2 and isinstance(s[-1], int) and s[-1] > 0)
    if x is None:
        return
    name, shape = x
    keep = int(b.rng.choice([j for j in range(1, len(shape)) if _static(shape[j:]) and math.prod(shape[j:]) > 0]))  # type: ignore[arg-type]
    parts = _factor(b.rng, math.prod(shape[keep:]))  # type: ignore[arg-type]
    entries = list(parts)
    if 0 not in shape[:keep] and b.rng.random() < 0.4:  # beside a copied 0, onnxruntime cannot infer a -1
        entries[int(b.rng.integers(len(entries)))] = -1
    target = b.const(np.array([0] * keep + entries, np.int64))
    b.node("Reshape", [name, target], [[*shape[:keep], *parts]])


def _heads(b: _Builder) -> None:
    """Attention's head split and merge as exporters write them: ``[A, B, K]`` reshaped to ``[A, B, h, K/h]``
    by a target computed from its shape (symbolic ``A`` and ``B`` read at run time), heads moved forward,
    scores of the heads against themselves at times, heads moved back and merged by a constant ``[0, 0, K]``."""
    x = b.pick(lambda s: len(s) == 3 and isinstance(s[2], int) and s[2] > 1 and 0 not in s)
    if x is None:
        return
    name, (a, c, k) = x
    h = int(b.rng.choice([d for d in range(1, k + 1) if k % d == 0]))  # type: ignore[operator]
    s = b.node("Shape", [name], [[3]], keep=False)[0]
    lead = b.node("Slice", [s, *(b.const(np.array([v], np.int64)) for v in (0, 2, 0))], [[2]], keep=False)[0]
    target = b.node("Concat", [lead, b.const(np.array([h, k // h], np.int64))], [[4]], keep=False, axis=0)[0]  # type: ignore[operator]
    split = b.node("Reshape", [name, target], [[a, c, h, k // h]], keep=False)[0]  # type: ignore[operator]
    moved = b.node("Transpose", [split], [[a, h, c, k // h]], keep=False, perm=[0, 2, 1, 3])[0]  # type: ignore[operator]
    if b.rng.random() < 0.5:
        keys = b.node("Transpose", [moved], [[a, h, k // h, c]], keep=False, perm=[0, 1, 3, 2])[0]  # type: ignore[operator]
        scores = b.node("MatMul", [moved, keys], [[a, h, c, c]], keep=False)[0]
        moved = b.node("MatMul", [scores, moved], [[a, h, c, k // h]], keep=False)[0]  # type: ignore[operator]
    back = b.node("Transpose", [moved], [[a, c, h, k // h]], keep=False, perm=[0, 2, 1, 3])[0]  # type: ignore[operator]
    b.node("Reshape", [back, b.const(np.array([0, 0, k], np.int64))], [[a, c, k]])


def _flatten(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) >= 2 and _static(s[1:]))
    if x is None:
        return
    axis = int(b.rng.integers(1, len(x[1])))
    lead = x[1][0] if axis == 1 else math.prod(x[1][:axis]) if _static(x[1]) else None  # type: ignore[arg-type]
    b.node("Flatten", [x[0]], [[lead, math.prod(x[1][axis:])]], keep=lead is not None, axis=axis)  # type: ignore[arg-type]


def _unsqueeze(b: _Builder) -> None:
    x = b.pick(lambda s: len(s) <= 4)
    if x is None:
        return
    axis = int(b.rng.integers(len(x[1]) + 1))
    out = b.node("Unsqueeze", [x[0], b.const(np.array([axis], np.int64))], [[*x[1][:axis], 1, *x[1][axis:]]])[0]
    if b.rng.random() < 0.5:
        b.node("Squeeze", [out, b.const(np.array([axis], np.int64))], [x[1]])


OPS = (
    _conv_then,
    _unary,
    _binary,
    _matmul,
    _gemm,
    _conv,
    _pool,
    _batchnorm,
    _concat,
    _split,
    _transpose,
    _reshape,
    _regroup,
    _heads,
    _flatten,
    _unsqueeze,
)
"""What a model is drawn from, each op as likely as the others."""


def _inputs(b: _Builder) -> list[tuple[str, list[Dim]]]:
    lead: Dim = "N" if b.rng.random() < 0.6 else int(b.rng.integers(1, 4))
    empty = b.rng.random() < 0.08
    rank = int(b.rng.choice([2, 3, 4, 4]))
    if rank == 4:
        shape: list[Dim] = [lead, int(b.rng.integers(1, 5)), int(b.rng.integers(1, 7)), int(b.rng.integers(1, 7))]
    elif rank == 3:
        shape = [lead, "S" if b.rng.random() < 0.4 else int(b.rng.integers(1, 5)), int(b.rng.integers(1, 9))]
    else:
        shape = [lead, int(b.rng.integers(1, 9))]
    if empty:
        shape[-1] = 0
    inputs = [("x", shape)]
    if b.rng.random() < 0.3:
        inputs.append(("y", list(shape)))
    return inputs


def model(seed: int) -> onnx.ModelProto:
    """The model of ``seed``: one to fourteen ops on one or two inputs, one to three outputs (an input among them at
    times: passed straight through)."""
    b = _Builder(np.random.default_rng(seed))
    inputs = _inputs(b)
    b.values = list(inputs)
    b.names.update(n for n, _ in inputs)
    for _ in range(int(b.rng.integers(1, 15))):
        OPS[int(b.rng.integers(len(OPS)))](b)
    made = b.values[len(inputs) :] or b.values
    count = min(len(made), int(b.rng.integers(1, 4)))
    picked = [made[-1]] + [made[int(k)] for k in b.rng.choice(len(made), size=count - 1, replace=False)]
    if b.rng.random() < 0.1:
        picked.append(inputs[-1])
    outputs = list({n: s for n, s in picked}.items())
    graph = helper.make_graph(
        b.nodes,
        f"fuzz{seed}",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        b.inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def feeds(m: onnx.ModelProto, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random inputs for ``m`` with its symbolic dims at ``sizes``."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in m.graph.input:
        shape = [d.dim_param and sizes[d.dim_param] or d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def run(m: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``m``'s outputs in onnxruntime (its graph optimizations off: the model as written is what is judged)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def differ(original: onnx.ModelProto, optimized: onnx.ModelProto, seed: int) -> str | None:
    """How ``optimized`` differs from ``original`` at each set of `SIZES`: its outputs (names, shapes, values
    within `RTOL`/`ATOL`), or onnxruntime refusing it; None where it does not."""
    names = [o.name for o in original.graph.output]
    if [o.name for o in optimized.graph.output] != names:
        return f"outputs {[o.name for o in optimized.graph.output]} where the original has {names}"
    for k, sizes in enumerate(SIZES):
        inputs = feeds(original, sizes, seed + k)
        want = run(original, inputs)
        try:
            got = run(optimized, inputs)
        except Exception as e:  # noqa: BLE001  (onnxruntime's errors have no common base to name)
            return f"onnxruntime cannot run the result at {sizes}: {str(e).splitlines()[0][:300]}"
        for name, w, g in zip(names, want, got):
            if w.shape != g.shape:
                return f"{name} at {sizes}: shape {g.shape} where the original's is {w.shape}"
            if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
                return f"{name} at {sizes}: max |diff| {np.abs(g - w).max():.3g}"
    return None


COSTS = str(Path(taso.__file__).resolve().parent / "cost" / "reference_costs.json")
"""The shipped cost table: the search is costed without measuring anything, the same on every machine."""


def reading_rules_once(read: Callable = rulecache.proved_rules) -> Callable:
    """`rulecache.proved_rules` read once per store file in this process, not once per model: unpickling the
    shipped rules is 90 % of a small model's run, and every model is optimized with the same rules either way.
    The fuzz puts it in that function's place."""
    memo: dict[str, list] = {}

    def once(db: sqlite_utils.Database) -> list:
        path = db.conn.execute("PRAGMA database_list").fetchone()[2]
        if path not in memo:
            memo[path] = read(db)
        return list(memo[path])

    return once


def trial(seed: int) -> tuple[str, str]:
    """Model ``seed`` through `taso.optimize` with the check off, judged by `differ`: ``("ok", "")``,
    ``("wrong", how)``, ``("crash", the error)``, or ``("invalid", why)`` where onnxruntime cannot run the
    original (a generator's mistake, counted apart)."""
    m = model(seed)
    try:
        onnx.checker.check_model(m, full_check=True)
        for k, sizes in enumerate(SIZES):
            run(m, feeds(m, sizes, seed + k))
    except Exception as e:  # noqa: BLE001
        return "invalid", str(e).splitlines()[0][:300]
    try:
        params = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
        out, _ = taso.optimize(m, check=False, costs=COSTS, dims={p: SIZES[0][p] for p in params})
    except Exception as e:  # noqa: BLE001  (any error on a model onnxruntime runs is a finding)
        return "crash", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    how = differ(m, out, seed)
    return ("wrong", how) if how else ("ok", "")
