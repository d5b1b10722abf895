"""ONNX I/O: the only package that knows protobuf; models in and out of the IR.

Import validates the file (format, external-data paths, domains, opset; older opsets are upgraded with onnx's
version converter), infers shapes, and builds a `taso.ir.Graph`: catalogue ops get normalised attributes,
everything else becomes an opaque node that keeps its attributes verbatim. Export writes the graph back with
the model's IR version, opsets, names, doc strings and metadata, and saves atomically (temp file + rename),
with external data when the source had it or the weights pass protobuf's 2 GB limit.

- `read`: a file (or a caller's ModelProto) to a validated, opset-13+ ModelProto
- `infer`: every value's type, the shape arithmetic over static shapes evaluated to help
- `runtime`: onnxruntime as the judge of ops onnx does not know (contrib ops), and the types of their values
- `importer`: a ModelProto to the IR (`load_model`), opaque nodes and why they are
- `export`: the IR to a ModelProto and a file (`save_model`)
- `dims`: symbolic dims fixed to sizes, for costing a dynamic model at one size

Other stages use it as ``from taso import onnx as onnx_io``.
"""

from taso.onnx.dims import check_dims, concretize, dim_sizes, input_dims, reinfer
from taso.onnx.export import model_bytes, move_model, opset_of, save_model, to_proto
from taso.onnx.importer import Opaque, from_proto, import_model, int_attrs, load_model, opaque_reasons
from taso.onnx.infer import NONDETERMINISTIC
from taso.onnx.read import (
    MIN_OPSET,
    ORT_MIN_OPSET,
    PROTOBUF_LIMIT,
    ModelProto,
    Upgrade,
    op_census,
    read_model_proto,
    read_proto,
    write_proto,
)

__all__ = [
    "MIN_OPSET",
    "NONDETERMINISTIC",
    "ORT_MIN_OPSET",
    "PROTOBUF_LIMIT",
    "ModelProto",
    "Opaque",
    "Upgrade",
    "check_dims",
    "input_dims",
    "concretize",
    "dim_sizes",
    "from_proto",
    "import_model",
    "load_model",
    "model_bytes",
    "move_model",
    "op_census",
    "opset_of",
    "int_attrs",
    "opaque_reasons",
    "read_model_proto",
    "read_proto",
    "reinfer",
    "save_model",
    "to_proto",
    "write_proto",
]
