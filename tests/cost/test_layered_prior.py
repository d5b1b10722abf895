"""The layered prior: a device's own table first, then the units only its provider's other tables hold, scaled
onto it by the ratio fitted on the units both hold; never a table of another provider, nor one timed otherwise."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from taso.cost import profiler
from taso.cost.calibration import Scales
from taso.cost.tables import FIT_LEAST, PRIORS, prior_for, read_table
from taso.errors import BadInput

CALIBRATION = {"gbps": 4000.0, "gflops": 900e3, "kernel_ms": 0.005, "run_ms": 0.05}
SHARED = {f"shared{i}": 0.01 * (i + 1) for i in range(FIT_LEAST + 5)}
"""Units two toy tables both hold, enough to fit a scale between them."""


def write_table(
    path: Path, device: profiler.Device, costs: dict[str, float], labels: dict[str, str] | None = None
) -> Path:
    table = {"device": device.__dict__, "calibration": CALIBRATION, "costs": costs}
    path.write_text(json.dumps(table | ({"labels": labels} if labels else {})))
    return path


def test_a_table_of_another_device_is_scaled_by_the_ratio_fitted_on_the_units_both_hold(
    tmp_path: Path, cpu: profiler.Device
) -> None:
    """The other table is 2x slower overall and 3x on Conv: its own units come at half their cost, its Convs
    at a third."""
    convs = {f"conv{i}": 0.02 for i in range(FIT_LEAST)}
    own = write_table(tmp_path / "own.json", cpu, SHARED | convs)
    rest = {k: 2 * ms for k, ms in SHARED.items()} | {k: 3 * ms for k, ms in convs.items()} | {"only": 0.6}
    other = write_table(
        tmp_path / "other.json", replace(cpu, name="a slower CPU"), rest, {k: "Conv+Relu" for k in convs}
    )
    prior = prior_for(cpu, tables=[own, other])
    assert prior is not None and prior.scaled_from is None and len(prior.layers) == 1
    scales = prior.layers[0].scales
    assert scales.overall == pytest.approx(0.5) and scales.of("Conv") == pytest.approx(1 / 3)
    assert scales.references == len(SHARED) + len(convs)
    assert prior.cost("only", "Add") == (pytest.approx(0.3), str(other))
    assert prior.cost("only", "Conv") == (pytest.approx(0.2), str(other))
    assert prior.cost("nowhere", "Add") is None


def test_own_units_win_over_scaled_ones_and_an_own_table_wins_over_a_larger_one(
    tmp_path: Path, cpu: profiler.Device
) -> None:
    own = write_table(tmp_path / "own.json", cpu, SHARED | {"both": 1.0})
    larger = {k: 2 * ms for k, ms in SHARED.items()} | {"both": 7.0} | {f"more{i}": 1.0 for i in range(100)}
    other = write_table(tmp_path / "other.json", replace(cpu, name="a slower CPU"), larger)
    prior = prior_for(cpu, tables=[other, own])  # the larger table listed first
    assert prior is not None and prior.source == str(own) and prior.scaled_from is None
    assert prior.cost("both", "Add") == (1.0, str(own))  # not 7.0 scaled to 3.5
    assert prior.cost("more3", "Add") == (pytest.approx(0.5), str(other))


def test_a_prior_never_mixes_providers_or_modes(tmp_path: Path, cpu: profiler.Device) -> None:
    own = write_table(tmp_path / "own.json", cpu, SHARED)
    gpu = replace(cpu, provider=profiler.CUDA, name="NVIDIA H200")
    cuda = write_table(tmp_path / "cuda.json", gpu, {k: 0.1 * ms for k, ms in SHARED.items()} | {"gpu only": 1.0})
    on_cpu = prior_for(cpu, tables=[own, cuda])
    assert on_cpu is not None and on_cpu.layers == () and on_cpu.cost("gpu only", "Add") is None
    on_gpu = prior_for(replace(gpu, name="NVIDIA A100"), tables=[own, cuda])
    assert on_gpu is not None and on_gpu.source == str(cuda) and on_gpu.layers == ()
    assert prior_for(cpu, profiler.Mode(cuda_graph=True), tables=[own, cuda]) is None


def test_a_table_sharing_too_few_units_is_no_layer(tmp_path: Path, cpu: profiler.Device) -> None:
    few = dict(list(SHARED.items())[: FIT_LEAST - 1])
    own = write_table(tmp_path / "own.json", cpu, few)
    other = write_table(tmp_path / "other.json", replace(cpu, name="a slower CPU"), few | {"only": 1.0})
    prior = prior_for(cpu, tables=[own, other])
    assert prior is not None and prior.layers == ()
    assert Scales.fit([("Add", 1.0, 2.0)] * 3, least=3) is not None and Scales.fit([("Add", 1.0, 2.0)] * 2, 3) is None


def test_a_tables_labels_must_be_text(tmp_path: Path, cpu: profiler.Device) -> None:
    path = write_table(tmp_path / "t.json", cpu, {"u": 1.0}, {"u": 3})  # type: ignore[dict-item]
    with pytest.raises(BadInput, match="labels map unit keys to text"):
        read_table(str(path))


def test_the_shipped_tables_layer_on_an_h200_and_on_an_h100() -> None:
    """On an H200 its own table comes first and the H100's fills in, scaled by their shared units' ratio; on an
    H100 the reverse."""
    h100, h200 = (read_table(str(p)) for p in PRIORS)
    on_h200 = prior_for(profiler.Device(**h200.device.__dict__))
    assert on_h200 is not None and on_h200.source == str(PRIORS[1]) and on_h200.scaled_from is None
    (layer,) = on_h200.layers
    assert layer.source == str(PRIORS[0]) and layer.scales.references >= 500 and 0.8 < layer.scales.overall < 1.25
    assert {"Conv", "MatMul", "Concat"} <= set(layer.scales.by_class)  # the H200's table labels its corpus units
    on_h100 = prior_for(profiler.Device(**h100.device.__dict__))
    assert on_h100 is not None and on_h100.source == str(PRIORS[0]) and on_h100.layers[0].source == str(PRIORS[1])
