"""ONNX I/O: the only package that knows protobuf; models in and out of the IR."""

from taso.onnx.io import ModelProto

__all__ = [
    "ModelProto",
]
