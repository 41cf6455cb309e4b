import numpy as np
import pytest

from aisimulate.perf import BatchShape, PolynomialPerfModel
from aisimulate.perf.model import BatchArrays
from aisimulate.perf.polynomial import decode_ms, prefill_ms


def reference_prefill(tokens):
    return 4.209989e-7 * tokens**2 + 1.518344e-2 * tokens + 16.50142


def reference_decode(u):
    return max(1.0, -25.74 * u**2 + 54.01 * u + 5.74)


@pytest.mark.parametrize("tokens", [1, 64, 1024, 8192, 32768])
def test_prefill_equals_reference_formula(tokens):
    model = PolynomialPerfModel()
    batch = BatchShape(prefill_tokens=tokens, prefill_requests=1)
    assert model.pass_time_ms(batch) == reference_prefill(tokens)


def test_prefill_numbers_from_the_observed_reference():
    assert prefill_ms(1, 1024, 0) == pytest.approx(32.5, abs=0.05)
    assert prefill_ms(1, 8192, 0) == pytest.approx(169, abs=0.5)
    # Chunks pay nothing for earlier context: the second 8k chunk of a 16k prompt costs the same.
    assert prefill_ms(1, 16384, 8192) == prefill_ms(1, 8192, 0)


def test_batch_means_are_whole_tokens():
    # The reference divides the batch's summed chunk ends and cached prefixes by the batch size
    # in integers: 12 chunks of 8,192 new tokens in all, 100 cached, are priced as 12 x 682.
    expected = reference_prefill(12 * ((8192 + 100) // 12 - 100 // 12))
    batch = BatchShape(prefill_tokens=8192, prefill_requests=12, prefill_context_tokens=100)
    assert PolynomialPerfModel().pass_time_ms(batch) == pytest.approx(expected, rel=1e-12)
    arrays = BatchArrays(
        decode_requests=np.zeros(1),
        decode_context_tokens=np.zeros(1),
        prefill_tokens=np.array([8192.0]),
        prefill_requests=np.array([12.0]),
        prefill_context_tokens=np.array([100.0]),
    )
    assert PolynomialPerfModel().pass_times_ms(arrays)[0] == pytest.approx(expected, rel=1e-12)


def test_fully_cached_prompt_costs_no_prefill():
    assert prefill_ms(3, 512, 512) == 0.0
    assert prefill_ms(0, 512, 0) == 0.0


@pytest.mark.parametrize("u", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_decode_is_quadratic_in_kv_utilisation(u):
    capacity = 16384 * 64
    active = round(u * capacity)
    batch = BatchShape(
        decode_requests=7, decode_context_tokens=7 * 100, active_kv_tokens=active, kv_capacity_tokens=capacity
    )
    assert PolynomialPerfModel().pass_time_ms(batch) == pytest.approx(
        reference_decode(active / capacity), rel=1e-12
    )


def test_decode_ends_and_edges():
    assert decode_ms(0, 1000) == pytest.approx(5.74)
    assert decode_ms(1000, 1000) == pytest.approx(34.01)
    assert decode_ms(5000, 1000) == pytest.approx(34.01)  # utilisation is capped at 1
    assert decode_ms(10, 0) == pytest.approx(34.01)  # no capacity known: treated as full


def test_batch_size_does_not_matter_for_decode():
    a = BatchShape(
        decode_requests=1, decode_context_tokens=10, active_kv_tokens=5000, kv_capacity_tokens=10000
    )
    b = BatchShape(
        decode_requests=200, decode_context_tokens=2000, active_kv_tokens=5000, kv_capacity_tokens=10000
    )
    model = PolynomialPerfModel()
    assert model.pass_time_ms(a) == model.pass_time_ms(b)


def test_mixed_pass_is_prefill_plus_decode_and_speedup_divides():
    batch = BatchShape(
        prefill_tokens=1000,
        prefill_requests=2,
        decode_requests=4,
        decode_context_tokens=400,
        active_kv_tokens=2000,
        kv_capacity_tokens=10000,
    )
    expected = reference_prefill(1000) + reference_decode(0.2)
    assert PolynomialPerfModel().pass_time_ms(batch) == pytest.approx(expected)
    assert PolynomialPerfModel(speedup_ratio=2.0).pass_time_ms(batch) == pytest.approx(expected / 2)


@pytest.mark.parametrize("speedup", [1.0, 2.5, 0.0])
@pytest.mark.parametrize("capacity", [0, 1, 777, 1_048_576])
def test_a_run_priced_at_once_equals_its_passes_priced_one_by_one_to_the_bit(speedup, capacity):
    """Utilisation below, at and above 1, near the floor and far from it: same operations in
    the same order, so a planned run's prices do not depend on which path priced it."""
    model = PolynomialPerfModel(speedup_ratio=speedup)
    contexts = [0, 1, 7, 100, 523, 777, 778, 4_096, 99_991, 524_287, 1_048_575, 1_048_576, 2_000_003]
    contexts += list(range(3, 3_000_000, 29_989))
    for decoders in (1, 64, 256):
        scalar = model.decode_pricer(decoders, 1.0, capacity)
        run = model.decode_run_pricer(decoders, 1.0, capacity)
        assert run(np.asarray(contexts, dtype=np.float64)).tolist() == [scalar(c) for c in contexts]
        # the same passes as the spelled-out vectorised path
        times = model.decode_times_ms(decoders, 1.0, capacity, np.asarray(contexts, dtype=np.float64))
        assert times.tolist() == [scalar(c) for c in contexts]
