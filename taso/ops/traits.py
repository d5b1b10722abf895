"""The traits an op may have: what each stage asks of an op, declared on its entry (tinygrad's `GroupOp` sets).

A stage derives its op set with `taso.ops.having(trait)`, never from a list of names of its own. A trait holds of
a catalogue op (`OpDef.tags`, or its ``elementwise``/``commutative`` flags) or of an ONNX op subst passes through
(`taso.ops.onnx_facts`).
"""

from __future__ import annotations

REARRANGES = "rearranges"
"""Its output holds only its inputs' values, moved, and zeros: folding it into a weight cannot overflow, so a
search may leave the folded array to be made when first read (`taso.search.rewrite`); token ids it moves are
still token ids (`taso.execute.feeds`)."""
CONSTANT = "constant"
"""A zero-input op making a fixed tensor whose ``shape`` attribute a rewrite recomputes from the model's dims."""
ELEMENTWISE = "elementwise"
"""Each output element depends on the inputs' elements at its own position only (``OpDef.elementwise``), the
inputs broadcast numpy-style: the output's shape is their broadcast (`taso.optimize.idle` relies on it)."""
COMMUTATIVE = "commutative"
"""The inputs may be swapped (``OpDef.commutative``); the matcher and the generator expand the swap."""
FIELD_EXACT = "field-exact"
"""Its semantics over Z_p (`taso.ops.field`) is its real semantics mod p (a polynomial with rational
coefficients), so a field mismatch of a rule made of such ops refutes it (`taso.verify.precheck`). Not for keyed
random stand-ins (Relu, MaxPool) nor for ops that refuse the field."""
BATCH_POLYMORPHIC = "batch-polymorphic"
"""Applied to a stack of matrices (weights broadcast) it equals the stack of its per-matrix results, with
``axis``/``perm``/``axes`` shifted past the stack's axes: a 2-D rule over such ops is lifted to any rank
(`taso.rules.lifted`)."""
PLANEWISE = "planewise"
"""On an NCHW tensor it maps each (image, channel) plane on its own: a batch of such tensors may be folded into
the images (`taso.generate.extend`), and a split along axis 0 or 1 passes through."""
WINDOWED = "windowed"
"""Slides a window over an image's spatial dims: generated graphs must leave images of at least
`taso.generate.MIN_IMAGE` pixels."""
TASO = "taso"
"""One of the ops of TASO's generator (`taso.generate.TASO_FORMS`): ops added later stay out of the default rule
set, so adding one leaves the shipped store as it is."""
EPILOGUE = "epilogue"
"""onnxruntime fuses it into the Conv, MatMul or Gemm whose output it consumes (`taso.cost`)."""
PRODUCT_EPILOGUE = "product-epilogue"
"""onnxruntime fuses it into a MatMul or Gemm whose output it consumes (FusedMatMul + BiasSoftmax, Gemm +
SkipLayerNormalization on the CUDA provider), though not into a Conv."""
SKIP_EPILOGUE = "skip-epilogue"
"""onnxruntime fuses it with the Add whose output it consumes (SkipLayerNormalization)."""
VIEW = "view"
"""onnxruntime runs it as a view of its input (no copy, no kernel) when the input is an intermediate value."""
ORT_ONLY = "onnxruntime-only"
"""Only onnxruntime runs it: one of its fused kernels (`taso.ops.fused`), in its contrib domain or registered by it
in the default one (SimplifiedLayerNormalization). A rewrite target for onnxruntime alone: optimizing with
``standard_onnx`` uses no rule that writes one (`taso.optimize.pipeline`)."""
SHAPE_ONLY = "shape-only"
"""Its output depends on its input's shape alone, never its values (Shape, Size): it can be computed from a
static type (`taso.onnx`), and integers flowing into it size nothing (`taso.execute.feeds`)."""
