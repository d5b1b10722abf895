"""The catalogue as a whole (taso/ops/opdef.py and the family modules that register into it): every op fully
described, in one family module, with a spec or a reason for none, and seen by every stage through its traits."""

from __future__ import annotations

import pytest

from taso import cost, generate, ops
from taso.rules import SPECS_DIR
from taso.verify import load_specs, precheck

from .cases import ALL_CASES, CASES, FOLDS, family

FAMILIES = (
    ops.elementwise,
    ops.products,
    ops.pooling,
    ops.layout,
    ops.normalisation,
    ops.generators,
    ops.reductions,
    ops.powers,
    ops.views,
    ops.select,
    ops.fused,
    ops.attention,
)


def test_every_op_is_fully_described_and_tested() -> None:
    assert set(CASES) | FOLDS == set(ops.OPS), "add a case to tests/ops/cases.py for every catalogue op"
    assert not any(ops.get(op).exportable for op in FOLDS)
    for name, d in ops.OPS.items():
        assert d.doc and d.infer and d.compute, name
        assert d.arity[0] <= d.arity[1]


def test_each_op_is_registered_by_one_family_module_in_the_catalogues_order() -> None:
    """The family modules, imported in turn, register the catalogue: each op in one of them, and the catalogue's
    order (which generation enumerates) is theirs, one after the other."""
    assert [op for module in FAMILIES for op in family(module)] == list(ops.OPS)


def test_an_unknown_op_is_refused_by_name() -> None:
    with pytest.raises(ops.OpError, match="unknown operator"):
        ops.get("Frobnicate")


def test_every_op_has_a_spec_or_a_reasoned_opt_out_and_every_stage_sees_it() -> None:
    """The catalogue entry is the one place an op is described: it is modelled by a spec under specs/ or says
    why not (never both), and the generator, the pre-check, the lifting and the cost model read its traits."""
    specs = load_specs(SPECS_DIR)
    assert set(ALL_CASES) == set(ops.OPS)
    for name, op in ops.OPS.items():
        specified = name in specs.by_op or name in specs.lowerings
        assert specified != bool(op.no_spec), f"{name}: a spec under specs/ or a no_spec reason, not both"
        views = {
            "generated": any(f.op == name for f in generate.FORMS.values()),
            "field-exact": name in precheck.FIELD_EXACT,
            "lifted": name in ops.having(ops.BATCH_POLYMORPHIC),
            "epilogue": name in cost.ELEMENTWISE,
            "head": name in cost.EPILOGUES,
            "view": name in cost.VIEWS,
        }
        if op.elementwise and op.arity == (1, 1):
            assert views["generated"] and name.lower() in generate.FORMS, name
        if views["generated"] and not op.tags & {ops.TASO}:
            assert not any(generate.FORMS[f].op == name for f in generate.TASO_FORMS), name
        assert views["head"] == bool(op.fuses), name
        assert all(f.op in ops.OPS for f in generate.FORMS.values())
    assert not set(ops.ONNX_OPS) & set(ops.OPS), "a modelled op keeps its facts on its catalogue entry"
