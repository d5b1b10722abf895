"""A float64 evaluation of a model: the reference the check measures float32 rounding against.

onnxruntime cannot be that reference on its own: its CPU provider has no double kernel for Conv, AveragePool,
GlobalAveragePool or Erf, so a CNN or a BERT cast to double does not load. The catalogue's numpy semantics
(`taso.ops`) cover those compute ops but not the rest of a real model (Gather, Shape, Erf, Cast, ...). So each
node runs where it can run in double: a catalogue op in numpy; an op outside it in onnxruntime, one node at a
time, fed doubles, or in its own types where onnxruntime has no double kernel for it (an element-wise Erf or a
Cast adds one float32 rounding there, far below what a network's sums accumulate; `Reference.float32_ops`
names them). Weight-only subgraphs are folded first, as onnxruntime folds them at load (`taso.precompute`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from taso import onnx as onnx_io
from taso import ops
from taso.execute import ortlog
from taso.execute.precompute import precompute
from taso.ir import Graph, Node, TensorType


class NoReference(Exception):
    """The model cannot be evaluated in float64 here; the message says which node and why."""


def _global_average_pool(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


NUMPY_KERNELS = {"GlobalAveragePool": _global_average_pool}
"""Ops outside the catalogue with no double kernel in onnxruntime, common enough in real models to be worth a
line of numpy: a float32 GlobalAveragePool before DenseNet's classifier would put float32 rounding into the
reference at the one point every output depends on."""


@dataclass
class Reference:
    """Evaluates one graph in float64 on any number of input sets, reusing its onnxruntime sessions."""

    graph: Graph
    float32_ops: set[str] = field(default_factory=set)
    """Ops outside the catalogue that ran in their own (float32) types: onnxruntime has no double kernel."""
    _sessions: dict[tuple, tuple[object, bool]] = field(default_factory=dict)
    """Sessions by what a node's run depends on: the node named by position (`_by_position`), its inputs' types
    and shapes. Swin-T's 2,295 pass-through nodes (its shape arithmetic, each layer's Reshapes) need 212, and a
    session took longer to make than to run."""

    @classmethod
    def of(cls, g: Graph) -> Reference:
        """``g``'s reference, its weight-only subgraphs folded first (in their own types, as onnxruntime folds
        them at load: an Unsqueeze of a BatchNorm scale is exact, and a folded product rounds once)."""
        return cls(precompute(g)[0])

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's outputs for ``feeds``, computed in float64; raises `NoReference`."""
        g = self.graph
        values = {k: _double(v) for k, v in feeds.items()}
        values.update((k, _double(d.array)) for k, d in g.data.items())
        for n in g.nodes:
            try:  # numpy's errors (on a sequence-typed value, say) mean no reference, not a crash
                with np.errstate(all="ignore"):  # the model's own arithmetic (a Sigmoid's exp overflowing to 0)
                    outs = self._run(n, values)
                values.update((o, _double(np.asarray(y))) for o, y in zip(n.outputs, outs) if o)
            except (ops.OpError, ValueError, TypeError, IndexError, KeyError, ArithmeticError) as e:
                raise NoReference(f"{n.op} cannot run in float64 here ({e})") from None
        return {o: values[o] for o in g.outputs}

    def _run(self, n: Node, values: Mapping[str, np.ndarray]) -> Sequence[np.ndarray]:
        """One node's outputs: in numpy where the catalogue or `NUMPY_KERNELS` has it, else in onnxruntime."""
        if n.is_opaque and (n.domain or n.op not in NUMPY_KERNELS):
            return self._run_opaque(n, values)
        return _run_numpy(n, [values[v] for v in n.inputs if v])

    def _run_opaque(self, n: Node, values: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """One node in onnxruntime: in doubles where it has a kernel for them, else in the model's types."""
        reads = [v for v in dict.fromkeys((*n.inputs, *n.implicit)) if v]
        args = [values[v] for v in reads]
        own = [self._model_dtype(v, a) for v, a in zip(reads, args)]
        one, names = _by_position(n, reads)
        key = (one, tuple((a.dtype.str, a.shape) for a in args), tuple(d.str for d in own))
        if key not in self._sessions:
            self._sessions[key] = self._session(one, names, args, own)
        session, in_double = self._sessions[key]
        feeds = {name: a if in_double else a.astype(d) for name, a, d in zip(names, args, own)}
        try:
            return session.run([o for o in one.outputs if o], feeds)  # type: ignore[attr-defined]
        except Exception as e:  # onnxruntime raises its own exception types
            raise NoReference(f"{n.op} cannot run in onnxruntime ({str(e).splitlines()[0][:200]})") from None

    def _model_dtype(self, name: str, a: np.ndarray) -> np.dtype:
        """The element type the model declares for ``name`` where it and ``a`` are floats; else ``a``'s own."""
        t = self.graph.types.get(name)
        return np.dtype(t.dtype) if t is not None and a.dtype.kind == "f" and np.dtype(t.dtype).kind == "f" else a.dtype

    def _session(self, n: Node, names: list[str], args: list[np.ndarray], own: list[np.dtype]) -> tuple[object, bool]:
        import onnxruntime as ort

        opts = ortlog.session_options()
        # one node, run once or twice: no graph optimizations and no thread pool to set up (5x quicker to make)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        outputs = tuple(o for o in n.outputs if o)
        reason = ""
        for in_double in (True, False):
            types = {v: TensorType(str(a.dtype if in_double else d), a.shape) for v, a, d in zip(names, args, own)}
            one = replace(
                self.graph, nodes=(n,), inputs=tuple(names), outputs=outputs, weights=(), data={}, types=types
            )
            try:
                session = ort.InferenceSession(onnx_io.model_bytes(one), opts, providers=["CPUExecutionProvider"])
            except Exception as e:  # no kernel for these types: try the model's own
                reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                continue
            if not in_double:
                self.float32_ops.add(n.op)
            return session, in_double
        raise NoReference(f"{n.op} cannot run in onnxruntime ({reason})")


def _by_position(n: Node, reads: list[str]) -> tuple[Node, list[str]]:
    """``n`` with its values named by position and no name of its own, so that nodes alike (each layer's
    Reshape) are one node to a session, and the names its reads have there. A node with a subgraph keeps its
    value names: the subgraph reads outer values by name."""
    n = replace(n, name="", doc="")
    if n.implicit:
        return n, reads
    names = {v: f"in{k}" for k, v in enumerate(reads)}
    outputs = tuple(f"out{k}" if o else "" for k, o in enumerate(n.outputs))
    return replace(n, inputs=tuple(names.get(i, "") for i in n.inputs), outputs=outputs), list(names.values())


def _run_numpy(n: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    if n.is_opaque:
        return (NUMPY_KERNELS[n.op](*args),)
    return ops.get(n.op).run(args, n.attr, len(n.outputs))


def _double(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" and a.dtype != np.float64 else a
