"""The KV-aware router's cost, term by term, on hand-built worker states."""

from collections import Counter

import numpy as np
import pytest

from aisimulate.perf import PolynomialPerfModel
from aisimulate.replay import DeploymentPlan, EngineSpec, KvRouterSpec, router_spec, simulate
from aisimulate.replay.engine import Rank
from aisimulate.replay.kv_events import Clock
from aisimulate.replay.kv_router import KvRouter
from aisimulate.replay.metrics import Collector
from aisimulate.replay.request import Request
from aisimulate.replay.router import HeldRequests
from aisimulate.workload import RequestSpec, SyntheticWorkload
from tests.replay.test_offload import tiers

SHARED = tuple(range(100, 108))  # 8 shareable blocks of 64 tokens


def request(rid, isl=1024, ids=SHARED):
    spec = RequestSpec(
        request_id=rid,
        session_id=rid,
        turn=0,
        input_tokens=isl,
        output_tokens=8,
        hash_ids=(*ids, *range(1000 * (rid + 1), 1000 * (rid + 1) + 8)),
        hash_block_tokens=64,
        num_shareable_hash_ids=len(ids),
    )
    return Request.from_spec(spec, 0.0, 64, max_model_len=None)


def ranks(n=2):
    return [
        Rank(EngineSpec(num_gpu_blocks=200), "vllm", PolynomialPerfModel(), 200, Collector(), worker=i)
        for i in range(n)
    ]


def router(*attached, decode_pool=False, **kw):
    rt = KvRouter(KvRouterSpec(**kw), np.random.default_rng(0), decode_pool=decode_pool)
    rt.attach(attached)
    return rt


def test_cached_prefix_earns_credit():
    a, b = ranks()
    r = request(0)
    a.pool.acquire(r.prompt_keys[:4])
    a.pool.release(r.prompt_keys[:4], anon_full=0, anon_partial=0)  # cached, not active
    # a: prefill 1024/64 - 4 cached = 12, decode 0 active + 16 new = 16; b: 16 + 16.
    assert router(a, b).costs(r, [a, b]) == [28, 32]
    assert router(a, b).route(r, [a, b]) == 0


def test_pending_prefill_tokens_and_scale():
    a, b = ranks()
    rt = router(a, b, prefill_load_scale=2.0)
    earlier = request(1, isl=512)
    b.waiting.append(earlier)
    rt._on_dispatch(earlier, b, 0)
    r = request(0)
    costs = rt.costs(r, [a, b])
    # b: 2 * (512 + 1024) / 64 = 48, plus its 8 active blocks and the request's 16 (8 shared).
    assert costs[1] == 2 * 24 + 8 + 16 - 8
    assert costs[0] == 2 * 16 + 16


def test_pending_prefill_is_added_at_dispatch_and_removed_at_the_first_token():
    a, b = ranks()
    rt = router(a, b)
    r = request(0)
    rt._on_dispatch(r, a, 4)  # 4 of its units cached on a: 768 tokens left to compute
    assert (rt._prefill_tokens(a), rt._prefill_tokens(b)) == (1024 - 4 * 64, 0)
    assert a.enqueue(r, 0.0)
    a.end_pass(a.begin_pass(0.0))  # the whole prompt in one pass: its first token
    assert r.first_token_ms is not None and rt._prefill_tokens(a) == 0
    a.on_first_token(r)  # a preempted request's prompt computed again: nothing is re-added
    assert rt._prefill_tokens(a) == 0
    rt.release(r)
    assert rt._prefill_tokens(a) == 0 and rt._slots[id(a)].requests == 0
    unfinished = request(1)
    rt._on_dispatch(unfinished, b, 0)
    rt.release(unfinished)  # rejected or handed off before its first token
    assert rt._prefill_tokens(b) == 0


def test_a_decode_pool_tracks_no_prefill():
    a, _ = ranks()
    rt = router(a, decode_pool=True)
    rt._on_dispatch(request(0), a, 0)
    assert a.on_first_token is None and rt._prefill_tokens(a) == 0


def test_active_blocks_dedup_and_release():
    a, _ = ranks()
    rt = router(a)
    first, second = request(0), request(1)
    rt._on_dispatch(first, a, 0)
    slot = rt._slots[id(a)]
    assert slot.requests == 1 and sum(slot.active.values()) == 8
    a.on_first_token(first)  # its prompt no longer weighs on a's prefill; its blocks stay active
    # The second request shares 8 named blocks with the active first one.
    assert rt.costs(second, [a])[0] == 16 + (8 + 8) + (16 - 8)
    rt.release(first)
    assert slot.active == Counter() and slot.anon == 0 and slot.requests == 0


def test_active_request_weight_and_decode_pool():
    a, b = ranks()
    rt = router(a, b, decode_active_request_weight=5.0, decode_pool=True)
    r = request(0)
    a.pool.acquire(r.prompt_keys)  # cached on a, but a decode pool credits no overlap
    rt._on_dispatch(request(1), b, 0)
    assert rt.costs(r, [a, b]) == [16, 16 + 8 + 8 + 5]


def test_temperature_zero_is_argmin_with_seeded_ties():
    rt = router()
    assert {rt._select([3.0, 1.0, 2.0]) for _ in range(20)} == {1}
    picks = [rt._select([1.0, 1.0]) for _ in range(200)]
    assert set(picks) == {0, 1}
    again = router()
    assert [again._select([1.0, 1.0]) for _ in range(200)] == picks  # same seed, same ties


def test_temperature_samples_the_softmax_of_normalised_costs():
    rt = router(router_temperature=1.0)
    picks = Counter(rt._select([10.0, 20.0]) for _ in range(4000))
    expected = 1 / (1 + np.exp(-1.0))
    assert picks[0] / 4000 == pytest.approx(expected, abs=0.03)


def test_busy_workers_are_skipped():
    a, b = ranks()
    rt = router(a, b, active_prefill_tokens_threshold=100)
    earlier = request(1, isl=512)
    a.waiting.append(earlier)
    rt._on_dispatch(earlier, a, 0)
    r = request(0)
    a.pool.acquire(r.prompt_keys)  # a would be cheaper, but it is busy
    assert rt.route(r, [a, b]) == 1


PRESSURE = SyntheticWorkload(
    isl=2048, osl=64, num_requests=300, concurrency=16, shared_prefix_ratio=0.75, num_prefix_groups=12
)


def _under_pressure(router, **engine):
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg=EngineSpec(num_gpu_blocks=260, replicas=4, **engine),
        router=router,
    )
    return simulate(plan, PRESSURE, perf="polynomial").summary


def test_kv_router_improves_reuse_under_cache_pressure():
    reuse = {
        mode: _under_pressure({"mode": mode})["prefix_cache_reused_ratio"]
        for mode in ("round_robin", "kv_router")
    }
    assert reuse["kv_router"] > reuse["round_robin"] + 0.1


def test_kv_events_reach_a_lagged_router_late():
    a, b = ranks()
    clock = Clock()
    rt = KvRouter(KvRouterSpec(kv_event_lag_ms=50.0), np.random.default_rng(0), clock=clock)
    rt.attach([a, b])
    r = request(0)
    a.pool.acquire(r.prompt_keys[:4])  # Stored at t = 0
    a.pool.release(r.prompt_keys[:4], anon_full=0, anon_partial=0)
    assert rt.costs(r, [a, b]) == [32, 32]  # the engine caches it; the router does not know yet
    clock.now_ms = 50.0
    assert rt.costs(r, [a, b]) == [28, 32]
    clock.now_ms = 60.0
    a.pool.evict(4)  # Removed at t = 60: still credited until t = 110
    assert a.pool.match_prefix(r.prompt_keys, 8)[0] == 0
    assert rt.costs(r, [a, b]) == [28, 32]
    clock.now_ms = 110.0
    assert rt.costs(r, [a, b]) == [32, 32]


def test_host_tier_events_reach_a_lagged_router_late():
    a, b = ranks()
    for rank in (a, b):
        rank.tiers = tiers(g2_blocks=100)
    clock = Clock()
    spec = KvRouterSpec(kv_event_lag_ms=50.0, host_cache_hit_weight=1.0)
    rt = KvRouter(spec, np.random.default_rng(0), clock=clock)
    rt.attach([a, b])
    r = request(0)
    a.tiers.g1.acquire(r.prompt_keys[:4])  # held by the copy that lands now
    a.tiers.arrived(("g2", r.prompt_keys[:4]), 0.0)  # offloaded to host at t = 0
    assert a.tiers.lookup(r.prompt_keys, 0, 8) == (4, 0)
    assert rt.costs(r, [a, b]) == [32, 32]  # not yet visible to the router
    clock.now_ms = 50.0
    assert rt.costs(r, [a, b]) == [28, 32]  # host hits credited at full weight


@pytest.mark.parametrize("g2", [None, 2000])
def test_zero_event_lag_is_the_immediate_view(g2):
    """The lagged index, fed by events (host onboarding included), matches the pools exactly."""
    now = _under_pressure({"mode": "kv_router"}, num_g2_blocks=g2)
    lagged = _under_pressure({"mode": "kv_router", "kv_event_lag_ms": 0.0}, num_g2_blocks=g2)
    assert {k: v for k, v in lagged.items() if k != "wall_time_ms"} == {
        k: v for k, v in now.items() if k != "wall_time_ms"
    }


def test_a_router_that_never_hears_events_loses_reuse():
    blind = _under_pressure({"mode": "kv_router", "kv_event_lag_ms": 1e9})
    seeing = _under_pressure({"mode": "kv_router"})
    assert blind["prefix_cache_reused_ratio"] < seeing["prefix_cache_reused_ratio"] - 0.05
    assert blind["completed_requests"] == seeing["completed_requests"] == 300


def test_event_lag_needs_the_kv_router():
    with pytest.raises(ValueError, match=r"round_robin.kv_event_lag_ms\n  Extra inputs are not permitted"):
        router_spec({"mode": "round_robin", "kv_event_lag_ms": 5.0})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "random", "use_kv_events": False}, r"random.use_kv_events\n  Extra inputs are not"),
        ({"mode": "kv_router", "use_kv_events": False, "kv_event_lag_ms": 5.0}, "use_kv_events is false"),
        ({"mode": "kv_router", "use_kv_events": False, "router_ttl_secs": 0.0}, "greater than 0"),
    ],
)
def test_bad_settings_without_kv_events(settings, message):
    with pytest.raises(ValueError, match=message):
        router_spec(settings)


def test_a_router_without_kv_events_guesses_from_its_own_routing():
    a, b = ranks()
    b.tiers = tiers(g2_blocks=100)
    clock = Clock()
    spec = KvRouterSpec(use_kv_events=False, router_ttl_secs=1.0, host_cache_hit_weight=1.0)
    rt = KvRouter(spec, np.random.default_rng(0), clock=clock)
    rt.attach([a, b])
    r = request(0)
    b.pool.acquire(r.prompt_keys[:4])  # cached on b, and its next 4 units on b's host tier:
    b.pool.release(r.prompt_keys[:4], anon_full=0, anon_partial=0)
    b.tiers.g1.acquire(r.prompt_keys[4:8])
    b.tiers.arrived(("g2", r.prompt_keys[4:8]), 0.0)
    assert b.tiers.lookup(r.prompt_keys, 4, 8) == (4, 0)
    assert rt.costs(r, [a, b]) == [32, 32]  # no event says so
    earlier = request(1)  # shares the 8 units of r's prompt prefix
    rt._on_dispatch(earlier, a, 0)
    a.on_first_token(earlier)
    rt.release(earlier)  # gone, but its prompt is believed cached on a
    assert rt.costs(r, [a, b]) == [32 - 8, 32]
    clock.now_ms = 500.0
    rt._on_dispatch(request(2, ids=SHARED[:4]), a, 0)  # routed again: the first 4 units refreshed
    clock.now_ms = 999.0
    assert rt._device_overlap(r, a) == 8
    clock.now_ms = 1000.0  # one TTL after the first routing
    assert rt._device_overlap(r, a) == 4
    clock.now_ms = 1500.0
    assert rt._device_overlap(r, a) == 0


def _three_workers(router, workload, **replay):
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg=EngineSpec(num_gpu_blocks=2000, replicas=3),
        router=router,
    )
    return simulate(plan, workload, perf="polynomial", **replay).summary


def test_a_guess_forgotten_at_once_is_no_overlap_credit():
    workload = SyntheticWorkload(
        isl=1024, osl=64, num_requests=200, request_rate=20, shared_prefix_ratio=0.5, num_prefix_groups=4
    )
    forgetful = _three_workers(
        {"mode": "kv_router", "use_kv_events": False, "router_ttl_secs": 1e-6}, workload
    )
    no_credit = _three_workers({"mode": "kv_router", "overlap_score_credit": 0.0}, workload)
    assert {k: v for k, v in forgetful.items() if k != "wall_time_ms"} == {
        k: v for k, v in no_credit.items() if k != "wall_time_ms"
    }


def test_guessing_the_caches_beats_hearing_nothing_and_trails_the_events():
    reuse = {
        name: _under_pressure({"mode": "kv_router", **settings})["prefix_cache_reused_ratio"]
        for name, settings in (
            ("deaf", {"kv_event_lag_ms": 1e9}),
            ("guess", {"use_kv_events": False}),
            ("events", {}),
        )
    }
    # The guess credits blocks evicted since, and misses none it routed: in between.
    assert reuse["deaf"] + 0.03 < reuse["guess"] < reuse["events"] - 0.03


@pytest.mark.parametrize(
    "router", [{"mode": "kv_router"}, {"mode": "kv_router", "use_kv_events": False, "router_ttl_secs": 2.0}]
)
def test_kv_router_fast_path_equals_exact_and_is_reproducible(router):
    workload = SyntheticWorkload(
        isl=1024, osl=200, num_requests=120, concurrency=32, shared_prefix_ratio=0.5, num_prefix_groups=4
    )
    a = _three_workers(router, workload, seed=5)
    b = _three_workers(router, workload, seed=5, exact=True)
    for key, value in b.items():
        if isinstance(value, int | float) and key != "wall_time_ms":
            assert a[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key


def _queued(threshold, policy="fcfs"):
    workload = SyntheticWorkload(isl=4000, osl=50, num_requests=60, request_rate=40)
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg=EngineSpec(num_gpu_blocks=16384, replicas=2),
        router={"mode": "kv_router", "router_queue_threshold": threshold, "router_queue_policy": policy},
    )
    return simulate(plan, workload, perf="polynomial", capture_requests=True)


def test_admission_queue_holds_arrivals_while_every_rank_is_loaded():
    free = _queued(None)
    held = _queued(0.5)
    assert "router_queued_requests" not in free.summary
    assert held.summary["router_queued_requests"] > 0 and held.summary["mean_router_queue_ms"] > 0
    assert held.summary["completed_requests"] == 60
    waits = [r["router_queue_ms"] for r in held.requests]
    assert max(waits) > 0 and all(w >= 0 for w in waits)
    # TTFT counts from the arrival, queueing included.
    assert all(r["ttft_ms"] >= r["router_queue_ms"] for r in held.requests)


def test_lcfs_serves_the_newest_held_request_first():
    fcfs = {r["request_id"]: r for r in _queued(0.0, "fcfs").requests}
    lcfs = {r["request_id"]: r for r in _queued(0.0, "lcfs").requests}
    held = [rid for rid, r in fcfs.items() if r["router_queue_ms"] > 0]
    order_f = sorted(held, key=lambda rid: fcfs[rid]["arrival_time_ms"] + fcfs[rid]["router_queue_ms"])
    assert order_f == sorted(held)  # first come, first served
    assert max(r["ttft_ms"] for r in lcfs.values()) > max(r["ttft_ms"] for r in fcfs.values())


def test_held_requests_leave_in_their_policy_order():
    arrivals = [request(rid, isl=isl) for rid, isl in enumerate((2048, 512, 1024, 512))]
    order = {}
    for policy in ("fcfs", "lcfs", "wspt"):
        held = HeldRequests(policy)
        for r in arrivals:
            held.push(r)
        order[policy] = [held.pop().rid for _ in range(len(held))]
    assert order == {"fcfs": [0, 1, 2, 3], "lcfs": [3, 2, 1, 0], "wspt": [1, 3, 2, 0]}


def test_wspt_serves_short_prompts_first_and_lowers_the_mean_ttft():
    workload = SyntheticWorkload(
        isl={"dist": "uniform", "min": 256, "max": 8192}, osl=32, num_requests=120, request_rate=60
    )
    runs = {}
    for policy in ("fcfs", "wspt"):
        plan = DeploymentPlan(
            model="meta-llama/Llama-3.1-8B",
            system="h200_sxm",
            agg=EngineSpec(num_gpu_blocks=16384, replicas=2),
            router={"mode": "kv_router", "router_queue_threshold": 0.5, "router_queue_policy": policy},
        )
        runs[policy] = simulate(plan, workload, perf="polynomial", capture_requests=True)
    fcfs, wspt = runs["fcfs"], runs["wspt"]
    assert wspt.summary["router_queued_requests"] > 20
    assert wspt.summary["mean_ttft_ms"] < 0.8 * fcfs.summary["mean_ttft_ms"]

    # Short prompts jump the queue; the longest wait longer than in arrival order.
    def mean_wait(report, low, high):
        waits = [r["router_queue_ms"] for r in report.requests if low <= r["input_length"] < high]
        return sum(waits) / len(waits)

    assert mean_wait(wspt, 0, 2048) < 0.1 * mean_wait(fcfs, 0, 2048)
    assert mean_wait(wspt, 6000, 9000) > mean_wait(fcfs, 6000, 9000)
