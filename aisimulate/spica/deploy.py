"""From a sample to what the replay runs: a deployment plan and the workload to replay on it.

The sample is the single source: everything the replay needs is read from it (and from the
config's workload), so a stored sample replays the same deployment later. Host offload settings go
to the roles that write the prefix cache (aggregated and prefill workers), never to decode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aisimulate.planner.predictors import PredictorSpec
from aisimulate.replay.plan import DeploymentPlan, EngineSpec, RouterSpec, router_spec
from aisimulate.replay.router import ROUTERS
from aisimulate.spica.config import OptimizationGoal, Workload
from aisimulate.spica.knobs import (
    KV_ROUTER_PINS,
    OFFLOAD_FIELDS,
    ROUTER_WEIGHTS,
    FpmSampling,
    LoadSensitivity,
    ScalingPolicy,
)
from aisimulate.workload.mooncake import TraceWorkload
from aisimulate.workload.synthetic import SyntheticWorkload

# Sample keys that are planner config keys of the same name.
PLANNER_SAMPLE_FIELDS = (
    *ScalingPolicy.model_fields,
    *FpmSampling.model_fields,
    *LoadSensitivity.model_fields,
    *PredictorSpec.model_fields,
)


def _engine(sample: Mapping[str, Any], role: str) -> EngineSpec:
    shape = "" if role == "agg" else f"{role}_"
    spec: dict[str, Any] = {
        "tp": sample[f"{shape}tp"],
        "attention_dp": sample[f"{shape}attention_dp"],
        "replicas": sample[f"{shape}replicas"],
        **{k: sample[f"{role}_{k}"] for k in ("max_num_batched_tokens", "max_num_seqs", "block_size")},
        "gpu_memory_utilization": sample[f"{role}_gpu_memory_utilization"],
        "enable_prefix_caching": sample[f"{role}_enable_prefix_caching"],
        "nextn": sample["nextn"],
        "max_model_len": sample["context_length"],
        "startup_time": sample["startup_time"],
    }
    if sample[f"{shape}moe_tp"] * sample[f"{shape}moe_ep"] > 1:
        spec.update(moe_tp=sample[f"{shape}moe_tp"], moe_ep=sample[f"{shape}moe_ep"])
    if role != "decode" and sample["num_g2_blocks"]:
        spec.update({k: sample[k] for k in OFFLOAD_FIELDS if sample[k] is not None})
    return EngineSpec(**spec)


def _router(sample: Mapping[str, Any]) -> RouterSpec:
    """The sample's router mode with the router knobs and pins that mode takes."""
    mode = sample.get("router_mode", "round_robin")
    # no_admission_control only forbids thresholds, which the config already enforced.
    settings = ROUTERS[mode].spec.model_fields
    fields = (name for name in (*ROUTER_WEIGHTS, *KV_ROUTER_PINS) if name in settings)
    return router_spec({"mode": mode, **{k: sample[k] for k in fields if sample.get(k) is not None}})


def _planner(sample: Mapping[str, Any], goal: OptimizationGoal) -> dict[str, Any]:
    """The planner block of a scaling sample: its policy fields, the goal's target and SLA, and
    the search's GPU budget (the planner may grow the fleet up to it)."""
    planner: dict[str, Any] = {
        name: sample[name] for name in PLANNER_SAMPLE_FIELDS if sample.get(name) is not None
    }
    planner["optimization_target"] = goal.planner_target
    if goal.planner_target == "sla" and goal.sla is not None:
        if goal.sla.ttft_ms is None or goal.sla.itl_ms is None:
            raise ValueError("a planner that targets the SLA needs both ttft_ms and itl_ms in goal.sla")
        planner.update(ttft_ms=goal.sla.ttft_ms, itl_ms=goal.sla.itl_ms)
    for field, key in (("max_gpu_budget", "gpu_budget"), ("min_gpu_budget", "min_gpu_budget")):
        if sample.get(key) is not None:
            planner[field] = sample[key]
    if sample.get("min_endpoint") is not None:
        planner["min_endpoint"] = sample["min_endpoint"]
    return planner


def deployment_plan(sample: Mapping[str, Any], goal: OptimizationGoal | None = None) -> DeploymentPlan:
    """The replay's deployment for a sample; a sample whose planner scales needs the ``goal``
    (the planner targets its SLA)."""
    scaling = sample["enable_throughput_scaling"] or sample["enable_load_scaling"]
    if scaling and goal is None:
        raise ValueError("a sample whose planner scales needs the optimization goal")
    mode = sample["deployment_mode"]
    roles = ("prefill", "decode") if mode == "disagg" else ("agg",)
    return DeploymentPlan(
        mode=mode,
        backend=sample["backend"],
        model=sample["model_name"],
        system=sample["hardware_sku"],
        router=_router(sample),
        planner=_planner(sample, goal) if scaling and goal is not None else None,
        **{role: _engine(sample, role) for role in roles},
    )


def replay_workload(workload: Workload, concurrency: int | None = None) -> SyntheticWorkload | TraceWorkload:
    """The workload a candidate replays; ``concurrency`` is its KV-load concurrency, if any."""
    if workload.is_trace:
        assert workload.trace_path is not None
        return TraceWorkload(
            trace_path=workload.trace_path,
            arrival_speedup_ratio=workload.arrival_speedup_ratio,
            replay_concurrency=workload.replay_concurrency,
        )
    assert workload.isl is not None and workload.osl is not None
    closed = workload.max_num_inflight(concurrency)
    return SyntheticWorkload(
        isl=workload.isl,
        osl=workload.osl,
        num_requests=workload.num_requests(concurrency),
        concurrency=closed,
        request_rate=None if closed is not None else workload.request_rate,
        arrival=workload.arrival,
        turns_per_session=workload.turns_per_session,
        inter_turn_delay_ms=workload.inter_turn_delay_ms,
        shared_prefix_ratio=workload.shared_prefix_ratio,
        num_prefix_groups=workload.num_prefix_groups,
    )
