"""GLM-5 (sparse attention) and Qwen3.5 (hybrid linear attention) replayed end to end, and the
recurrent-state slot every running request of a hybrid model holds."""

import itertools

import pytest

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate

from .conftest import burst


def replay(model, workload, *, backend="sglang", perf="analytic", **engine):
    plan = DeploymentPlan(
        model=model,
        system="b200_sxm",
        backend=backend,
        agg=EngineSpec(tp=8, **engine),
        frontend_latency_ms=0,  # engine timings: these tests are about the engine
    )
    return simulate(plan, workload, perf=perf, capture_requests=True)


def max_concurrent(report):
    """Most requests running at once: admitted and not yet finished."""
    events = []
    for r in report.requests:
        events += [(r["first_admit_ms"], 1), (r["last_token_ms"], -1)]
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize("model", ["zai-org/GLM-5-FP8", "Qwen/Qwen3.5-397B-A17B"])
def test_frontier_models_replay_end_to_end(model):
    rep = replay(model, burst(8, 3000, 20))
    assert rep.summary["completed_requests"] == 8
    assert all(r["output_length"] == 20 for r in rep.requests)
    assert rep.summary["output_throughput_tok_s"] > 0


def test_glm5_long_prompts_pay_for_the_indexer_but_not_full_attention():
    # Same worker, same traffic: a longer prompt costs more (indexer, top-k), well under the
    # quadratic growth dense attention would add on top of the linear GEMMs.
    short = replay("zai-org/GLM-5-FP8", burst(1, 8192, 2)).requests[0]["ttft_ms"]
    long = replay("zai-org/GLM-5-FP8", burst(1, 32768, 2)).requests[0]["ttft_ms"]
    assert 4 < long / short < 8


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_a_request_starts_only_with_a_free_state_slot(backend):
    # SGLang with its prefix cache holds 3 slots per running request: 6 slots run 2 requests.
    slots = 6 if backend == "sglang" else 2
    rep = replay("Qwen/Qwen3.5-397B-A17B", burst(6, 1000, 30), backend=backend, max_mamba_cache_size=slots)
    assert max_concurrent(rep) == 2
    assert rep.summary["completed_requests"] == 6  # slots come back at completion
    first_two_done = sorted(r["last_token_ms"] for r in rep.requests)[1]
    later = sorted(r["first_admit_ms"] for r in rep.requests)[2:]
    assert all(t >= first_two_done for t in later)


def test_a_single_slot_serialises_requests():
    rep = replay("Qwen/Qwen3.5-397B-A17B", burst(3, 500, 10), backend="vllm", max_mamba_cache_size=1)
    ordered = sorted(rep.requests, key=lambda r: r["first_admit_ms"])
    for earlier, later in itertools.pairwise(ordered):
        assert later["first_admit_ms"] >= earlier["last_token_ms"]


def test_preemption_gives_the_state_slot_back():
    # 20 blocks of 64 tokens: both 600-token prompts start, then one is preempted to let the
    # other grow; with two state slots the preempted one restarts as soon as it fits again.
    rep = replay(
        "Qwen/Qwen3.5-397B-A17B",
        burst(3, 600, 50),
        backend="vllm",
        perf="polynomial",
        num_gpu_blocks=20,
        max_mamba_cache_size=2,
    )
    assert rep.summary["preemptions"] >= 1
    assert rep.summary["completed_requests"] == 3
    assert max_concurrent(rep) <= 2
