"""Decode pools under KV pressure, planned as stepping runs them; a lone rank whose pass finds no
blocks is stepped without a plan tried first; a pool's ranks bind each pass price once."""

from collections import Counter

import pytest

from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.workers import Worker
from aisimulate.workload import SyntheticWorkload
from tests.replay.conftest import assert_matches_exact


def stepped(monkeypatch):
    """Workers that never plan passes ahead: every pass of every rank stepped."""
    monkeypatch.setattr(Worker, "_plan", lambda self, now_ms, until_ms: None)


def pressed_disagg(**decode):
    """One prefill and one decode worker whose pool holds a fraction of the running requests'
    KV: most decode passes near the pool's limit preempt."""
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        mode="disagg",
        prefill=EngineSpec(),
        decode=EngineSpec(**{"num_gpu_blocks": 300, **decode}),
        frontend_latency_ms=0,
    )


def pressed_attention_dp(blocks=150):
    """A decode worker of four attention-DP ranks under KV pressure: each rank preempts now
    and then while the others decode on."""
    return DeploymentPlan(
        model="Qwen/Qwen3-30B-A3B",
        system="h200_sxm",
        mode="disagg",
        prefill=EngineSpec(tp=2),
        decode=EngineSpec(tp=1, attention_dp=4, moe_ep=4, num_gpu_blocks=blocks),
        frontend_latency_ms=0,
    )


WORKLOAD = SyntheticWorkload(isl=600, osl=300, num_requests=256, concurrency=64)
DP_WORKLOAD = SyntheticWorkload(isl=600, osl=300, num_requests=512, concurrency=128)


def assert_same(fast, step):
    # Every request's record is the stepped one; token-gap means may move in the last bit
    # (the same gaps recorded in another order).
    for key, value in step.summary.items():
        if isinstance(value, int | float) and key != "wall_time_ms":
            assert fast.summary[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    assert fast.requests == step.requests


@pytest.mark.parametrize("blocks", [150, 100])
def test_an_attention_dp_pool_under_kv_pressure_plans_what_stepping_runs(monkeypatch, blocks):
    plan = pressed_attention_dp(blocks)
    fast = simulate(plan, DP_WORKLOAD, perf="polynomial", capture_requests=True)
    assert fast.summary["preemptions"] > 100
    stepped(monkeypatch)
    assert_same(fast, simulate(plan, DP_WORKLOAD, perf="polynomial", capture_requests=True))


@pytest.mark.parametrize("decode", [{}, {"nextn": 2}, {"num_gpu_blocks": 150}])
def test_a_lone_decode_rank_under_kv_pressure_plans_what_stepping_runs(monkeypatch, decode):
    plan = pressed_disagg(**decode)
    fast = simulate(plan, WORKLOAD, perf="polynomial", capture_requests=True)
    assert fast.summary["preemptions"] > 50
    stepped(monkeypatch)
    assert_same(fast, simulate(plan, WORKLOAD, perf="polynomial", capture_requests=True))


def test_an_aggregated_pool_under_kv_pressure_plans_what_stepping_runs(monkeypatch):
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg=EngineSpec(num_gpu_blocks=400),
        frontend_latency_ms=0,
    )
    fast = simulate(plan, WORKLOAD, perf="polynomial", capture_requests=True)
    assert fast.summary["preemptions"] > 50
    stepped(monkeypatch)
    assert_same(fast, simulate(plan, WORKLOAD, perf="polynomial", capture_requests=True))


@pytest.mark.parametrize("plan", [pressed_disagg(), pressed_attention_dp()])
def test_a_decode_pool_under_kv_pressure_matches_the_exact_loop(plan):
    fast = simulate(plan, DP_WORKLOAD, perf="polynomial").summary
    exact = simulate(plan, DP_WORKLOAD, perf="polynomial", exact=True).summary
    assert exact["preemptions"] > 50
    assert_matches_exact(fast, exact)


def test_a_lone_rank_out_of_blocks_is_stepped_without_a_plan_tried_first(monkeypatch):
    # Its next pass preempts: no run can be planned from it, and trying costs a readiness check
    # and a pricing attempt on every such pass.
    failed = [0]
    plan_window = Worker._plan

    def counted(self, now_ms, until_ms):
        planned = plan_window(self, now_ms, until_ms)
        failed[0] += planned is None and self.ranks[0].role == "decode"
        return planned

    monkeypatch.setattr(Worker, "_plan", counted)
    report = simulate(pressed_disagg(), WORKLOAD, perf="polynomial")
    preemptions = report.summary["preemptions"]
    # (Trying first: 183 failed plans for 129 preemptions; 21 now.)
    assert preemptions > 50 and failed[0] < preemptions // 2


@pytest.mark.parametrize(
    "plan", [pressed_disagg(num_gpu_blocks=2000, replicas=3), pressed_attention_dp(2000)]
)
def test_the_ranks_of_a_pool_bind_each_batch_size_price_once(monkeypatch, plan):
    # Three decode workers, or four attention-DP ranks of one: one perf model, tokens per step
    # and capacity, so each batch size's price is bound once for the pool.
    bound: Counter[int] = Counter()
    decode_pricer = PolynomialPerfModel.decode_pricer

    def counted(self, decode_requests, tokens_per_step, kv_capacity_tokens):
        bound[decode_requests] += 1
        return decode_pricer(self, decode_requests, tokens_per_step, kv_capacity_tokens)

    monkeypatch.setattr(PolynomialPerfModel, "decode_pricer", counted)
    simulate(plan, WORKLOAD, perf="polynomial")
    assert len(bound) > 10 and set(bound.values()) == {1}
