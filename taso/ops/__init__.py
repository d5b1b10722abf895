"""The operator catalogue: every fact about an op (arity, attributes, shapes, traits, its value over Z_p).

`taso.ops.opdef` says what an op is and holds the registry; each family module registers its ops, imported
here in the order generation enumerates them (rules, their ids and their order depend on it); what subst
knows of the ONNX ops it does not model is `taso.ops.onnx_facts`; arithmetic over Z_p is `taso.ops.field`.
"""

from taso.ops import elementwise, products, pooling, layout, normalisation, generators, reductions, powers  # noqa: I001 (registration order)
from taso.ops.elementwise import ADD, MUL, RELU, SIGMOID, TANH
from taso.ops.field import EXPONENTIAL, P, salt
from taso.ops.generators import CONV_IDENTITY, ENLARGE, EYE, ONES, POOL_KERNEL
from taso.ops.layout import CONCAT, RESHAPE, SPLIT, TRANSPOSE
from taso.ops.normalisation import BATCHNORM, BN_BIAS, BN_KERNEL, CHANNEL_VECTOR, LAYERNORM, SOFTMAX
from taso.ops.onnx_facts import ONNX_OPS, OnnxOp
from taso.ops.opdef import (
    OPS,
    REQUIRED,
    Export,
    OpDef,
    OpError,
    get,
    having,
    index_input,
    infer,
    moves_values,
    shape_input,
    size_inputs,
    traits_of,
)
from taso.ops.pooling import AVGPOOL, MAXPOOL
from taso.ops.powers import EXP, POW, SQRT
from taso.ops.products import BLOCK_DIAGONAL, CONV, GEMM, MATMUL
from taso.ops.reductions import GLOBAL_AVGPOOL, REDUCE_MEAN, REDUCE_SUM
from taso.ops.traits import (
    BATCH_POLYMORPHIC,
    COMMUTATIVE,
    CONSTANT,
    ELEMENTWISE,
    EPILOGUE,
    FIELD_EXACT,
    PLANEWISE,
    PRODUCT_EPILOGUE,
    REARRANGES,
    SHAPE_ONLY,
    SKIP_EPILOGUE,
    TASO,
    VIEW,
    WINDOWED,
)

__all__ = [
    "ADD",
    "AVGPOOL",
    "BATCHNORM",
    "BATCH_POLYMORPHIC",
    "BLOCK_DIAGONAL",
    "BN_BIAS",
    "BN_KERNEL",
    "CHANNEL_VECTOR",
    "COMMUTATIVE",
    "CONCAT",
    "CONSTANT",
    "CONV",
    "CONV_IDENTITY",
    "ELEMENTWISE",
    "ENLARGE",
    "EPILOGUE",
    "EXP",
    "EXPONENTIAL",
    "EYE",
    "Export",
    "FIELD_EXACT",
    "GEMM",
    "GLOBAL_AVGPOOL",
    "LAYERNORM",
    "MATMUL",
    "MAXPOOL",
    "MUL",
    "ONES",
    "ONNX_OPS",
    "OPS",
    "OnnxOp",
    "OpDef",
    "OpError",
    "P",
    "PLANEWISE",
    "POOL_KERNEL",
    "POW",
    "PRODUCT_EPILOGUE",
    "REARRANGES",
    "REDUCE_MEAN",
    "REDUCE_SUM",
    "RELU",
    "REQUIRED",
    "RESHAPE",
    "SHAPE_ONLY",
    "SIGMOID",
    "SKIP_EPILOGUE",
    "SOFTMAX",
    "SPLIT",
    "SQRT",
    "TANH",
    "TASO",
    "TRANSPOSE",
    "VIEW",
    "WINDOWED",
    "elementwise",
    "generators",
    "get",
    "having",
    "index_input",
    "infer",
    "layout",
    "moves_values",
    "normalisation",
    "pooling",
    "powers",
    "products",
    "reductions",
    "salt",
    "shape_input",
    "size_inputs",
    "traits_of",
]
