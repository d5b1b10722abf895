"""The profiler: picking a device, timing side by side within a budget, slow spells taken again, round order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taso.cost import profiler
from taso.errors import BadInput


def test_device_choice(cpu) -> None:
    assert profiler.pick_device("auto").provider in (profiler.CPU, profiler.CUDA)
    assert cpu.provider == profiler.CPU and "ort-" in cpu.key
    if not profiler.cuda_works():
        with pytest.raises(BadInput, match="CUDA provider is not available"):
            profiler.pick_device("cuda")
    with pytest.raises(BadInput, match="unknown device"):
        profiler.pick_device("tpu")


def test_a_measurement_in_a_slow_spell_is_taken_again(cpu: profiler.Device) -> None:
    model, feeds = profiler._reference()
    quick = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=5)[0]
    assert quick.reference_ms is not None and quick.reference_ms > 0 and len(quick.values) == 5
    profiler._quickest[cpu.key] = quick.reference_ms / 100  # as if the host had once been 100x quicker
    try:
        slow = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=5)[0]
    finally:
        profiler._quickest.pop(cpu.key)
    assert slow.attempts == profiler.ATTEMPTS


def test_a_budget_cuts_the_samples_and_the_attempts(cpu: profiler.Device) -> None:
    """Within a budget a measurement takes `MIN_SAMPLES` where more would overrun it, and no second attempt
    that would: on a loaded host every attempt looks like a slow spell (ResNet-50 on the shared 2-core CPU:
    three attempts of every unit)."""
    model, feeds = profiler._reference()
    profiler._quickest[cpu.key] = 1e-9  # as if the host had once been far quicker: every attempt is slow
    try:
        free = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=30)[0]
        bounded = profiler.time_models([(model, feeds)], cpu, warmup=2, samples=30, budget_s=0.0)[0]
    finally:
        profiler._quickest.pop(cpu.key)
    assert len(free.values) == 30 and free.attempts == profiler.ATTEMPTS
    assert len(bounded.values) == profiler.MIN_SAMPLES and bounded.attempts == 1


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(1, 6), st.booleans())
def test_a_primed_sample_follows_an_untimed_run_of_its_own_model(
    per_sample: list[int], samples: int, primed: bool
) -> None:
    """Units measured side by side are primed (`measure_marginals`): before each sample of a model, one run of it
    outside the timed span, so the sample finds the caches as its own run left them, not as the unit timed
    before it did. Each model's run count says which runs there were; the sample count is unchanged."""
    calls = [0] * len(per_sample)
    finished = [0] * len(per_sample)

    def runner(i: int):  # noqa: ANN202 (a (once, finish) pair)
        def once() -> None:
            calls[i] += 1

        def finish() -> None:
            finished[i] += 1

        return once, finish

    values = profiler._side_by_side([runner(i) for i in range(len(per_sample))], per_sample, samples, primed)
    assert [len(v) for v in values] == [samples] * len(per_sample)
    assert calls == [samples * (n + primed) for n in per_sample]
    assert finished == [samples * (1 + primed)] * len(per_sample)  # a primed run is waited for before timing


@given(st.integers(1, 6), st.integers(0, 20))
def test_visiting_order_balances_every_pair_of_rounds(variants: int, pair: int) -> None:
    """Over rounds 2k and 2k+1 every variant's positions add up alike (a linear drift hits all alike), and over
    ``variants`` pairs each variant goes first once."""
    first, second = profiler.visiting_order(variants, 2 * pair), profiler.visiting_order(variants, 2 * pair + 1)
    assert sorted(first) == sorted(second) == list(range(variants))
    assert {first.index(i) + second.index(i) for i in range(variants)} == {variants - 1}
    leaders = [profiler.visiting_order(variants, 2 * (pair + k))[0] for k in range(variants)]
    assert sorted(leaders) == list(range(variants))


@given(st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(0.01, 1.0)), max_size=8), st.floats(0.01, 1.0))
def test_quick_mode_rounds_are_those_within_a_slow_spell_of_the_quick_host(
    taken: list[tuple[float, float]], quick: float
) -> None:
    """What a prediction at the quick host is compared with: the rounds whose reference ran at most SLOW_SPELL
    times the quick one, in order; a round with no reference counts as quick (nothing says it was slow)."""
    timings = [profiler.Timing(ms, 40, 0.0, reference_ms=ref) for ms, ref in taken]
    timings.append(profiler.Timing(1.0, 40, 0.0))
    kept = profiler.in_quick_mode(timings, quick)
    assert kept == [ms for ms, ref in taken if ref <= profiler.SLOW_SPELL * quick] + [1.0]
