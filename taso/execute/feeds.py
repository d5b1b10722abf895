"""The check's input sets: given by the user (an npz of one array per model input, validated against the
model's input types as any other input is), or drawn from those types with integer inputs given values the
graph says the model can run on.

Random integers suit few integer inputs: token ids must lie within the embedding they index, and a length, a
repeat count or a step must be positive. The graph tells these apart (`taso.ops.index_input`,
`taso.ops.shape_input`, `taso.ops.size_inputs`, from the ops' entries and `taso.ops.onnx_facts`). Nothing in a graph says that a voice-activity model's sample
rate must be 8000 or 16000: the user gives such values (``--check-inputs FILE.npz``), and when onnxruntime
rejects the original on drawn values, `refusal` names the inputs the failing node depends on.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from taso import onnx as onnx_io
from taso import ops
from taso.errors import BadInput
from taso.ir import Graph, Node, TensorType

DEFAULT_DIM = 2
"""Size given to symbolic and unknown dims when drawing inputs (2, not 1, so batch mixing shows)."""

Source = str | os.PathLike[str] | Mapping[str, np.ndarray]
"""One given input set: an npz file's path, or the arrays themselves (the Python API)."""


@dataclass(frozen=True)
class Sample:
    """One input set the user gave, and how messages name it (its option and file, or its place in the list)."""

    label: str
    arrays: Mapping[str, np.ndarray]


def refuse_oversized(g: Graph, dims: Mapping[str, int], hint: str = "give smaller sizes (--dim)") -> None:
    """Refuse, before any allocation, random inputs for ``g`` at ``dims`` that would not fit in this machine's
    memory, naming the largest, with ``hint`` on what to do: an input dim of 2^40 (or ``--dim batch=2^40``)
    ended in numpy's "Unable to allocate 8.00 TiB" traceback. Floats are drawn as float64 first: 8 bytes each."""
    sizes = {}
    for v in g.inputs:
        t = g.types.get(v)
        if t is not None and t.shape is not None and np.dtype(t.dtype).kind in "fiub":
            dtype = np.dtype(t.dtype)
            sizes[v] = math.prod(concrete_shape(t, dims)) * max(dtype.itemsize, 8 if dtype.kind == "f" else 0)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if sum(sizes.values()) > memory:
        v = max(sizes, key=sizes.__getitem__)
        shape = ", ".join(map(str, concrete_shape(g.types[v], dims)))
        raise BadInput(
            f"random values for input {v!r} ({g.types[v].dtype}[{shape}]) would take {_bytes(sizes[v])}, more than "
            f"this machine's {_bytes(memory)} of memory; {hint}"
        )


def _bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it at 1 or more: 4.0 TiB."""
    units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    k = min(len(units) - 1, max(0, (n.bit_length() - 1) // 10))
    return f"{n / 2 ** (10 * k):.1f} {units[k]}"


def bound_dims(g: Graph, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The size each named symbolic dim of ``g``'s inputs has in ``arrays`` (one input set): what a check ran at."""
    sizes: dict[str, int] = {}
    for v in g.inputs:
        t = g.types.get(v)
        if t is not None and t.shape is not None and v in arrays:
            for d, n in zip(t.shape, np.shape(arrays[v])):
                if isinstance(d, str) and d:
                    sizes.setdefault(d, int(n))
    return sizes


def concrete_shape(t: TensorType, dims: Mapping[str, int]) -> tuple[int, ...]:
    if t.shape is None:
        raise BadInput("cannot draw random inputs for an input of unknown rank; give its shape in the model")
    # a negative size is an exporter's way to say unknown (paddle2onnx writes -1), like None
    return tuple(
        d if isinstance(d, int) and d >= 0 else dims.get(d if isinstance(d, str) else "", DEFAULT_DIM) for d in t.shape
    )


# ---- values drawn for integer inputs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Hint:
    """What the graph says an integer input's values must be for the model to run: indices below ``below``,
    the whole shape ``shape_of`` of another value, or (``size``) positive sizes."""

    below: int | None = None
    shape_of: tuple[int, ...] | None = None
    size: bool = False


def hints(g: Graph, dims: Mapping[str, int]) -> dict[str, Hint]:
    """`Hint` of each integer input of ``g`` the graph says something about (its symbolic dims at ``dims``)."""
    consumers: dict[str, list[tuple[Node, int]]] = {}
    for n in g.nodes:
        if not n.domain:
            for k, v in enumerate(n.inputs):
                consumers.setdefault(v, []).append((n, k))
    found = {}
    for v in g.inputs:
        t = g.types.get(v)
        if t is None or np.dtype(t.dtype).kind not in "iu":
            continue
        below = [s for n, k in _moved_uses(v, consumers) if (s := _indexed_size(g, n, k, dims))]
        shapes = [s for n, k in consumers.get(v, []) if (s := _own_shape(g, n, k, dims)) is not None]
        if below:
            found[v] = Hint(below=min(below))
        elif shapes and t.shape is not None and concrete_shape(t, dims) == (len(shapes[0]),):
            found[v] = Hint(shape_of=shapes[0])
        elif _feeds_sizes(g, v, consumers):
            found[v] = Hint(size=True)
    return found


def integers(hint: Hint | None, shape: tuple[int, ...], rng: np.random.Generator, size: int) -> np.ndarray:
    """Values for an integer input of ``shape``: as its `Hint` says (a size is ``size``), else 0 or 1."""
    if hint is None:
        return rng.integers(0, 2, shape)
    if hint.below is not None:
        return rng.integers(0, hint.below, shape)
    if hint.shape_of is not None:
        return np.array(hint.shape_of).reshape(shape)
    return np.full(shape, size)


def sizes(dims: Mapping[str, int]) -> tuple[int, ...]:
    """The values to try, in turn, for integers that size a result: first the one size the symbolic dims were
    given where they share one (a length input then matches them), else `DEFAULT_DIM`; then 1, which an Expand
    to it or a Tile by it always accepts."""
    given = set(dims.values())
    return tuple(dict.fromkeys((given.pop() if len(given) == 1 else DEFAULT_DIM, 1)))


def _static_shape(g: Graph, v: str, dims: Mapping[str, int]) -> tuple[int, ...] | None:
    """``v``'s shape once the inputs' symbolic dims are fixed, where it is known: a weight's, an input's, or
    another value's that inference made static."""
    if v in g.data:
        return tuple(g.data[v].array.shape)
    t = g.types.get(v)
    if t is None or t.shape is None:
        return None
    if v in g.inputs:
        return concrete_shape(t, dims)
    return t.shape if all(isinstance(d, int) and d >= 0 for d in t.shape) else None  # type: ignore[return-value]


def _moved_uses(v: str, consumers: Mapping[str, list[tuple[Node, int]]]) -> list[tuple[Node, int]]:
    """The uses of ``v``'s values: its own, and those of the values ops that move them make (`ops.moves_values`)."""
    uses, todo, seen = [], [v], {v}
    while todo:
        for n, k in consumers.get(todo.pop(), []):
            uses.append((n, k))
            if ops.moves_values(n.op) and k not in ops.size_inputs(n.op):
                todo.extend(o for o in n.outputs if o and o not in seen)
                seen.update(n.outputs)
    return uses


def _indexed_size(g: Graph, n: Node, k: int, dims: Mapping[str, int]) -> int | None:
    """The size of the axis that input ``k`` of ``n`` indexes, where it is one and that size is known."""
    index, data = ops.index_input(n.op) or (-1, -1)
    shape = _static_shape(g, n.inputs[data], dims) if k == index else None
    if not shape:
        return None
    axis = onnx_io.int_attrs(n).get("axis", 0)
    return shape[int(axis)] if -len(shape) <= int(axis) < len(shape) and shape[int(axis)] > 0 else None


def _own_shape(g: Graph, n: Node, k: int, dims: Mapping[str, int]) -> tuple[int, ...] | None:
    """The shape of the data ``n`` reshapes or expands, where input ``k`` is the target shape."""
    shape, data = ops.shape_input(n.op) or (-1, -1)
    return _static_shape(g, n.inputs[data], dims) if k == shape else None


def _feeds_sizes(g: Graph, v: str, consumers: Mapping[str, list[tuple[Node, int]]]) -> bool:
    """Whether integer values computed from ``v``'s (not from its shape) reach an input that sizes a result."""
    seen, todo = {v}, [v]
    while todo:
        for n, k in consumers.get(todo.pop(), []):
            if k in ops.size_inputs(n.op):
                return True
            if ops.SHAPE_ONLY in ops.traits_of(n.op):
                continue
            for o in n.outputs:
                t = g.types.get(o)
                if o and o not in seen and (t is None or np.dtype(t.dtype).kind in "iu"):
                    seen.add(o)
                    todo.append(o)
    return False


def refusal(g: Graph, error: str) -> str:
    """Why the check cannot run the original on drawn inputs, and what to do: the integer or bool inputs the
    node onnxruntime names depends on (every such input where it names none) likely need meaningful values."""
    suspects = [v for v in g.inputs if (t := g.types.get(v)) is not None and np.dtype(t.dtype).kind in "iub"]
    named = re.search(r"node '([^']+)'", error)
    node = next((n for n in g.nodes if named and n.name == named.group(1)), None)
    if node is not None:
        suspects = [v for v in suspects if v in _ancestors(g, node)]
    who = (
        f"input{'s' if len(suspects) > 1 else ''} "
        + ", ".join(f"{v!r} ({g.types[v].dtype})" for v in suspects)
        + f" likely need{'' if len(suspects) > 1 else 's'} meaningful values"
        if suspects
        else "its inputs may need meaningful values"
    )
    return (
        f"onnxruntime cannot run the original model on the check's random inputs ({error}); {who}: give them "
        "with --check-inputs FILE.npz (numpy.savez, one array per input), or skip the check with --no-check"
    )


def _ancestors(g: Graph, node: Node) -> set[str]:
    """Every value ``node`` depends on."""
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    seen: set[str] = set()
    todo = list(node.reads)
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(producer[v].reads if v in producer else ())
    return seen


# ---- input sets the user gives ----------------------------------------------------------------------------


def given(sources: Source | Sequence[Source], g: Graph, dims: Mapping[str, int]) -> list[Sample]:
    """The input sets in ``sources`` (npz paths or mappings of arrays, one set each), each checked against
    ``g``'s inputs: every input once and nothing else, its element type and rank, the dims the model fixes, and
    one size per symbolic dim, the ``dims`` the user gave (``--dim``) included. Raises `BadInput`."""
    if isinstance(sources, str | os.PathLike | Mapping):
        sources = [sources]
    samples = []
    for k, source in enumerate(sources):
        if isinstance(source, Mapping):  # handed over in Python: named as the API's keyword names it
            label = f"check_inputs[{k}]"
            arrays = {str(name): np.asarray(a) for name, a in source.items()}
        else:
            label = f"--check-inputs {os.fspath(source)}"
            arrays = _read(os.fspath(source))
        _validate(label, arrays, g, dims)
        samples.append(Sample(label, arrays))
    return samples


def _read(path: str) -> dict[str, np.ndarray]:
    where = f"--check-inputs {path}"
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise BadInput(f"{where}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{where}: is a folder") from None
    except OSError as e:
        raise BadInput(f"{where}: cannot read ({e.strerror or e})") from None
    except (ValueError, EOFError, zipfile.BadZipFile):
        raise BadInput(f"{where}: not an npz file (numpy.savez, one array per input)") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise BadInput(f"{where}: one .npy array, not an npz of one array per input (numpy.savez)")
    with loaded:
        try:
            return {name: loaded[name] for name in loaded.files}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise BadInput(f"{where}: not an npz of plain arrays ({str(e).splitlines()[0][:120]})") from None


def _validate(where: str, arrays: Mapping[str, np.ndarray], g: Graph, dims: Mapping[str, int]) -> None:
    inputs = ", ".join(g.inputs) or "none"
    for name in arrays:
        if name not in g.inputs:
            raise BadInput(f"{where}: {name!r} is not an input of the model (its inputs: {inputs})")
    bound: dict[str, tuple[int, str]] = {}
    for v in g.inputs:
        if v not in arrays:
            raise BadInput(f"{where}: no array for input {v!r} (give one per input: {inputs})")
        a, t = arrays[v], g.types.get(v)
        if t is None:
            continue
        if a.dtype != np.dtype(t.dtype):
            raise BadInput(f"{where}: {v!r} is {a.dtype}, the model takes {t}")
        if t.shape is None:
            continue
        if a.ndim != len(t.shape):
            raise BadInput(f"{where}: {v!r} has shape {a.shape}, the model takes rank {len(t.shape)} ({t})")
        for axis, (d, size) in enumerate(zip(t.shape, a.shape)):
            if isinstance(d, int) and d >= 0 and d != size:
                raise BadInput(f"{where}: {v!r} has shape {a.shape}, the model fixes its dim {axis} at {d} ({t})")
            if not isinstance(d, str) or not d:
                continue
            if d in dims and dims[d] != size:
                raise BadInput(f"{where}: {v!r} gives {d}={size}, but --dim {d}={dims[d]}")
            first, by = bound.setdefault(d, (size, v))
            if first != size:
                raise BadInput(f"{where}: {v!r} gives {d}={size}, but {by!r} gives {d}={first}")
