"""From a sample to what the replay runs: a deployment plan and the workload to replay on it.

The sample is the single source: everything the replay needs is read from it (and from the
config's workload), so a stored sample replays the same deployment later. Host offload settings go
to the roles that write the prefix cache (aggregated and prefill workers), never to decode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aisimulate.errors import ConfigError
from aisimulate.replay.plan import DeploymentPlan, EngineSpec, RouterSpec
from aisimulate.spica.config import Workload
from aisimulate.spica.knobs import ADMISSION_FIELDS, OFFLOAD_FIELDS, ROUTER_WEIGHTS
from aisimulate.workload.mooncake import TraceWorkload
from aisimulate.workload.synthetic import SyntheticWorkload


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
    mode = sample.get("router_mode", "round_robin")
    if mode != "kv_router":
        return RouterSpec(mode=mode)
    # no_admission_control only forbids thresholds, which the config already enforced.
    fields = (name for name in (*ROUTER_WEIGHTS, *ADMISSION_FIELDS) if name in RouterSpec.model_fields)
    return RouterSpec(mode=mode, **{k: sample[k] for k in fields if sample.get(k) is not None})


def deployment_plan(sample: Mapping[str, Any]) -> DeploymentPlan:
    """The replay's deployment for a sample. A sample whose planner scales cannot be replayed
    yet: the planner loop is not part of the replay, and a static replay would misreport it."""
    if sample["enable_throughput_scaling"] or sample["enable_load_scaling"]:
        raise ConfigError(
            "planner scaling cannot be replayed yet (the planner loop is not built); "
            "use planner_scaling_policy: [disabled]",
            where="search_space.planner_scaling_policy",
        )
    mode = sample["deployment_mode"]
    roles = ("prefill", "decode") if mode == "disagg" else ("agg",)
    return DeploymentPlan(
        mode=mode,
        backend=sample["backend"],
        model=sample["model_name"],
        system=sample["hardware_sku"],
        router=_router(sample),
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
