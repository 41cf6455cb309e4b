"""A context rank that sends one prompt's KV at a time (TensorRT-LLM's cache transceiver).

Prompts that leave one context pass together reach their decode workers one send after another;
prompts of different context ranks do not wait for each other.
"""

import dataclasses

import pytest

from aisimulate.catalog import backends, get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.transfer import KvSenders, KvTransfer, kv_transfer
from aisimulate.workload import SyntheticWorkload


def test_a_serial_sender_queues_its_ranks_sends_after_the_hops():
    senders = KvSenders(KvTransfer(latency_ms=20, gbps=10, send_ms=5, serial=True))
    one_send_ms = 5 + 1e6 / (10 * 1e6)  # 5.1 ms
    assert senders.ms(100.0, 1e6, source=1) == pytest.approx(20 + one_send_ms)
    # Same rank, same instant: it starts when the first one ends.
    assert senders.ms(100.0, 1e6, source=1) == pytest.approx(20 + 2 * one_send_ms)
    # Another rank's sender is free.
    assert senders.ms(100.0, 1e6, source=2) == pytest.approx(20 + one_send_ms)
    # Once the rank's sender is idle again, only the hops and the send count.
    assert senders.ms(200.0, 1e6, source=1) == pytest.approx(20 + one_send_ms)


def test_parallel_senders_never_wait():
    senders = KvSenders(KvTransfer(latency_ms=20, gbps=10, send_ms=5))
    first = senders.ms(100.0, 1e6, source=1)
    assert senders.ms(100.0, 1e6, source=1) == first == pytest.approx(25.1)


def disagg(backend="trtllm", **kw):
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        backend=backend,
        mode="disagg",
        prefill=EngineSpec(num_gpu_blocks=16384),
        decode=EngineSpec(num_gpu_blocks=16384),
        **kw,
    )


def test_trtllm_sends_serially_at_its_senders_rate_over_the_systems_links():
    profile = backend_profile("trtllm")
    assert profile.serial_kv_send and profile.kv_send_ms > 0
    link_gbps = get_system("h200_sxm").nvlink_gbps
    assert profile.kv_send_gbps is not None and profile.kv_send_gbps < link_gbps
    assert kv_transfer(disagg()) == KvTransfer(
        latency_ms=profile.kv_handoff_ms, gbps=profile.kv_send_gbps, send_ms=profile.kv_send_ms, serial=True
    )
    # A pinned bandwidth is the plan's word for the rate; a free transfer neither costs nor queues.
    assert kv_transfer(disagg(kv_transfer_bandwidth_gbps=300)).gbps == 300
    free = kv_transfer(disagg(kv_transfer_bandwidth_gbps=0))
    assert free.ms(1e9) == 0 and not free.serial
    # The other backends' sends stay parallel, at the link's rate.
    for name in ("vllm", "sglang"):
        other = kv_transfer(disagg(backend=name))
        assert not other.serial and other.send_ms == 0 and other.gbps == link_gbps


def replay_one_context_worker(prefill, decode_replicas, workload, **profile_fields):
    """The requests of a TRT-LLM replay of one context worker, under a changed backend profile."""
    profile = dataclasses.replace(backend_profile("trtllm"), **profile_fields)
    plan = DeploymentPlan(
        model="Qwen/Qwen3-30B-A3B",
        system="h200_sxm",
        backend="trtllm",
        mode="disagg",
        frontend_latency_ms=0,
        prefill=EngineSpec(**prefill),
        decode=EngineSpec(tp=1, replicas=decode_replicas),
    )
    saved = backends.BACKEND_PROFILES["trtllm"]
    backends.BACKEND_PROFILES["trtllm"] = profile
    try:
        return simulate(plan, workload, perf="analytic", capture_requests=True).requests
    finally:
        backends.BACKEND_PROFILES["trtllm"] = saved


def burst(prefill, *, serial):
    """Four 1k prompts arriving together on one context worker: its pass prefills them together."""
    workload = SyntheticWorkload(isl=1024, osl=8, num_requests=4, concurrency=4)
    requests = replay_one_context_worker(prefill, 4, workload, serial_kv_send=serial)
    return sorted(r["kv_transfer_ms"] for r in requests)


def test_prompts_of_one_context_pass_reach_the_decode_side_one_send_after_another():
    profile = backend_profile("trtllm")
    parallel = burst({"tp": 1}, serial=False)
    one_send_ms = parallel[0] - profile.kv_handoff_ms
    assert one_send_ms > profile.kv_send_ms  # the fixed cost and the prompt's bytes
    assert parallel == pytest.approx([profile.kv_handoff_ms + one_send_ms] * 4)
    serial = burst({"tp": 1}, serial=True)
    assert serial == pytest.approx([profile.kv_handoff_ms + k * one_send_ms for k in (1, 2, 3, 4)])
    # Two attention-DP ranks send for themselves: two prompts each, one after the other.
    two_ranks = burst({"tp": 1, "attention_dp": 2}, serial=True)
    assert two_ranks == pytest.approx([profile.kv_handoff_ms + k * one_send_ms for k in (1, 1, 2, 2)])


def test_a_context_rank_starts_its_next_pass_while_its_sends_queue():
    """TensorRT-LLM's cache transceiver sends on its own thread (``CacheSender`` runs its
    responses apart from the executor loop, which only polls them): a context rank's next pass
    does not wait for the sends its earlier prompts queued."""
    workload = SyntheticWorkload(isl=1024, osl=8, num_requests=2, arrival_interval_ms=1.0)
    first, second = replay_one_context_worker({"tp": 1}, 2, workload, kv_send_ms=500.0)
    # The second prompt waits for the first one's pass only, not for its 500 ms send ...
    assert second["first_admit_ms"] < 100
    # ... while its own send waits for the first one's on the rank's one sender.
    assert second["kv_transfer_ms"] > 2 * 500
    assert first["kv_transfer_ms"] < 600
