"""TASO's generator-only ops, with no ONNX op of their own: Enlarge (a kernel zero-padded) and the constant
generators (Ones, Eye, ConvIdentity, PoolKernel), which export writes as Pad and Constant."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from taso.ir import Dim, TensorType
from taso.ops.opdef import REQUIRED, Arrays, Attrs, Export, FieldRule, OpDef, OpError, register
from taso.ops.traits import (
    CONSTANT,
    FIELD_EXACT,
    PLANEWISE,
    REARRANGES,
    TASO,
)
from taso.ops.windows import pad_hw


def _enlarge_shape(types: Sequence[TensorType], attrs: Attrs, consts: Sequence, n: int) -> tuple[TensorType, ...]:
    w = types[0]
    if w.rank != 4:
        raise OpError("Enlarge needs a 4-D kernel")
    assert w.shape is not None
    kh, kw = attrs["kernel_shape"]  # type: ignore[misc]
    for have, want in zip(w.shape[2:], (kh, kw)):
        if not isinstance(have, int) or have > want or (want - have) % 2:
            raise OpError(f"cannot centre a kernel of {have} in {want}")
    return (TensorType(w.dtype, (*w.shape[:2], kh, kw)),)


def _enlarge_pads(w_shape: Sequence[Dim], attrs: Attrs) -> list[int]:
    kh, kw = attrs["kernel_shape"]  # type: ignore[misc]
    ph, pw = (kh - int(w_shape[2])) // 2, (kw - int(w_shape[3])) // 2  # type: ignore[arg-type]
    return [ph, pw, ph, pw]


def _enlarge(xs: Arrays, attrs: Attrs, n: int) -> tuple[np.ndarray, ...]:
    return (pad_hw(xs[0], _enlarge_pads(xs[0].shape, attrs)),)


def _enlarge_export(attrs: Attrs, types: Sequence[TensorType]) -> Export:
    assert types[0].shape is not None
    p = _enlarge_pads(types[0].shape, attrs)
    return Export("Pad", {"mode": "constant"}, (np.array([0, 0, p[0], p[1], 0, 0, p[2], p[3]], dtype=np.int64),))


ENLARGE = register(
    OpDef(
        "Enlarge",
        (1, 1),
        {"kernel_shape": REQUIRED},
        _enlarge_shape,
        _enlarge,
        "Zero-pad a conv kernel, centred, to a larger odd size (TASO's enlarge); exported as Pad.",
        export=_enlarge_export,
        onnx=False,
        tags=frozenset({REARRANGES, FIELD_EXACT, PLANEWISE, TASO}),
    )
)


def _constant(
    name: str,
    doc: str,
    make: Callable[[Attrs], np.ndarray],
    shape: Callable[[Attrs], tuple],
    field: FieldRule | None = None,
) -> OpDef:
    """A zero-input op that produces a fixed tensor; exported as an ONNX Constant node."""

    def export(attrs: Attrs, types: Sequence[TensorType]) -> Export:
        return Export("Constant", {"value": make(attrs)})  # type: ignore[dict-item]

    return register(
        OpDef(
            name,
            (0, 0),
            {"shape": REQUIRED, "dtype": "float32"},
            lambda types, a, c, n: (TensorType(str(a["dtype"]), shape(a)),),
            lambda xs, a, n: (make(a),),
            doc,
            export=export,
            onnx=False,
            tags=frozenset({CONSTANT, FIELD_EXACT, TASO}),
            field=field,
        )
    )


def _eye(attrs: Attrs) -> np.ndarray:
    n = int(attrs["shape"][0])  # type: ignore[index]
    return np.eye(n, dtype=str(attrs["dtype"]))


def _conv_identity(attrs: Attrs) -> np.ndarray:
    c, _, kh, kw = attrs["shape"]  # type: ignore[misc]
    w = np.zeros((c, 1, kh, kw), dtype=str(attrs["dtype"]))
    w[:, 0, kh // 2, kw // 2] = 1
    return w


def _pool_kernel(attrs: Attrs) -> np.ndarray:
    c, _, kh, kw = attrs["shape"]  # type: ignore[misc]
    return np.full((c, 1, kh, kw), 1 / (kh * kw), dtype=str(attrs["dtype"]))


ONES = _constant(
    "Ones",
    "A tensor of ones (mul by it is the identity).",
    lambda a: np.ones(a["shape"], str(a["dtype"])),  # type: ignore[arg-type]
    lambda a: tuple(a["shape"]),  # type: ignore[arg-type]
)
EYE = _constant(
    "Eye",
    "The identity matrix of shape (n, n) (matmul by it is the identity).",
    _eye,
    lambda a: (a["shape"][0], a["shape"][0]),  # type: ignore[index]
)
CONV_IDENTITY = _constant(
    "ConvIdentity",
    "Depthwise kernel (C, 1, kh, kw) with a centred 1: a SAME conv with group=C by it is the identity.",
    _conv_identity,
    lambda a: tuple(a["shape"]),  # type: ignore[arg-type]
)
POOL_KERNEL = _constant(
    "PoolKernel",
    "Depthwise kernel (C, 1, kh, kw) of 1/(kh*kw): a group=C conv by it is average pooling with padding counted.",
    _pool_kernel,
    lambda a: tuple(a["shape"]),  # type: ignore[arg-type]
    lambda xs, a, n, z: (np.full(a["shape"], z.modinv(a["shape"][2] * a["shape"][3]), np.int64),),  # type: ignore[index, arg-type]
)
