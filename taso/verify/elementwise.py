"""The axioms every element-wise function satisfies, made once for all the specs that need them.

An element-wise function (sigmoid, tanh, clip, ...) moves through a transpose, a concat and a slice, since
those only move elements and it maps each element alone. Each unary spec used to write these three axioms out;
`elementwise_axioms` makes them with the names ``NAME-transpose``, ``NAME-cat`` and ``NAME-slice`` and the
very variables those specs used, so their z3 terms, and the digests of the proofs that rest on them, stay as
they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import z3

from taso.verify.spec import Axiom, IntExpr, Symbol, ints, tensors


def elementwise_axioms(
    f: SimpleNamespace,
    g: Symbol,
    attrs: Mapping[str, IntExpr] | None = None,
    domains: Mapping[str, tuple[int, ...]] | None = None,
) -> list[Axiom]:
    """``g`` (at the attributes ``attrs``, whose spec-check values are ``domains``) through a transpose, a
    concat and a slice of 2-D tensors; the slice one is oriented, so slices move toward the inputs only."""
    at, dom = dict(attrs or {}), dict(domains or {})
    x, y = tensors("x y")
    m, n, a, s, k = ints("m n a s k")
    shapes = {"x": (m, n), "y": (m, n)}

    def h(t: z3.ExprRef) -> z3.ExprRef:
        return g(t, **at)

    return [
        Axiom(f"{g.name}-transpose", h(f.tr(x)), f.tr(h(x)), shapes, domains=dom, generic=True),
        Axiom(
            f"{g.name}-cat",
            h(f.cat(x, y, axis=a)),
            f.cat(h(x), h(y), axis=a),
            shapes,
            domains={"a": (0, 1), **dom},
            generic=True,
        ),
        Axiom(
            f"{g.name}-slice",
            h(f.slice(x, axis=a, start=s, size=k)),
            f.slice(h(x), axis=a, start=s, size=k),
            shapes,
            domains={"a": (0, 1), "s": (0, 1), "k": (1, 2), **dom},
            generic=True,
            oriented=True,
        ),
    ]
