"""The analytic fallback: estimates grow with the work, and a model that may not measure estimates every unit."""

from __future__ import annotations

from taso.cost.calibration import Calibration
from taso.cost.estimate import flops, traffic
from taso.cost.model import CostModel
from taso.cost.unit import units

from .graphs import CONV_CHAIN, with_weights


def test_analytic_estimate_grows_with_work(calibration: Calibration) -> None:
    def mm(n: int):
        return with_weights(
            f"graph(%x: float32[{n},{n}], %w: float32[{n},{n}] weight):\n  %y = MatMul(%x, %w) : float32[{n},{n}]\n  return %y"
        )

    small, large = mm(16), mm(256)
    assert flops(large) == 2 * 256**3 and traffic(large) == 3 * 256 * 256 * 4
    assert calibration.estimate(large) > calibration.estimate(small) > 0


def test_estimates_without_measuring(cpu, calibration) -> None:
    g = with_weights(CONV_CHAIN)
    model = CostModel(cpu, None, measure=False, calibration=calibration)
    c = model.graph_cost(g)
    assert model.measured == 0 and c.estimated == len(units(g)) and c.total_ms > calibration.run_ms


def test_attention_is_estimated_by_its_two_products() -> None:
    """MultiHeadAttention's arithmetic is Q K^T and the product with V (4 * B*S*N*H * L), not one op per output
    element: an estimated unit must not make it look free beside the MatMuls it replaces."""
    g = with_weights(
        """graph(%q: float32[2,16,64], %k: float32[2,4,32,16], %v: float32[2,4,32,16]):
  %y = MultiHeadAttention(%q, %k, %v) {num_heads=0, scale=0.25} : float32[2,16,64]
  return %y"""
    )
    assert flops(g) == 4 * (2 * 16 * 64) * 32
