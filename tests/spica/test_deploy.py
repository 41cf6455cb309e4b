"""From a sample to a replayable deployment and workload, end to end."""

import json

import pytest

from aisimulate.perf.calibration import e2e_frontend_latency_ms
from aisimulate.planner import PlannerConfig
from aisimulate.replay import SLA, simulate
from aisimulate.spica.config import OptimizationGoal, SmartSearchConfig
from aisimulate.spica.deploy import deployment_plan, replay_workload
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape
from aisimulate.spica.sample import unroll_sample
from tests.spica.test_sample import AGG_SELECTION, CONFIG, DISAGG_SELECTION, SPACE

AGG = ReplicaConfig(WorkerShape(tp=4), 2)
DISAGG = DisaggConfig(ReplicaConfig(WorkerShape(tp=2), 1), ReplicaConfig(WorkerShape(tp=4), 1))


def test_agg_sample_replays():
    sample = unroll_sample(SPACE, AGG_SELECTION, AGG)
    plan = deployment_plan(sample)
    assert (plan.mode, plan.backend, plan.agg.tp, plan.agg.replicas, plan.router.mode) == (
        "agg",
        "vllm",
        4,
        2,
        "round_robin",
    )
    assert plan.agg.max_model_len == 8192 and plan.agg.num_g2_blocks is None
    workload = replay_workload(CONFIG.workload)
    assert (workload.concurrency, workload.num_requests, workload.isl) == (16, 64, 2048)
    report = simulate(plan, workload, perf="polynomial")
    assert report.summary["completed_requests"] == 64
    # A candidate replays with its backend's calibrated frontend latency, as a user's replay does.
    assert plan.frontend_latency_ms is None
    assert report.config["plan"]["frontend_latency_ms"] == e2e_frontend_latency_ms("vllm") > 0


def test_disagg_sample_with_kv_router_replays():
    selection = {**DISAGG_SELECTION, "planner_scaling_policy": "disabled"}
    plan = deployment_plan(unroll_sample(SPACE, selection, DISAGG))
    assert (plan.prefill.tp, plan.decode.tp, plan.backend) == (2, 4, "sglang")
    assert plan.router.mode == "kv_router" and plan.router.overlap_score_credit == 0.5
    assert plan.router.router_queue_threshold == 2.0 and plan.router.router_temperature == 0.2
    assert plan.router.use_kv_events and plan.router.router_ttl_secs == 120.0
    report = simulate(plan, replay_workload(CONFIG.workload), perf="polynomial")
    assert report.summary["completed_requests"] == 64
    assert report.config["plan"]["frontend_latency_ms"] == e2e_frontend_latency_ms("sglang") > 0


def test_a_router_without_kv_events_deploys_and_replays():
    space = SPACE.model_copy(update={"use_kv_events": False, "router_ttl_secs": 30.0})
    selection = {**DISAGG_SELECTION, "planner_scaling_policy": "disabled"}
    plan = deployment_plan(unroll_sample(space, selection, DISAGG))
    assert not plan.router.use_kv_events and plan.router.router_ttl_secs == 30.0
    report = simulate(plan, replay_workload(CONFIG.workload), perf="polynomial")
    assert report.summary["completed_requests"] == 64


def test_moe_split_and_offload_reach_the_right_roles():
    data = json.loads(CONFIG.model_dump_json(exclude_defaults=True))
    data["search_space"].update(
        model_name="Qwen/Qwen3-30B-A3B",
        num_g2_blocks=5000,
        kv_bytes_per_token=98304,
        deployment_mode=["disagg"],
    )
    space = SmartSearchConfig.from_mapping(data).search_space
    moe = DisaggConfig(
        ReplicaConfig(WorkerShape(tp=2, moe_ep=2), 1), ReplicaConfig(WorkerShape(attention_dp=2, moe_ep=2), 1)
    )
    plan = deployment_plan(
        unroll_sample(space, {**DISAGG_SELECTION, "planner_scaling_policy": "disabled"}, moe)
    )
    assert (plan.prefill.moe_tp, plan.prefill.moe_ep, plan.decode.attention_dp) == (1, 2, 2)
    assert plan.prefill.num_g2_blocks == 5000 and plan.prefill.kv_bytes_per_token == 98304
    assert plan.decode.num_g2_blocks is None


def test_planner_samples_carry_the_policy_goal_and_budget():
    sample = unroll_sample(SPACE, DISAGG_SELECTION, DISAGG)
    with pytest.raises(ValueError, match="needs the optimization goal"):
        deployment_plan(sample)
    goal = OptimizationGoal(target="goodput_per_gpu", sla={"ttft_ms": 800, "itl_ms": 40})
    planner = deployment_plan(sample, goal).planner
    assert planner is not None
    assert planner.enable_load_scaling == sample["enable_load_scaling"]
    assert planner.load_adjustment_interval_seconds == sample["load_adjustment_interval_seconds"]
    assert planner.fpm_sample_bucket_size == sample["fpm_sample_bucket_size"]
    assert (planner.optimization_target, planner.ttft_ms, planner.itl_ms) == ("sla", 800, 40)
    assert planner.max_gpu_budget == sample["gpu_budget"]


def test_planner_sla_needs_ttft_and_itl_and_non_sla_targets_take_none():
    sample = unroll_sample(SPACE, DISAGG_SELECTION, DISAGG)
    e2e_only = OptimizationGoal.model_construct(target="goodput", sla=SLA(e2e_ms=5000))
    with pytest.raises(ValueError, match="ttft_ms and itl_ms"):
        deployment_plan(sample, e2e_only)
    load_only = {**sample, "enable_throughput_scaling": False}
    planner = deployment_plan(load_only, OptimizationGoal(target="throughput")).planner
    assert planner is not None and planner.optimization_target == "throughput"
    assert planner.ttft_ms == PlannerConfig().ttft_ms  # the planner's own default, not the goal's


def test_static_samples_have_no_planner():
    sample = unroll_sample(SPACE, {**DISAGG_SELECTION, "planner_scaling_policy": "disabled"}, DISAGG)
    assert deployment_plan(sample).planner is None


def test_kv_load_and_rate_workloads():
    data = json.loads(CONFIG.model_dump_json(exclude_defaults=True))
    data["workload"] = {"isl": 1000, "osl": 100, "kv_load_ratio": 0.5, "num_request_ratio": 3}
    loaded = SmartSearchConfig.from_mapping(data).workload
    workload = replay_workload(loaded, concurrency=40)
    assert (workload.concurrency, workload.num_requests) == (40, 120)
    data["workload"] = {"isl": 1000, "osl": 100, "request_rate": 5, "num_request_ratio": 10}
    rate = replay_workload(SmartSearchConfig.from_mapping(data).workload)
    assert (rate.request_rate, rate.concurrency, rate.num_requests, rate.arrival) == (5, None, 50, "constant")
