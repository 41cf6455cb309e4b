"""Disaggregated serving: prefill pool -> KV transfer -> decode pool."""

import dataclasses

import pytest
from pydantic import ValidationError

from aisimulate.catalog import backends, get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.perf.polynomial import decode_ms, prefill_ms
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.transfer import KvTransfer, kv_transfer, transfer_bandwidth
from aisimulate.workload import LengthDistribution, SyntheticWorkload
from tests.replay.conftest import assert_matches_exact

CAPACITY = 16384 * 64


def plan(prefill=None, decode=None, **kw):
    base = dict(num_gpu_blocks=16384)
    kw.setdefault("frontend_latency_ms", 0)  # engine timings: these tests are about the engine
    kw.setdefault("kv_transfer_latency_ms", 0)  # bytes over bandwidth only
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        mode="disagg",
        prefill=EngineSpec(**{**base, **(prefill or {})}),
        decode=EngineSpec(**{**base, **(decode or {})}),
        **kw,
    )


def one(p, isl=1024, osl=3, exact=False, **kw):
    workload = SyntheticWorkload(isl=isl, osl=osl, num_requests=1, concurrency=1)
    return simulate(p, workload, perf="polynomial", capture_requests=True, exact=exact, **kw)


def test_ttft_is_prefill_then_the_first_decode_step():
    rep = one(plan(kv_transfer_bandwidth_gbps=0))
    r = rep.requests[0]
    # The decode worker computes the prompt's last token in its first step (1,024 tokens of KV).
    assert r["ttft_ms"] == pytest.approx(prefill_ms(1, 1024, 0) + decode_ms(1024, CAPACITY))
    assert r["ttst_ms"] == pytest.approx(decode_ms(1025, CAPACITY))
    assert r["output_length"] == 3 and r["prefill_worker_idx"] == 0
    assert rep.summary["kv_transfer_ms_mean"] == 0


@pytest.mark.parametrize("exact", [False, True])
def test_sglang_streams_the_prefill_workers_token_at_pick_up(exact):
    # SGLang's decode worker streams the token the prefill worker sampled when it takes the KV,
    # before any pass of its own: TTFT is the prefill alone, and its first pass (the whole
    # prompt's KV plus that token) emits the second token.
    p = plan(backend="sglang", kv_transfer_bandwidth_gbps=0)
    r = one(p, exact=exact).requests[0]
    assert r["ttft_ms"] == pytest.approx(prefill_ms(1, 1024, 0))
    assert r["ttst_ms"] == pytest.approx(decode_ms(1025, CAPACITY))
    assert r["output_length"] == 3
    single = one(p, osl=1, exact=exact).requests[0]  # a one-token request: its pass emits it
    assert single["ttft_ms"] == pytest.approx(prefill_ms(1, 1024, 0) + decode_ms(1024, CAPACITY))


def test_transfer_time_is_prompt_kv_over_bandwidth():
    rep = one(plan(kv_transfer_bandwidth_gbps=10))
    expected = 1024 * 131072 / (10 * 1e6)  # bytes / (GB/s as bytes per ms)
    assert rep.requests[0]["kv_transfer_ms"] == pytest.approx(expected)
    free = one(plan(kv_transfer_bandwidth_gbps=0)).requests[0]["ttft_ms"]
    assert rep.requests[0]["ttft_ms"] == pytest.approx(free + expected)


def test_transfer_time_is_the_handoff_latency_plus_bytes_over_bandwidth():
    pinned = plan(kv_transfer_bandwidth_gbps=10, kv_transfer_latency_ms=40)
    assert kv_transfer(pinned) == KvTransfer(latency_ms=40, gbps=10)
    assert kv_transfer(pinned).ms(1e6) == pytest.approx(40 + 1e6 / (10 * 1e6))
    rep = one(pinned)
    assert rep.requests[0]["kv_transfer_ms"] == pytest.approx(40 + 1024 * 131072 / (10 * 1e6))
    bytes_only = one(plan(kv_transfer_bandwidth_gbps=10)).requests[0]["ttft_ms"]
    assert rep.requests[0]["ttft_ms"] == pytest.approx(bytes_only + 40)


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_every_replay_gets_its_backends_handoff_latency(backend):
    # Unset, the latency is the backend's fitted value; a free link (bandwidth 0) stays free.
    default = plan(backend=backend, kv_transfer_latency_ms=None)
    profile = backend_profile(backend)
    handoff_ms = profile.kv_handoff_ms
    assert handoff_ms > 0
    transfer = kv_transfer(default)
    assert transfer.latency_ms == handoff_ms
    assert transfer.gbps == min(get_system("h200_sxm").nvlink_gbps, profile.kv_send_gbps or float("inf"))
    rep = one(default)
    expected = handoff_ms + profile.kv_send_ms + 1024 * 131072 / (transfer.gbps * 1e6)
    assert rep.requests[0]["kv_transfer_ms"] == pytest.approx(expected)
    free = plan(backend=backend, kv_transfer_latency_ms=None, kv_transfer_bandwidth_gbps=0)
    assert kv_transfer(free).ms(1e9) == 0
    agg = DeploymentPlan(model="meta-llama/Llama-3.1-8B", system="h200_sxm", backend=backend)
    assert kv_transfer(agg).ms(1e9) == 0


def test_default_link_is_nvlink_inside_a_node_else_the_network():
    h200 = get_system("h200_sxm")
    assert transfer_bandwidth(plan()) == h200.nvlink_gbps
    wide = plan(prefill={"tp": 8}, decode={"tp": 8})
    assert transfer_bandwidth(wide) == h200.inter_node_gbps
    assert one(plan()).requests[0]["kv_transfer_ms"] == pytest.approx(1024 * 131072 / (450 * 1e6))


def test_destination_reservation_waits_for_decode_kv():
    # The decode pool holds one 600-token request at a time.
    p = plan(decode={"num_gpu_blocks": 12}, kv_transfer_bandwidth_gbps=0)
    workload = SyntheticWorkload(isl=600, osl=80, num_requests=2, arrival_interval_ms=0)
    rep = simulate(p, workload, perf="polynomial", capture_requests=True)
    first, second = sorted(rep.requests, key=lambda r: r["first_token_ms"])
    assert second["first_token_ms"] > first["last_token_ms"]
    assert rep.summary["preemptions"] == 0 and rep.summary["completed_requests"] == 2


def test_gpu_accounting_per_role():
    p = plan(prefill={"tp": 2, "replicas": 2}, decode={"replicas": 3}, kv_transfer_bandwidth_gbps=0)
    s = simulate(
        p, SyntheticWorkload(isl=500, osl=50, num_requests=30, concurrency=6), perf="polynomial"
    ).summary
    seconds = s["duration_ms"] / 1000
    assert s["prefill_gpus_per_worker"] == 2 and s["decode_gpus_per_worker"] == 1
    assert s["prefill_worker_seconds"] == pytest.approx(2 * seconds)
    assert s["decode_worker_seconds"] == pytest.approx(3 * seconds)
    assert s["gpu_hours"] == pytest.approx((2 * 2 + 3) * seconds / 3600)


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_every_backend_runs_disaggregated(backend):
    p = DeploymentPlan(
        model="Qwen/Qwen3-30B-A3B",
        system="h200_sxm",
        backend=backend,
        mode="disagg",
        prefill=EngineSpec(tp=2),
        decode=EngineSpec(tp=1, attention_dp=2, moe_ep=2, replicas=2),
    )
    rep = simulate(
        p, SyntheticWorkload(isl=800, osl=40, num_requests=40, concurrency=8), capture_requests=True
    )
    assert rep.summary["completed_requests"] == 40
    assert {r["dp_rank"] for r in rep.requests} == {0, 1}
    assert all(r["ttft_ms"] > 0 for r in rep.requests)


def test_fast_path_matches_exact_in_disagg():
    p = plan(
        prefill={"replicas": 2}, decode={"replicas": 3, "num_gpu_blocks": 300}, kv_transfer_bandwidth_gbps=25
    )
    workload = SyntheticWorkload(isl=900, osl=300, num_requests=90, concurrency=30)
    fast = simulate(p, workload, perf="polynomial").summary
    exact = simulate(p, workload, perf="polynomial", exact=True).summary
    assert_matches_exact(fast, exact)


def test_prefix_reuse_counts_on_the_prefill_pool():
    workload = SyntheticWorkload(
        isl=1024, osl=4, num_requests=6, concurrency=1, shared_prefix_ratio=1.0, num_prefix_groups=1
    )
    rep = simulate(plan(kv_transfer_bandwidth_gbps=0), workload, perf="polynomial")
    assert rep.summary["prefix_cache_reused_ratio"] == pytest.approx(5 * 960 / (6 * 1024))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(mode="disagg", prefill=EngineSpec()), "needs both a prefill and a decode"),
        (dict(mode="disagg", prefill=EngineSpec(block_size=32), decode=EngineSpec()), "block_size"),
        (
            dict(mode="disagg", prefill=EngineSpec(), decode=EngineSpec(), kv_transfer_bandwidth_gbps=-1),
            "greater",
        ),
        (dict(prefill=EngineSpec()), "need mode: disagg"),
    ],
)
def test_bad_disagg_plans(kw, match):
    with pytest.raises(ValidationError, match=match):
        DeploymentPlan(model="qwen3-8b", system="h200_sxm", **kw)


def test_reservations_during_decode_stretches_under_kv_pressure():
    # Hand-offs keep reserving decode KV while the decode worker runs decode-only stretches;
    # the blocks a stretch already took must be booked first (this once over-allocated).
    p = plan(decode={"num_gpu_blocks": 600}, kv_transfer_bandwidth_gbps=0)
    workload = SyntheticWorkload(isl=1024, osl=300, num_requests=200, concurrency=64)
    fast = simulate(p, workload, perf="polynomial").summary
    exact = simulate(p, workload, perf="polynomial", exact=True).summary
    assert fast["completed_requests"] == 200
    for key in ("duration_ms", "mean_ttft_ms", "mean_itl_ms", "preemptions"):
        assert fast[key] == pytest.approx(exact[key], rel=0.005), key


def staggered(decode, n, osl, exact=False):
    """n requests of 300 prompt tokens, 100 ms apart: each is decoding before the next arrives."""
    p = plan(decode=decode, kv_transfer_bandwidth_gbps=0)
    workload = SyntheticWorkload(isl=300, osl=osl, num_requests=n, arrival_interval_ms=100)
    rep = simulate(p, workload, perf="polynomial", capture_requests=True, exact=exact)
    return rep, {r["request_id"]: r for r in rep.requests}


def test_a_full_decode_batch_reserves_no_kv_for_hand_offs():
    # One running slot: the second hand-off waits unreserved, so the first request keeps the
    # 12 blocks it grows into (5 + 5 reserved early would have preempted it).
    rep, records = staggered({"num_gpu_blocks": 12, "max_num_seqs": 1}, n=2, osl=200)
    assert rep.summary["preemptions"] == 0
    assert records[1]["first_token_ms"] > records[0]["last_token_ms"]


@pytest.mark.parametrize("exact", [False, True])
def test_a_request_preempted_on_the_decode_worker_goes_back_ahead_of_later_arrivals(exact):
    # Two slots, 13 blocks: request 1 is preempted while request 2's KV arrives. Request 2
    # waits behind it (no hand-off is waiting for KV), both join when request 0 finishes, and
    # the next preemption takes request 2, admitted after it.
    capacity = 13 * 64
    _, records = staggered({"num_gpu_blocks": 13, "max_num_seqs": 2}, n=3, osl=150, exact=exact)
    assert [records[i]["preemptions"] for i in range(3)] == [0, 1, 1]
    assert records[2]["first_token_ms"] > records[0]["last_token_ms"]
    assert records[1]["last_token_ms"] < records[2]["last_token_ms"]
    # The pass that recomputes request 1 and starts request 2 costs one decode step: a decode
    # worker is charged no prefill.
    pass_ms = records[2]["first_token_ms"] - records[0]["last_token_ms"]
    assert pass_ms <= decode_ms(capacity, capacity) < prefill_ms(1, 300, 0) + decode_ms(300, capacity)


def test_arrived_kv_runs_when_the_preempted_head_can_never_fit():
    # 12 blocks: request 0 preempts itself while request 2's reserved prompt holds 5 blocks,
    # and its 8 blocks no longer fit beside them. With nothing running to free any, request 2
    # decodes first (the reference replay stops here with an error).
    rep, records = staggered({"num_gpu_blocks": 12, "max_num_seqs": 2}, n=3, osl=150)
    assert rep.summary["completed_requests"] == 3
    assert records[2]["first_token_ms"] < records[0]["last_token_ms"]


@pytest.mark.parametrize("timing", ["full_prompt", "destination_missing"])
def test_a_hand_off_reserves_and_sends_its_last_partial_block(timing):
    # 1,025 tokens: 17 blocks, the last holding one token (the reference reserves all of them).
    rep = one(plan(kv_transfer_bandwidth_gbps=10, kv_transfer_timing=timing), isl=1025)
    assert rep.requests[0]["kv_transfer_ms"] == pytest.approx(1025 * 131072 / (10 * 1e6))


@pytest.mark.parametrize("exact", [False, True])
def test_an_sglang_decode_worker_takes_arrived_kv_when_it_polls(exact):
    # Request 0 decodes for 200 passes; request 1's KV lands about 100 ms later. Polling every
    # pass, it joins the pass after it landed; polling every 30 decode passes, it waits for the
    # next poll, more than a pass later and less than an interval of the batch's passes.
    def replay(interval):
        p = plan(backend="sglang", decode={"sglang": {"scheduler_recv_interval": interval}})
        p = p.model_copy(update={"kv_transfer_bandwidth_gbps": 0})
        workload = SyntheticWorkload(isl=300, osl=200, num_requests=2, arrival_interval_ms=100)
        rep = simulate(p, workload, perf="polynomial", capture_requests=True, exact=exact)
        return {r["request_id"]: r for r in rep.requests}

    every, polled = replay(1), replay(30)
    assert polled[0]["ttft_ms"] == pytest.approx(every[0]["ttft_ms"])  # an idle worker polls at once
    pass_ms = decode_ms(2 * 400, CAPACITY)  # a pass of both requests at their longest context here
    assert every[1]["ttft_ms"] < prefill_ms(1, 300, 0) + 2 * pass_ms
    waited_ms = polled[1]["ttft_ms"] - every[1]["ttft_ms"]
    assert pass_ms < waited_ms < 30 * pass_ms
    assert polled[1]["last_token_ms"] > every[1]["last_token_ms"]


def _two_rank_decode(backend_profiles, balanced):
    """Four users on one decode worker of four attention-DP ranks, one sequence each: a user whose
    request ends first sends the next one while other ranks still decode."""
    trtllm = backend_profiles["trtllm"]
    backend_profiles["trtllm"] = dataclasses.replace(trtllm, balances_attention_dp=balanced)
    p = DeploymentPlan(
        model="deepseek-ai/DeepSeek-V3",
        system="gb200",
        mode="disagg",
        backend="trtllm",
        frontend_latency_ms=0,
        kv_transfer_latency_ms=0,
        prefill=EngineSpec(tp=4, moe_ep=4, max_model_len=2048),
        decode=EngineSpec(tp=1, attention_dp=4, moe_ep=4, max_num_seqs=1, max_model_len=2048),
    )
    workload = SyntheticWorkload(
        isl=256, osl=LengthDistribution(dist="uniform", min=20, max=400), num_requests=24, concurrency=4
    )
    return simulate(p, workload, perf="analytic", capture_requests=True, seed=3).requests


def test_a_trtllm_decode_worker_gives_a_hand_off_its_least_loaded_rank(monkeypatch):
    profiles = dict(backends.BACKEND_PROFILES)
    monkeypatch.setattr(backends, "BACKEND_PROFILES", profiles)
    balanced = _two_rank_decode(profiles, True)
    routed = _two_rank_decode(profiles, False)
    # As many users as the worker has slots: balanced, none waits for another's request; the
    # router's pick alone (round-robin over the ranks) sends some to a rank still decoding.
    worst = max(r["ttft_ms"] for r in balanced)
    assert worst < 0.2 * max(r["ttft_ms"] for r in routed)
    assert sum(r["ttft_ms"] > 5 * worst for r in routed) >= 2
