"""Speculative decoding (MTP): seeded bursts, token accounting, KV for the whole burst."""

import pytest
from pydantic import ValidationError

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.workers import resolve_engine
from aisimulate.workload import SyntheticWorkload
from tests.replay.conftest import assert_matches_exact

WORKLOAD = SyntheticWorkload(isl=512, osl=400, num_requests=40, concurrency=8)


def run(nextn, rates=None, seed=42, workload=WORKLOAD, **engine):
    spec = EngineSpec(num_gpu_blocks=4000, nextn=nextn, nextn_accept_rates=rates, mtp_seed=seed, **engine)
    plan = DeploymentPlan(
        model="deepseek-ai/DeepSeek-V3",
        system="h200_sxm",
        backend="vllm",
        agg=EngineSpec(tp=8, moe_ep=8, **spec.model_dump(exclude={"tp", "moe_ep"})),
    )
    return simulate(plan, workload, perf="polynomial", capture_requests=True)


@pytest.mark.parametrize(
    ("nextn", "rates", "expected"),
    [(1, None, 1.85), (2, None, 1 + 0.85 + 0.85 * 0.3), (3, [1.0, 1.0, 0.5], 3.5)],
)
def test_tokens_per_step_follow_the_conditional_acceptance(nextn, rates, expected):
    s = run(nextn, rates).summary
    assert s["mean_tokens_per_step"] == pytest.approx(expected, rel=0.03)


def test_every_request_still_gets_exactly_its_output():
    rep = run(2)
    assert rep.summary["total_output_tokens"] == 40 * 400
    assert all(r["output_length"] == 400 for r in rep.requests)


def test_burst_tokens_share_the_pass_end():
    s = run(2).summary
    assert s["min_itl_ms"] == 0.0
    plain = run(0).summary
    assert "mean_tokens_per_step" not in plain and plain["min_itl_ms"] > 0
    assert s["mean_tpot_ms"] < plain["mean_tpot_ms"]


def test_bursts_are_seeded():
    assert run(2, seed=1).summary["mean_tokens_per_step"] == run(2, seed=1).summary["mean_tokens_per_step"]
    assert run(2, seed=1).summary["mean_tokens_per_step"] != run(2, seed=2).summary["mean_tokens_per_step"]


def test_mtp_recomputes_one_more_cached_block():
    workload = SyntheticWorkload(
        isl=1024, osl=4, num_requests=2, concurrency=1, shared_prefix_ratio=1.0, num_prefix_groups=1
    )
    plain = run(0, workload=workload).requests[1]["reused_input_tokens"]
    mtp = run(1, workload=workload).requests[1]["reused_input_tokens"]
    assert plain == 960 and mtp == 896


@pytest.mark.parametrize(
    ("kw", "match"), [({"nextn": 6}, "nextn"), ({"nextn": 1, "nextn_accept_rates": [1.5]}, "[0, 1]")]
)
def test_bad_mtp_settings(kw, match):
    with pytest.raises(ValidationError, match=match):
        EngineSpec(**kw)


MTP_SCENARIOS = {
    "vllm": dict(backend="vllm"),
    "sglang": dict(backend="sglang"),
    "trtllm": dict(backend="trtllm", num_gpu_blocks=1500),
    "kv_pressure": dict(backend="vllm", num_gpu_blocks=220),
}


@pytest.mark.parametrize("name", MTP_SCENARIOS)
def test_mtp_fast_path_matches_the_exact_loop(name):
    """Bursts are drawn per request when it starts decoding, so both paths see the same ones."""
    kw = MTP_SCENARIOS[name]
    workload = SyntheticWorkload(isl=700, osl=300, num_requests=60, concurrency=20)
    fast = run_mtp(workload, exact=False, **kw).summary
    exact = run_mtp(workload, exact=True, **kw).summary
    assert fast["mean_tokens_per_step"] > 1.5
    assert_matches_exact(fast, exact)
    if name == "kv_pressure":
        assert fast["preemptions"] > 0


def test_mtp_fast_path_matches_exact_in_disagg():
    engine = dict(num_gpu_blocks=16384, nextn=2)
    p = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        mode="disagg",
        prefill=EngineSpec(replicas=2, **engine),
        decode=EngineSpec(replicas=2, **{**engine, "num_gpu_blocks": 600}),
        kv_transfer_bandwidth_gbps=0,
    )
    workload = SyntheticWorkload(isl=900, osl=300, num_requests=90, concurrency=30)
    fast = simulate(p, workload, perf="polynomial").summary
    exact = simulate(p, workload, perf="polynomial", exact=True).summary
    assert fast["mean_tokens_per_step"] > 1.5
    assert_matches_exact(fast, exact)


def test_sglang_decodes_speculative_bursts():
    workload = SyntheticWorkload(isl=700, osl=300, num_requests=40, concurrency=8)
    plain = run_mtp(workload, backend="sglang", nextn=0).summary
    mtp = run_mtp(workload, backend="sglang").summary
    assert mtp["mean_tokens_per_step"] == pytest.approx(1 + 0.85 + 0.85 * 0.3, rel=0.03)
    assert mtp["total_output_tokens"] == plain["total_output_tokens"] == 40 * 300
    assert mtp["mean_tpot_ms"] < plain["mean_tpot_ms"]


def run_mtp(workload, *, backend, exact=False, nextn=2, **engine):
    engine.setdefault("num_gpu_blocks", 16384)
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        backend=backend,
        agg=EngineSpec(nextn=nextn, **engine),
    )
    return simulate(plan, workload, perf="polynomial", exact=exact)


def test_a_model_with_documented_acceptance_replays_at_it_unless_the_plan_sets_rates():
    def tokens_per_step(model, rates=None):
        plan = DeploymentPlan(
            model=model,
            system="h200_sxm",
            backend="vllm",
            agg=EngineSpec(tp=8, moe_ep=8, num_gpu_blocks=4000, nextn=3, nextn_accept_rates=rates),
        )
        return resolve_engine(
            plan, plan.agg, perf="polynomial", perf_table=None, where="agg"
        ).spec.mean_tokens_per_step

    # DeepSeek-R1 documents 2.82 tokens a step at 3 drafts (its catalog entry); V3 documents none.
    assert tokens_per_step("deepseek-ai/DeepSeek-R1") == pytest.approx(2.82)
    assert tokens_per_step("deepseek-ai/DeepSeek-V3") == pytest.approx(1 + 0.85 + 0.85 * 0.3)
    assert tokens_per_step("deepseek-ai/DeepSeek-R1", [1.0, 0.5, 0.0]) == pytest.approx(2.5)
