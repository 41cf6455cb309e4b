"""Host KV offload: processor-sharing links, tier LRUs, onboarding before admission."""

import pytest
from pydantic import ValidationError

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.kv_cache import BlockPool
from aisimulate.replay.offload import HostTiers, SharedLink
from aisimulate.workload import SyntheticWorkload
from tests.replay.conftest import assert_matches_exact


def test_link_shares_bandwidth_between_concurrent_transfers():
    link = SharedLink(1.0)  # 1 GB/s = 1e6 bytes per ms
    link.add(0.0, 1e6, "a")
    link.add(0.0, 1e6, "b")
    assert link.next_completion() == pytest.approx(2.0)  # each gets half
    assert sorted(link.complete(2.0)) == ["a", "b"]


def test_link_speeds_up_when_a_transfer_leaves():
    link = SharedLink(1.0)
    link.add(0.0, 1e6, "long")
    link.add(0.0, 0.5e6, "short")
    assert link.next_completion() == pytest.approx(1.0)  # 0.5 MB at half speed
    assert link.complete(1.0) == ["short"]
    # "long" has 0.5 MB left and now the whole link.
    assert link.next_completion() == pytest.approx(1.5)
    assert link.complete(1.5) == ["long"]


def test_zero_bandwidth_is_instant():
    link = SharedLink(0.0)
    link.add(3.0, 1e9, "x")
    assert link.next_completion() == 3.0 and link.complete(3.0) == ["x"]


def tiers(**kw):
    base = dict(
        g1=BlockPool(64),
        unit=1,
        block_bytes=1000.0,
        g2_blocks=4,
        g3_blocks=None,
        g1_to_g2_gbps=1.0,
        g2_to_g1_gbps=1.0,
        g2_to_g3_gbps=1.0,
        g3_to_g2_gbps=1.0,
        offload_batch_size=2,
    )
    return HostTiers(**{**base, **kw})


def test_offload_goes_down_in_batches_and_g2_is_an_lru():
    t = tiers()
    t.g1.acquire([1, 2])
    assert t.stored([1], 0.0) == []  # below the batch size
    assert t.stored([2], 0.0) == [t.down]
    t.arrived(t.down.complete(t.down.next_completion())[0], 1.0)
    assert list(t.g2) == [1, 2]
    for key in (3, 4, 5):
        t._put_g2([key], 2.0)
    assert list(t.g2) == [2, 3, 4, 5]  # 1 was the least recently used


def test_g2_overflow_moves_to_g3_and_lookup_counts_tiers():
    t = tiers(g2_blocks=2, g3_blocks=4)
    started = t._put_g2([1, 2, 3], 0.0)
    assert started == [t.down3]
    t.arrived(t.down3.complete(t.down3.next_completion())[0], 1.0)
    assert list(t.g2) == [2, 3] and list(t.g3) == [1]
    assert t.lookup([9, 2, 3, 1], 1, 4) == (2, 1)
    assert t.lookup([1, 2], 0, 2) == (0, 2)  # once a unit is only in G3, the rest count as G3


def offload_plan(g2=20000, **kw):
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg=EngineSpec(num_gpu_blocks=900, replicas=2, num_g2_blocks=g2, **kw),
    )


WORKLOAD = SyntheticWorkload(
    isl=4096, osl=32, num_requests=200, concurrency=8, shared_prefix_ratio=0.9, num_prefix_groups=40
)


def test_host_tier_recovers_prefixes_the_gpu_evicted():
    without = simulate(offload_plan(g2=None), WORKLOAD, perf="polynomial").summary
    with_g2 = simulate(offload_plan(), WORKLOAD, perf="polynomial").summary
    assert "host_cache_hit_ratio" not in without
    assert with_g2["host_cache_hit_ratio"] > 0.1
    assert with_g2["prefix_cache_reused_ratio"] > without["prefix_cache_reused_ratio"] + 0.1
    assert with_g2["mean_onboard_ms"] > 0
    assert with_g2["mean_ttft_ms"] < without["mean_ttft_ms"]


def test_onboarding_time_is_bytes_over_the_shared_link():
    # One request at a time: every onboarding has the link to itself.
    workload = SyntheticWorkload(
        isl=4096, osl=4, num_requests=120, concurrency=1, shared_prefix_ratio=1.0, num_prefix_groups=30
    )
    s = simulate(offload_plan(), workload, perf="polynomial", capture_requests=True).summary
    block_bytes = 64 * 131072
    # Whole 4096-token prefixes come back (63 blocks: the last one is recomputed).
    assert s["mean_onboard_ms"] == pytest.approx(63 * block_bytes / 14e6, rel=0.05)
    slow = simulate(offload_plan(bandwidth_g2_to_g1_gbps=7), workload, perf="polynomial").summary
    assert slow["mean_onboard_ms"] == pytest.approx(2 * s["mean_onboard_ms"], rel=0.05)


def test_offload_fast_path_matches_exact():
    fast = simulate(offload_plan(), WORKLOAD, perf="polynomial").summary
    exact = simulate(offload_plan(), WORKLOAD, perf="polynomial", exact=True).summary
    assert_matches_exact(fast, exact)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"num_g3_blocks": 10}, "needs num_g2_blocks"),
        ({"num_g2_blocks": 10, "enable_prefix_caching": False}, "needs enable_prefix_caching"),
    ],
)
def test_bad_tier_settings(kw, match):
    with pytest.raises(ValidationError, match=match):
        EngineSpec(**kw)


def test_units_being_copied_down_stay_in_the_gpu_pool_until_the_copy_lands():
    """KVBM reads the GPU block it offloads: until the copy lands the block is held, so the pool
    cannot evict or reuse it; afterwards it is cached (evictable) again."""
    pool = BlockPool(4)
    pool.acquire([1, 2])
    pool.release([1, 2], anon_full=0, anon_partial=0)  # the request is done: both cached
    assert pool.available() == 4
    t = tiers(g1=pool)
    assert t.stored([1, 2], 0.0) == [t.down]
    assert pool.available() == 2 and set(pool.active) == {1, 2}  # held by the copy
    pool.check()
    t.arrived(t.down.complete(t.down.next_completion())[0], 1.0)
    assert pool.available() == 4 and not pool.active and set(pool.inactive) == {1, 2}
    assert list(t.g2) == [1, 2]


def test_a_unit_evicted_before_its_copy_starts_is_not_copied():
    pool = BlockPool(2)
    pool.acquire([1])
    pool.release([1], anon_full=0, anon_partial=0)
    t = tiers(g1=pool)
    t.stored([1], 0.0)  # waits for a second unit to fill the batch
    pool.allocate_anon(2)  # evicts unit 1 from the GPU
    pool.free_anon(2)
    pool.acquire([2])
    assert t.stored([2], 0.0) == [t.down]
    assert pool.active == {2: 2}  # the request's hold and the copy's; 1 is gone
    payload = t.down.complete(t.down.next_completion())[0]
    assert payload == ("g2", [2])  # one unit's bytes, not two
    t.arrived(payload, 1.0)
    assert pool.active == {2: 1} and list(t.g2) == [2]
    pool.check()
