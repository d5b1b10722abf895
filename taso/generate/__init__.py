"""Enumerate every small graph over an op set and an input pool, and pair those that compute the same thing.

Graphs grow one op at a time, level by level (TASO's generator, pruned the way Quartz prunes circuits):

- *Fingerprint classes.* Every graph is fingerprinted incrementally (`taso.fingerprint`: each new op is
  evaluated once, over Z_p, on top of its parent's values; enumeration uses the first of the two evaluations
  and every pair is confirmed with both). A worker evaluates one op form over all the children in its chunk
  that apply it to arguments of the same signatures in one numpy call (`_field_batch`). Graphs of equal fingerprint form a class; only the class's cheapest
  member, its *representative*, is extended into larger graphs. A larger graph built on a non-representative
  is implied by the rule (member -> representative) plus the larger graph built on the representative.
- *Canonical input order.* Inputs of one pool class (same shape and kind) are interchangeable, so a graph must
  use them in order of first use (``x0`` before ``x1``): graphs equal up to renaming inputs are built once.
- *Canonical node order.* A new op must be the largest removable sink (by its structure, names aside), so one
  DAG is not built once per topological order; commutative ops take their arguments in a fixed order; an op
  applied twice to the same arguments is never built, nor two forms that give the same node.
- *Columns, not objects.* A level's graphs are fixed-width rows (parent, form, up to three arguments) with
  their fingerprints, spooled to disk in 256 buckets by fingerprint (`spool`); classes and their members are
  numpy records filed one run of buckets at a time by sorting (`columns`); a graph's nodes are rebuilt from its
  chain of rows (row -> its parent in the previous level's frontier -> ...) only where a worker needs them. An
  interrupted run resumes after its last completed level (``--resume``).
- *Last level.* Graphs of the largest size are never extended, so only those whose fingerprint is seen twice,
  or was seen at a smaller size, are looked at again: the structure hash and cost that rank a class's members
  are worked out only for the graphs kept.
- *Pairs.* Each non-representative member gives a candidate (member, representative). A pair is dropped when
  both sides end in the same op on equal arguments (implied by the smaller pair, by congruence); when both
  share a common subgraph that a fresh input can stand for and the pair still holds (implied by the smaller
  rule over that input; rules are read as schemas over shapes of the same rank); when it is a special case
  of the pair with one input's uses split over two inputs; or when it repeats a pair up to renaming inputs.
  Before the last step, each pair is fingerprinted again with its sizes grown (`resize`) and dropped if its
  sides differ there (a mean over a size-2 axis passed for half a sum): a fingerprint is exact at the
  example's sizes only. Last, `taso.fold` drops rules that strictly smaller kept rules derive in one rewrite
  from each side: only through pairs that hold grown. A target run's rules are screened so as they are stored
  (`storing`).

Derivability of every dropped pair from the kept rules is checked by tests/test_generate.py on small settings.
The pool's tensors and the op forms are data (`Settings`); graph outputs are the values no op consumes.

The modules, in the order a run goes through them: `forms` (op forms, input pool, `Settings`), `config` (settings
from flags and files), `evaluate` (a graph's values), `extend` (children and their fingerprints), `driver` (the
levels), `spool` (the levels on disk), `columns` (classes by sorting), `pairs` (judging and pruning pairs,
rules), `resize` (the rules at grown sizes), `storing` (into a store); the parallel work runs on an `executor`
(local processes, or Ray: `ray_executor`). Patterns beyond exhaustive sizes (LayerNorm's 9 ops) are generated
toward one target op instead (`target`, with `targets` and `abstract`: ``subst generate --target OP``).
"""

from __future__ import annotations

from taso.generate.config import load_config, parse_ops, settings_from
from taso.generate.driver import Progress, Result, generate
from taso.generate.evaluate import _build, _Context
from taso.generate.executor import Executor, Inputs, LocalExecutor
from taso.generate.extend import _field_batch
from taso.generate.fingerprint import field_apply, field_eval, input_values, random_field_inputs
from taso.generate.forms import (
    BIAS_FORMS,
    BIASES,
    FORMS,
    MIN_IMAGE,
    TASO_FORMS,
    TASO_POOL,
    Form,
    InputClass,
    Settings,
    _cut,
    static_data,
)
from taso.generate.storing import provenance, save

__all__ = [
    "BIASES",
    "BIAS_FORMS",
    "Executor",
    "FORMS",
    "Form",
    "Inputs",
    "InputClass",
    "LocalExecutor",
    "MIN_IMAGE",
    "Progress",
    "Result",
    "Settings",
    "TASO_FORMS",
    "TASO_POOL",
    "field_apply",
    "field_eval",
    "generate",
    "input_values",
    "load_config",
    "parse_ops",
    "provenance",
    "random_field_inputs",
    "save",
    "settings_from",
    "static_data",
    "_Context",
    "_build",
    "_cut",
    "_field_batch",
]
