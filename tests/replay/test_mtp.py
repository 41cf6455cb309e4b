"""Speculative decoding (MTP): seeded bursts, token accounting, KV for the whole burst."""

import pytest
from pydantic import ValidationError

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.workload import SyntheticWorkload

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
