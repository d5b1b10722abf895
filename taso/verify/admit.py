"""Rule text read as import reads a model: every node through the catalogue, or the rule is refused.

Hand-written rule text (`subst rules add`) and a store's rows reach the verifier and the rewriter without the
checks `taso.onnx` gives every imported node. Here each node is normalised by its catalogue entry (defaults
filled in, ``normalize`` applied: a BatchNormalization in training mode refused), its attributes must be ones
the catalogue models, and its declared output types must be what the catalogue's shape rule computes from its
inputs. A rule that fails names the node and why in one line (`Unsupported`); one that passes comes back in
normal form, which is what the matcher compares nodes of a model in. `subst rules add` also asks that the specs
lower it (`admissible`); the verifier refuses a row that is not in normal form.
"""

from __future__ import annotations

from dataclasses import replace

from taso import ops
from taso.ir import Graph, IRError, make_attrs
from taso.rules import Rule
from taso.verify.lowering import lower_rule
from taso.verify.spec import Specs, Unsupported

OPSET = 99
"""Rule text has no opset: it is read at the newest, as the catalogue describes each op."""


def normalised(rule: Rule) -> Rule:
    """``rule`` with every node in the catalogue's normal form; refuses (`Unsupported`) text import would not
    take."""
    free = rule.free_attrs - {k for n in rule.src.nodes for k in n.attr}
    if free:
        raise Unsupported(f"free attribute(s) {', '.join(sorted(free))} on no source node")
    try:
        return Rule(_graph(rule.src, "source"), _graph(rule.dst, "target"), rule.name, rule.conditions)
    except IRError as e:
        raise Unsupported(str(e)) from None


def _graph(g: Graph, side: str) -> Graph:
    nodes = []
    for n in g.nodes:
        where = f"{side} {n.op} {'/'.join(n.outputs)}"
        d = ops.OPS.get(n.op)
        if d is None:
            raise Unsupported(f"{where}: {n.op} is not in the catalogue")
        types = [g.types.get(v) for v in n.inputs]
        if any(t is None or not t.is_static for t in types):
            raise Unsupported(f"{where}: an input has no static type")
        attrs = d.from_onnx(n.attr, types, len(n.inputs), OPSET)
        if isinstance(attrs, str):
            raise Unsupported(f"{where}: {attrs}")
        consts = [g.data[v].array if v in g.data and k in d.static_inputs else None for k, v in enumerate(n.inputs)]
        try:
            inferred = ops.infer(n.op, types, attrs, consts, len(n.outputs))  # type: ignore[arg-type]
        except (ops.OpError, KeyError, TypeError, ValueError) as e:
            raise Unsupported(f"{where}: the catalogue refuses it ({e})") from None
        declared = tuple(g.types.get(o) for o in n.outputs)
        if declared != tuple(inferred):
            said = ", ".join(map(str, declared))
            raise Unsupported(f"{where}: declared {said}, the catalogue computes {', '.join(map(str, inferred))}")
        nodes.append(replace(n, attrs=make_attrs(attrs)))
    return replace(g, nodes=tuple(nodes))


def admissible(rule: Rule, specs: Specs) -> Rule:
    """``rule`` in normal form (`normalised`), refused (`Unsupported`) unless the specs lower every node of it
    as written (a free Concat axis is a variable no lowering can place). A rule over an op no spec models is
    admitted: the verifier leaves it unknown and says which spec is missing."""
    norm = normalised(rule)
    if all(op in specs.by_op or op in specs.lowerings for op in norm.ops):
        lower_rule(norm, specs)
    return norm
