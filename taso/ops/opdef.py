"""What an operator is to subst (`OpDef`), and the registry of the ones it models: every fact about an op sits
on its entry, and every stage reads the registry (`get`, `having`), never a list of names of its own.

Each `OpDef` gives an op's arity, attribute schema (with defaults), shape rule, numpy reference semantics and
how it maps to and from ONNX. Import, export, the generator, fingerprints, the verifier and the cost model all
read this table; an op that is not here is opaque to subst and passes through untouched (what subst knows of
such ONNX ops is in `taso.ops.onnx_facts`).

ONNX ops keep their ONNX names and attributes, normalised (defaults filled in, ``auto_pad`` resolved to explicit
pads) so that equal ops compare equal. The TASO-only ops (kernel enlarge, constant generators) have no ONNX op
of their own; they only appear in generated graphs or on weights, and export writes them as the ONNX ops that
compute the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from taso.ir import AttrValue, TensorType, canonical_attr
from taso.ops.onnx_facts import ONNX_OPS, OnnxOp
from taso.ops.traits import COMMUTATIVE, ELEMENTWISE, REARRANGES

Attrs = Mapping[str, AttrValue]
Arrays = Sequence[np.ndarray]
ShapeRule = Callable[[Sequence[TensorType], Attrs, Sequence["np.ndarray | None"], int], tuple[TensorType, ...]]
NumpyRule = Callable[[Arrays, Attrs, int], tuple[np.ndarray, ...]]
Normalizer = Callable[[dict[str, AttrValue], Sequence["TensorType | None"], int], "dict[str, AttrValue] | str"]
FieldRule = Callable[[Arrays, Attrs, int, int], tuple[np.ndarray, ...]]
"""Semantics over Z_p (`taso.ops.field`): (inputs in [0, p), attrs, output count, key) -> outputs in [0, p)."""

REQUIRED = object()


class OpError(ValueError):
    """An op used with inputs or attributes its description does not allow."""


@dataclass(frozen=True)
class Export:
    """How an IR node is written as ONNX: op type, attributes, and constant inputs appended to its inputs."""

    op_type: str
    attrs: dict[str, AttrValue]
    extra_inputs: tuple[np.ndarray, ...] = ()


@dataclass(frozen=True)
class OpDef:
    """Everything subst knows about one operator."""

    name: str
    arity: tuple[int, int]
    """Fewest and most inputs (optional trailing inputs make them differ)."""
    attrs: Mapping[str, object]
    """Attribute name -> default (``REQUIRED`` when it has none)."""
    infer: ShapeRule
    compute: NumpyRule
    doc: str
    outputs: int | None = 1
    """Number of outputs; ``None`` when the node decides (Split)."""
    static_inputs: tuple[int, ...] = ()
    """Inputs whose *values* the shape rule needs (Reshape's shape, Split's sizes): they size its result."""
    shape_of: tuple[int, int] | None = None
    """(shape input, data input) where an input is a whole shape, for which the data's own is a valid value
    (Reshape's target; `taso.ops.onnx_facts.OnnxOp.shape_of` says it of the ONNX ops outside the catalogue)."""
    commutative: bool = False
    elementwise: bool = False
    min_opset: int = 13
    normalize: Normalizer | None = None
    """Extra ONNX -> IR attribute normalisation; returns a reason string to decline the node."""
    export: Callable[[Attrs, Sequence[TensorType]], Export] | None = None
    """IR -> ONNX; default: an ONNX node of the same name and attributes."""
    onnx: bool = True
    """Whether ONNX has an op of this name that import maps onto this description."""
    domain: str = ""
    """The ONNX domain import reads it from and export writes it to: ``com.microsoft`` for onnxruntime's
    contrib kernels (`taso.ops.fused`), the default domain (``""``) for every other op."""
    tags: frozenset[str] = field(default_factory=frozenset)
    """Traits (`taso.ops.traits`) each stage reads through `having`."""
    field: FieldRule | None = None
    """Finite-field semantics where ``compute`` followed by ``% p`` is not right (non-linear ops, division)."""
    fuses: frozenset[str] = frozenset()
    """Traits of the consumers onnxruntime fuses into this op's kernel (`taso.cost.EPILOGUES`)."""
    attr_inputs: tuple[tuple[str, int, int], ...] = ()
    """Attributes ONNX moved to a constant input from some opset on: (name, input position, opset). Import
    reads the constant into the attribute (the node keeps only the inputs before it), export writes it back as
    that input, so the IR has one form whatever opset the file was written at."""
    onnx_inputs: tuple[int, ...] = ()
    """The ONNX input position of each IR input, where they differ: import reads those positions (refusing a node
    with an input elsewhere) and export writes there, the positions between left empty (MultiHeadAttention's
    attention bias is its input 5, after two optional inputs subst does not model). Empty: the same positions."""
    opaque: OnnxOp | None = None
    """What the check must know of the ONNX node where import leaves it opaque (a computed attribute input:
    Gather's token ids), as `ONNX_OPS` says it of the ops outside the catalogue."""
    no_spec: str = ""
    meaning: str = ""
    """What the op computes, in the expression language of target-directed generation (`taso.generate.targets`,
    the language `specs/targets.toml` defines targets in) over its inputs ``a`` and ``b`` and, for a reduction,
    the ``axis`` it runs along (kept as size 1): ``"a / b"``, ``"erf(a)"``, ``"mean(a, axis)"``. The generator
    spells targets in the ops that have one (`taso.generate.target`); a unary one written ``f(a)`` makes ``f`` a
    function of that language. Empty: the generator does not spell targets with it."""
    """Why no spec under specs/ models this op, where none does: rules using it stay unknown (a test holds every
    op to a spec or to this reason)."""

    @property
    def traits(self) -> frozenset[str]:
        """Its tags with its flags: what `having` matches."""
        flags = {ELEMENTWISE: self.elementwise, COMMUTATIVE: self.commutative}
        return self.tags | {t for t, on in flags.items() if on}

    @property
    def exportable(self) -> bool:
        """Whether export can write it: an ONNX op of its name, or an export rule (others must be folded)."""
        return self.onnx or self.export is not None

    def to_onnx(self, attrs: Attrs, in_types: Sequence[TensorType]) -> Export:
        if self.export is not None:
            return self.export(attrs, in_types)
        # Defaults are left out: valid in every opset >= 13, including ones before an attribute existed.
        defaults = {k: canonical_attr(v) for k, v in self.attrs.items() if v is not REQUIRED}  # type: ignore[arg-type]
        return Export(self.name, {k: v for k, v in attrs.items() if defaults.get(k, REQUIRED) != canonical_attr(v)})

    def from_onnx(
        self, onnx_attrs: dict[str, AttrValue], in_types: Sequence[TensorType | None], n_inputs: int, opset: int
    ) -> dict[str, AttrValue] | str:
        """Normalised IR attributes for an ONNX node of this op, or the reason it stays opaque."""
        if opset < self.min_opset:
            return f"{self.name} needs opset {self.min_opset}"
        if not self.arity[0] <= n_inputs <= self.arity[1]:
            return f"{self.name} with {n_inputs} inputs"
        attrs = dict(onnx_attrs)
        if self.normalize is not None:
            result = self.normalize(attrs, in_types, opset)
            if isinstance(result, str):
                return result
            attrs = result
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            return f"{self.name} attribute(s) {sorted(unknown)} not modelled"
        for k, default in self.attrs.items():
            if k not in attrs:
                if default is REQUIRED:
                    return f"{self.name} needs attribute {k!r}"
                attrs[k] = default
        return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}

    def run(self, inputs: Arrays, attrs: Attrs, n_outputs: int = 1) -> tuple[np.ndarray, ...]:
        return self.compute(inputs, attrs, n_outputs)


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the catalogue; the order ops are registered in is the order generation enumerates them."""
    if op.name in OPS:
        raise OpError(f"operator {op.name} described twice")
    OPS[op.name] = op
    return op


def traits_of(name: str) -> frozenset[str]:
    """The traits of the op ``name``: its catalogue entry's, else what `ONNX_OPS` says of it (none if neither)."""
    if name in OPS:
        return OPS[name].traits
    return ONNX_OPS[name].traits if name in ONNX_OPS else frozenset()


def having(trait: str) -> frozenset[str]:
    """Names of the ops with ``trait``, the catalogue's and the opaque ONNX ops' (`ONNX_OPS`)."""
    return frozenset(name for name in (*OPS, *ONNX_OPS) if trait in traits_of(name))


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise OpError(f"unknown operator {name!r}; the catalogue has {sorted(OPS)}") from None


def infer(
    op: str, types: Sequence[TensorType], attrs: Attrs, consts: Sequence[np.ndarray | None] = (), n_outputs: int = 1
) -> tuple[TensorType, ...]:
    """Output types of ``op`` applied to inputs of ``types``; raises `OpError` on inputs it does not accept."""
    d = get(op)
    if not d.arity[0] <= len(types) <= d.arity[1]:
        raise OpError(f"{op} takes {d.arity[0]}..{d.arity[1]} inputs, got {len(types)}")
    consts = list(consts) + [None] * (len(types) - len(consts))
    return d.infer(types, attrs, consts, d.outputs or n_outputs)


# ---- what an op's integer inputs mean, catalogued or not (the check draws values a model can run on) --------


def moves_values(op: str) -> bool:
    """Whether ``op``'s output holds only its data inputs' values, moved (the `REARRANGES` trait)."""
    return REARRANGES in traits_of(op)


def size_inputs(op: str) -> tuple[int, ...]:
    """Positions of ``op``'s inputs whose values size or shape its result (`OpDef.static_inputs`, `OnnxOp.sizes`)."""
    if op in OPS:
        return OPS[op].static_inputs + (OPS[op].opaque.sizes if OPS[op].opaque else ())
    return ONNX_OPS[op].sizes if op in ONNX_OPS else ()


def shape_input(op: str) -> tuple[int, int] | None:
    """(shape input, data input) of an op one of whose inputs is a whole shape the data's own shape fits."""
    if op in OPS:
        return OPS[op].shape_of
    return ONNX_OPS[op].shape_of if op in ONNX_OPS else None


def index_input(op: str) -> tuple[int, int] | None:
    """(indices input, data input) of an op that picks elements of its data by index (`OnnxOp.indices`)."""
    if op in OPS:
        return OPS[op].opaque.indices if OPS[op].opaque else None
    return ONNX_OPS[op].indices if op in ONNX_OPS else None
