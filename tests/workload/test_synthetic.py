import numpy as np
import pytest

from aisimulate.errors import ConfigError
from aisimulate.workload import LengthDistribution, SyntheticWorkload, load_workload


def all_requests(workload, block_size=64, seed=0):
    return [t for s in workload.sessions(block_size, seed) for t in s.turns]


def test_constant_rate_arrivals_and_counts():
    w = SyntheticWorkload(isl=100, osl=10, num_requests=4, request_rate=2, turns_per_session=2)
    reqs = all_requests(w)
    assert len(reqs) == w.num_total_requests == 8
    firsts = [r.arrival_ms for r in reqs if r.turn == 0]
    assert firsts == [0, 500, 1000, 1500]
    assert all(r.arrival_ms is None for r in reqs if r.turn == 1)
    assert w.mode == "open"


def test_poisson_arrivals_are_seeded():
    w = SyntheticWorkload(isl=100, osl=10, num_requests=200, request_rate=10, arrival="poisson")
    a = [r.arrival_ms for r in all_requests(w, seed=1)]
    b = [r.arrival_ms for r in all_requests(w, seed=1)]
    c = [r.arrival_ms for r in all_requests(w, seed=2)]
    assert a == b and a != c and a[0] == 0
    assert np.mean(np.diff(a)) == pytest.approx(100, rel=0.2)


def test_closed_loop_has_no_arrival_times():
    w = SyntheticWorkload(isl=100, osl=10, num_requests=3, concurrency=2)
    assert w.mode == "closed" and w.concurrency == 2
    assert all(r.arrival_ms is None for r in all_requests(w))


def test_hash_ids_are_unique_except_the_group_prefix():
    w = SyntheticWorkload(
        isl=640, osl=10, num_requests=6, concurrency=1, shared_prefix_ratio=0.35, num_prefix_groups=2
    )
    reqs = all_requests(w)
    assert all(len(r.hash_ids) == 10 and r.num_shareable_hash_ids == 4 for r in reqs)  # round(3.5) = 4
    prefixes = {r.hash_ids[:4] for r in reqs}
    assert len(prefixes) == 2
    tails = [h for r in reqs for h in r.hash_ids[4:]]
    assert len(tails) == len(set(tails))


def test_no_groups_means_nothing_shareable():
    w = SyntheticWorkload(isl=200, osl=10, num_requests=2, concurrency=1)
    assert all(r.num_shareable_hash_ids == 0 for r in all_requests(w))


def test_length_distributions():
    normal = LengthDistribution(mean=1000, std=200, min=500, max=1500)
    values = normal.sample(np.random.default_rng(0), 2000)
    assert values.min() >= 500 and values.max() <= 1500 and abs(values.mean() - 1000) < 30
    uniform = LengthDistribution(dist="uniform", min=10, max=20).sample(np.random.default_rng(0), 500)
    assert set(uniform) <= set(range(10, 21))
    lognormal = LengthDistribution(dist="lognormal", mean=300, std=100).sample(np.random.default_rng(0), 5000)
    assert abs(lognormal.mean() - 300) < 15
    w = SyntheticWorkload(isl={"mean": 800, "std": 100}, osl=10, num_requests=50, concurrency=4)
    assert len({r.input_tokens for r in all_requests(w)}) > 10


@pytest.mark.parametrize(
    ("mapping", "match"),
    [
        ({"isl": 100, "osl": 10, "num_requests": 3}, "exactly one of"),
        ({"isl": 100, "osl": 10, "num_requests": 3, "request_rate": 1, "concurrency": 2}, "exactly one of"),
        ({"isl": 0, "osl": 10, "num_requests": 3, "concurrency": 2}, "isl: must be >= 1"),
        ({"isl": 100, "osl": 10, "num_requests": -1, "concurrency": 2}, "num_requests"),
        ({"isl": 100, "osl": 10, "num_requests": 3, "concurrency": 2, "bogus": 1}, "bogus: unknown key"),
        (
            {"isl": {"dist": "uniform", "min": 5}, "osl": 10, "num_requests": 1, "concurrency": 1},
            "needs 'max'",
        ),
        ({"isl": 10, "osl": 10, "num_requests": 1, "request_rate": 0}, "request_rate"),
    ],
)
def test_bad_synthetic_configs_name_the_field(mapping, match):
    with pytest.raises(ConfigError, match=match):
        load_workload(mapping)


def test_a_run_is_generated_once_per_block_size_and_seed():
    w = SyntheticWorkload(isl=100, osl=10, num_requests=5, concurrency=2)
    first = all_requests(w)
    again = all_requests(SyntheticWorkload(isl=100, osl=10, num_requests=5, concurrency=2))
    assert again == first and again[0] is first[0]  # an equal workload: the kept copy
    assert all_requests(w, block_size=32)[0] is not first[0]
    assert all_requests(w, seed=1)[0] is not first[0]


def test_a_long_run_is_streamed_not_kept(monkeypatch):
    from aisimulate.workload import synthetic

    monkeypatch.setattr(synthetic, "CACHED_HASH_IDS", 9)  # 5 requests of 2 blocks name 10
    w = SyntheticWorkload(isl=100, osl=10, num_requests=5, concurrency=2)
    first = all_requests(w)
    again = all_requests(w)
    assert again == first and again[0] is not first[0]
