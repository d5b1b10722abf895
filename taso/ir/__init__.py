"""The IR: one immutable, hashable graph that prints and parses itself; every stage reads and writes it.

A `Graph` is a topologically ordered tuple of `Node`s that name the values they read and write (ONNX-style
single assignment), plus the types of those values, the graph's activation inputs, its weights (initializers)
and the model-level facts the exporter needs to write the model back unchanged. A changed copy is cheap:
`dataclasses.replace` makes one that shares the nodes and weight arrays of the graph it came from.

- `types`: what a value and an attribute may be (`TensorType`, `Kind`, `make_attrs`)
- `weights`: weight data, read-only and hashed once (`WeightData`)
- `graph`: `Node`, `Graph`, and checking, ordering, extracting, dead-code elimination
- `text`: the text form, `format_graph` and its inverse `parse_graph`
"""

from taso.ir.graph import (
    Graph,
    IRError,
    ModelMeta,
    Node,
    correspondence,
    eliminate_dead,
    extract,
    find_cycle,
    fresh_names,
    lint,
    topological_order,
)
from taso.ir.text import format_graph, parse_graph
from taso.ir.types import AttrValue, Dim, Kind, TensorType, all_static, canonical_attr, make_attrs
from taso.ir.weights import WeightData

__all__ = [
    "AttrValue",
    "Dim",
    "Graph",
    "IRError",
    "Kind",
    "ModelMeta",
    "Node",
    "TensorType",
    "WeightData",
    "all_static",
    "canonical_attr",
    "correspondence",
    "eliminate_dead",
    "extract",
    "format_graph",
    "fresh_names",
    "lint",
    "make_attrs",
    "parse_graph",
    "find_cycle",
    "topological_order",
]
