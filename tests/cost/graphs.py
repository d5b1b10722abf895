"""Graphs the cost tests share."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from taso.ir import Graph, WeightData, parse_graph

CONV_CHAIN = """graph(%x: float32[1,4,8,8], %w: float32[8,4,3,3] weight, %s: float32[8] weight, %b: float32[8] weight,
      %m: float32[8] weight, %v: float32[8] weight, %w2: float32[8,8,1,1] weight):
  %c = Conv(%x, %w) {dilations=[1,1], group=1, kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} : float32[1,8,8,8]
  %n = BatchNormalization(%c, %s, %b, %m, %v) {epsilon=0.001} : float32[1,8,8,8]
  %r = Relu(%n) : float32[1,8,8,8]
  %c2 = Conv(%r, %w2) {dilations=[1,1], group=1, kernel_shape=[1,1], pads=[0,0,0,0], strides=[1,1]} : float32[1,8,8,8]
  %a = Add(%c2, %r) : float32[1,8,8,8]
  %y = Relu(%a) : float32[1,8,8,8]
  return %y"""


def with_weights(text: str, seed: int = 0) -> Graph:
    """The graph ``text`` with its weights drawn uniformly in [0.5, 1.5)."""
    g = parse_graph(text)
    rng = np.random.default_rng(seed)
    data = {w: rng.uniform(0.5, 1.5, g.types[w].shape).astype(np.float32) for w in g.weights}
    return replace(g, data={k: WeightData(v) for k, v in data.items()})


GELU = """graph(%x: float32[4,64], %a: float32[] = 0.044715, %one: float32[] = 1.0, %k: float32[] = 0.7978845834732056,
      %half: float32[] = 0.5):
  %m1 = Mul(%x, %a) : float32[4,64]
  %m2 = Mul(%m1, %x) : float32[4,64]
  %a1 = Add(%m2, %one) : float32[4,64]
  %m4 = Mul(%x, %k) : float32[4,64]
  %m3 = Mul(%a1, %m4) : float32[4,64]
  %t = Tanh(%m3) : float32[4,64]
  %a2 = Add(%t, %one) : float32[4,64]
  %m6 = Mul(%x, %half) : float32[4,64]
  %y = Mul(%m6, %a2) : float32[4,64]
  return %y"""


SMALL_THEN_LARGE = """graph(%x: float32[1,256], %w: float32[256,4096] weight):
  %r = Relu(%x) : float32[1,256]
  %y = MatMul(%r, %w) : float32[1,4096]
  return %y"""
"""A tiny unit first in graph order, then one whose weights alone are 4 MiB."""


def with_normal_weights(text: str = SMALL_THEN_LARGE) -> Graph:
    """The graph ``text`` with standard normal weights."""
    g = parse_graph(text)
    rng = np.random.default_rng(0)
    return replace(g, data={w: WeightData(rng.standard_normal(g.types[w].shape).astype(np.float32)) for w in g.weights})
