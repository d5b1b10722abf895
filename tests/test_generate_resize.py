"""A candidate is tried at grown sizes before it is stored: one that holds only at its example's sizes (a mean
over a size-2 axis passed for half a sum) is dropped and counted; true ones are stored, among them those
whose constants are sizes or positions (a Slice at a seam, a Gather's permutation, a convolution), which must
not be dropped by sizes their constants were not made for."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import subst

from taso.generate import Settings, generate, resize
from taso.generate.fingerprint import fingerprint
from taso.generate.forms import InputClass
from taso.generate.storing import save_rules
from taso.ir import parse_graph
from taso.rules import Rule, store


def rule(src: str, dst: str) -> Rule:
    return Rule(parse_graph(src), parse_graph(dst))


# A mean over the size-2 axis equals half the sum there, and only there (the half is a constant, no size).
HALF_SUM = rule(
    """graph(%x0: float32[2,4], %half: float32[] = 0.5):
  %t0 = ReduceSum(%x0) {axes=[0], keepdims=1} : float32[1,4]
  %t1 = Mul(%t0, %half) : float32[1,4]
  return %t1""",
    """graph(%x0: float32[2,4]):
  %t0 = ReduceMean(%x0) {axes=[0], keepdims=1} : float32[1,4]
  return %t0""",
)

# A mean over an axis of size 1 is the sum over it; growing the 1 tells them apart.
MEAN_OF_ONE = rule(
    """graph(%r0: float32[1,3]):
  %t0 = ReduceMean(%r0) {axes=[0], keepdims=1} : float32[1,3]
  return %t0""",
    """graph(%r0: float32[1,3]):
  %t0 = ReduceSum(%r0) {axes=[0], keepdims=1} : float32[1,3]
  return %t0""",
)

# A mean is linear: true at every size.
MEAN_LINEAR = rule(
    """graph(%x0: float32[2,4], %x1: float32[2,4]):
  %t0 = Add(%x0, %x1) : float32[2,4]
  %t1 = ReduceMean(%t0) {axes=[0], keepdims=1} : float32[1,4]
  return %t1""",
    """graph(%x0: float32[2,4], %x1: float32[2,4]):
  %t0 = ReduceMean(%x0) {axes=[0], keepdims=1} : float32[1,4]
  %t1 = ReduceMean(%x1) {axes=[0], keepdims=1} : float32[1,4]
  %t2 = Add(%t0, %t1) : float32[1,4]
  return %t2""",
)

# A row broadcast over a matrix: its 1 cannot grow, the rest can.
ROW_ADD = rule(
    """graph(%x0: float32[2,3], %r0: float32[1,3]):
  %t0 = Add(%x0, %r0) : float32[2,3]
  %t1 = Relu(%t0) : float32[2,3]
  return %t1""",
    """graph(%x0: float32[2,3], %r0: float32[1,3]):
  %t0 = Add(%r0, %x0) : float32[2,3]
  %t1 = Relu(%t0) : float32[2,3]
  return %t1""",
)

# Transposing a [1, 3] row moves no element: true while its 1 stays 1 (grown, the sides' shapes part).
UNSQUEEZE = rule(
    """graph(%r0: float32[1,3]):
  %t0 = Transpose(%r0) {perm=[1, 0]} : float32[3,1]
  %t1 = Unsqueeze(%t0) {axes=[0]} : float32[1,3,1]
  return %t1""",
    """graph(%r0: float32[1,3]):
  %t0 = Unsqueeze(%r0) {axes=[2]} : float32[1,3,1]
  return %t0""",
)

# The columns of x1 out of a concat, by two Slices at seams (proved in the shipped store).
SEAMS = rule(
    """graph(%x0: float32[2,4], %x1: float32[2,4]):
  %t0 = Slice(%x0) {axes=[1], ends=[2], starts=[0], steps=[1]} : float32[2,2]
  %t1 = Concat(%t0, %x1) {axis=1} : float32[2,6]
  %t2 = Slice(%t1) {axes=[1], ends=[6], starts=[2], steps=[1]} : float32[2,4]
  return %t2""",
    """graph(%x0: float32[2,4], %x1: float32[2,4]):
  %t0 = Concat(%x0, %x1) {axis=1} : float32[2,8]
  %t1 = Slice(%t0) {axes=[1], ends=[8], starts=[4], steps=[1]} : float32[2,4]
  return %t1""",
)

# Gather's [1, 0] permutes all rows of a 2-row matrix, which a Gram matrix ignores (proved in the shipped store).
GATHER = rule(
    """graph(%x0: float32[2,4]):
  %t0 = Gather(%x0) {axis=0, indices=[1, 0]} : float32[2,4]
  %t1 = Transpose(%t0) {perm=[1, 0]} : float32[4,2]
  %t2 = MatMul(%t1, %t0) : float32[4,4]
  return %t2""",
    """graph(%x0: float32[2,4]):
  %t0 = Transpose(%x0) {perm=[1, 0]} : float32[4,2]
  %t1 = MatMul(%t0, %x0) : float32[4,4]
  return %t1""",
)

# Strides swapped between two convolutions by an enlarged 1x1 kernel, at the example's image sizes (proved).
CONVS = rule(
    """graph(%X0: float32[2,4,5,5], %Kp0: float32[4,4,1,1] weight):
  %t0 = Enlarge(%Kp0) {kernel_shape=[3, 3]} : float32[4,4,3,3]
  %t1 = Conv(%X0, %t0) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[0, 0, 0, 0], strides=[2, 2]} \
: float32[2,4,2,2]
  %t2 = Conv(%t1, %t0) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]} \
: float32[2,4,2,2]
  return %t2""",
    """graph(%X0: float32[2,4,5,5], %Kp0: float32[4,4,1,1] weight):
  %t0 = Enlarge(%Kp0) {kernel_shape=[3, 3]} : float32[4,4,3,3]
  %t1 = Conv(%X0, %t0) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[0, 0, 0, 0], strides=[1, 1]} \
: float32[2,4,3,3]
  %t2 = Conv(%t1, %t0) {dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]} \
: float32[2,4,2,2]
  return %t2""",
)


def test_a_pair_true_only_at_its_sizes_differs_when_grown() -> None:
    for r in (HALF_SUM, MEAN_OF_ONE):
        assert fingerprint(r.src) == fingerprint(r.dst)  # the one check it had passes it
        assert resize.check(r) is resize.Verdict.DIFFERS


def test_true_pairs_hold_when_grown() -> None:
    for r in (MEAN_LINEAR, ROW_ADD, UNSQUEEZE, SEAMS):
        assert fingerprint(r.src) == fingerprint(r.dst)
        assert resize.check(r) is resize.Verdict.HOLDS


def test_a_row_keeps_its_one_and_a_seam_moves_with_the_sizes() -> None:
    assert resize.grown(ROW_ADD.src, keep_ones=False) is None  # [6, 9] + [3, 9] does not broadcast
    g = resize.grown(ROW_ADD.src, keep_ones=True)
    assert g is not None and g.types["r0"].shape == (1, 9) and g.types["t1"].shape == (6, 9)
    s = resize.grown(SEAMS.dst, keep_ones=False)
    assert s is not None and s.nodes[1].attr["starts"] == (12,) and s.types["t1"].shape == (6, 12)


def test_rules_whose_constants_fix_their_sizes_are_not_resized() -> None:
    for r in (GATHER, CONVS):
        assert fingerprint(r.src) == fingerprint(r.dst)
        assert resize.check(r) is resize.Verdict.FIXED


def test_save_drops_the_size_dependent_pairs_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    rules = [(fingerprint(r.src), r) for r in (HALF_SUM, MEAN_LINEAR, MEAN_OF_ONE, GATHER)]
    saved = save_rules(rules, {"tool": "test"}, path)
    assert saved == (2, 0, 2, 1)
    stored = {(str(r.src), str(r.dst)) for r in store.load_rules(store.open_store(path))}
    assert stored == {(str(MEAN_LINEAR.src), str(MEAN_LINEAR.dst)), (str(GATHER.src), str(GATHER.dst))}


def test_generate_drops_the_pairs_grown_sizes_drop_before_the_fold(tmp_path: Path) -> None:
    """Over [2, 4]: a mean of a doubled matrix along its 2 rows and its sum are one fingerprint, twice
    (ReduceMean(Add(x0, x0)) and Add(ReduceMean(x0), ReduceMean(x0)) against ReduceSum(x0)); neither is stored.
    Through them the fold would derive the true ReduceSum(Add(x0, x0)) => Add(ReduceSum(x0), ReduceSum(x0)) and
    drop it, were they dropped only after it: it is stored."""
    config = tmp_path / "c.toml"
    config.write_text(
        'max_ops = 2\nops = ["reducesum0", "reducemean0", "add"]\n'
        'inputs = [{prefix = "x", shape = [2, 4], kind = "activation", count = 1}]\n'
    )
    db = tmp_path / "s.db"
    r = subst("generate", "--config", config, "--store", db, "--workers", "1", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["rules"], d["size_dependent"], d["added"]) == (1, 2, 1)
    (kept,) = store.load_rules(store.open_store(db))
    assert kept.title == "ReduceSum(Add(x0, x0)) => Add(ReduceSum(x0), ReduceSum(x0))"
    assert resize.check(kept) is resize.Verdict.HOLDS


def test_not_resized_counts_the_rules_kept_after_the_fold() -> None:
    """The screen runs before the fold, on pairs the fold may then drop: a run counts as stored on the one check
    only those of its rules the fold kept. Here Gather's row swap cannot be resized: 8 pairs of it before the
    fold, 5 after."""
    s = Settings(3, ("gather0_swap", "relu", "add"), (InputClass("x", (2, 4), "activation", 2),))
    result = generate(s, workers=1)
    assert result.pruned["derivable from smaller kept rules (one rewrite from each side)"] > 0
    fixed = [r for _, r in result.rules if resize.check(r) is resize.Verdict.FIXED]
    assert result.not_resized == len(fixed) > 0
