"""What onnxruntime fuses, as units see it: epilogues join their head op, views join the unit they view."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from taso.cost.unit import unit_graph, units
from taso.ir import WeightData

from .graphs import CONV_CHAIN, with_weights


def test_units_fuse_what_onnxruntime_fuses() -> None:
    g = with_weights(CONV_CHAIN)
    labels = [u.label for u in units(g)]
    # Conv+BN+Relu fold into one kernel; the residual Add and its Relu join the second conv (ORT's FusedConv).
    assert labels == ["Conv+BatchNormalization+Relu", "Conv+Add+Relu"]


def test_non_epilogue_ops_start_their_own_unit() -> None:
    g = with_weights(
        """graph(%x: float32[4,4], %w: float32[4,4] weight, %b: float32[4] weight):
          %m = MatMul(%x, %w) : float32[4,4]
          %a = Add(%m, %b) : float32[4,4]
          %t = Tanh(%m) : float32[4,4]
          %s = Transpose(%a) {perm=[1,0]} : float32[4,4]
          %y = MatMul(%s, %w) : float32[4,4]
          %z = Add(%y, %t) : float32[4,4]
          %p = Softmax(%z) {axis=-1} : float32[4,4]
          return %p"""
    )
    # both consumers of %m are epilogues of the first MatMul; Transpose is not; the last Add joins the latest
    # head, and the Softmax after it too (onnxruntime's BiasSoftmax)
    assert [u.label for u in units(g)] == ["MatMul+Add+Tanh", "Transpose", "MatMul+Add+Softmax"]


def test_view_ops_join_the_unit_of_what_they_view() -> None:
    g = with_weights(
        """graph(%x: float32[2,8], %w: float32[8,8] weight, %shape: int64[3] weight):
          %v = Reshape(%x, %shape) : float32[2,2,4]
          %m = MatMul(%x, %w) : float32[2,8]
          %r = Reshape(%m, %shape) : float32[2,2,4]
          %t = Transpose(%r) {perm=[0,2,1]} : float32[2,4,2]
          %f = Flatten(%t) {axis=1} : float32[2,8]
          return %v, %f"""
    )
    g = replace(g, data={**g.data, "shape": WeightData(np.array([2, 2, 4], np.int64))})
    # a view of a graph input has no unit to join; the views of the MatMul's and the Transpose's outputs
    # run as no kernel of their own
    assert [u.label for u in units(g)] == ["Reshape", "MatMul+Reshape", "Transpose+Flatten"]
    # and are not timed: the views a unit ends with leave it, a view other ops of the unit read stays
    timed = [[n.op for n in unit_graph(g, u).nodes] for u in units(g)]
    assert timed == [["Reshape"], ["MatMul"], ["Transpose"]]
    assert unit_graph(g, units(g)[1]).outputs == ("m",)


def test_a_view_read_inside_its_unit_is_timed() -> None:
    g = with_weights(
        """graph(%x: float32[2,8], %w: float32[8,8] weight, %shape: int64[3] weight, %b: float32[4] weight):
          %m = MatMul(%x, %w) : float32[2,8]
          %r = Reshape(%m, %shape) : float32[2,2,4]
          %a = Add(%r, %b) : float32[2,2,4]
          %s = Squeeze(%a) : float32[2,2,4]
          return %s"""
    )
    g = replace(g, data={**g.data, "shape": WeightData(np.array([2, 2, 4], np.int64))})
    (unit,) = units(g)
    assert unit.label == "MatMul+Reshape+Add+Squeeze"
    assert [n.op for n in unit_graph(g, unit).nodes] == ["MatMul", "Reshape", "Add"]
