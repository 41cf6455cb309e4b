"""The unrolled sample: one candidate as a flat, self-contained dict.

A trial's sample is what gets stored, compared, deduplicated and shown, so it holds every value
that defines the deployment (pinned ones included) and nothing that does not apply: router
sub-knobs only under ``kv_router``, planner details only when a policy scales, forecaster fields
only for throughput scaling. Absent means "does not apply", never "unknown".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aisimulate.catalog import ModelSpec, System
from aisimulate.planner.predictors import PredictorSpec
from aisimulate.spica.config import SearchSpace
from aisimulate.spica.knobs import (
    FPM_SAMPLING_PRESETS,
    KV_ROUTER_PINS,
    LOAD_SENSITIVITY_PRESETS,
    OFFLOAD_FIELDS,
    ROUTER_WEIGHTS,
    SCALING_POLICY_PRESETS,
    expand,
)
from aisimulate.spica.kv_load import KvLoad, RoleBatching, kv_load, kv_tokens_of, role_capacity_tokens
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape

_PINNED = (
    "model_name",
    "hardware_sku",
    "gpu_budget",
    "min_gpu_budget",
    "min_endpoint",
    "context_length",
    "startup_time",
    "nextn",
)


def _parallel(prefix: str, config: ReplicaConfig) -> dict[str, Any]:
    shape = config.shape
    return {
        f"{prefix}tp": shape.tp,
        f"{prefix}pp": 1,
        f"{prefix}attention_dp": shape.attention_dp,
        f"{prefix}moe_tp": shape.moe_tp,
        f"{prefix}moe_ep": shape.moe_ep,
        f"{prefix}strategy": shape.strategy,
        f"{prefix}replicas": config.replicas,
    }


def _roles(mode: str) -> tuple[str, ...]:
    return ("prefill", "decode") if mode == "disagg" else ("agg",)


def unroll_sample(
    space: SearchSpace,
    selection: Mapping[str, Any],
    config: ReplicaConfig | DisaggConfig,
    load_predictor: PredictorSpec | None = None,
) -> dict[str, Any]:
    """The flat sample of a selection (knob -> chosen value) on a projected layout.

    ``load_predictor`` is the forecaster chosen for the policy's throughput interval, if any.
    A selection missing a knob raises KeyError; a layout of the wrong mode raises TypeError."""
    mode = selection["deployment_mode"]
    if (mode == "disagg") != isinstance(config, DisaggConfig):
        raise TypeError(f"a {mode} sample needs a {'DisaggConfig' if mode == 'disagg' else 'ReplicaConfig'}")
    sample: dict[str, Any] = {"deployment_mode": mode, "backend": selection["backend"]}
    sample.update({name: getattr(space, name) for name in (*_PINNED, *OFFLOAD_FIELDS)})
    if isinstance(config, DisaggConfig):
        sample.update(_parallel("prefill_", config.prefill))
        sample.update(_parallel("decode_", config.decode))
    else:
        sample.update(_parallel("", config))
    sample["used_gpus"] = config.total_gpus
    for role in _roles(mode):
        for knob in ("max_num_batched_tokens", "max_num_seqs"):
            sample[f"{role}_{knob}"] = selection[f"{role}_{knob}"]
        for pinned in ("block_size", "gpu_memory_utilization", "enable_prefix_caching"):
            sample[f"{role}_{pinned}"] = getattr(space, f"{role}_{pinned}")
    sample["router_mode"] = selection["router_mode"]
    if selection["router_mode"] == "kv_router":
        sample.update({name: selection[name] for name in ROUTER_WEIGHTS if name in selection})
        sample.update({name: getattr(space, name) for name in KV_ROUTER_PINS})
    entry = selection["planner_scaling_policy"]
    policy = expand(entry, SCALING_POLICY_PRESETS)
    sample["planner_scaling_policy"] = entry.model_dump() if not isinstance(entry, str) else entry
    sample["enable_throughput_scaling"] = policy.enable_throughput_scaling
    sample["enable_load_scaling"] = policy.enable_load_scaling
    if policy.enabled:
        fpm = expand(selection["planner_fpm_sampling"], FPM_SAMPLING_PRESETS)
        sensitivity = expand(selection["planner_load_sensitivity"], LOAD_SENSITIVITY_PRESETS)
        sample.update(
            throughput_adjustment_interval_seconds=policy.throughput_adjustment_interval_seconds,
            load_adjustment_interval_seconds=policy.load_adjustment_interval_seconds,
            **fpm.model_dump(),
            **sensitivity.model_dump(),
        )
    if policy.enable_throughput_scaling and load_predictor is not None:
        sample.update(load_predictor.fields())
    return sample


def kv_load_fields(
    sample: Mapping[str, Any],
    ratio: float,
    model: ModelSpec,
    system: System,
    *,
    isl: int,
    osl: int,
) -> dict[str, Any]:
    """The KV-load fields of a sample, sized from its own batching values (a bigger token
    budget takes activation memory from the KV cache, so it lowers the concurrency)."""
    mode = sample["deployment_mode"]
    capacity = {}
    for role in _roles(mode):
        prefix = "" if mode == "agg" else f"{role}_"
        config = ReplicaConfig(_shape(sample, prefix), sample[f"{prefix}replicas"])
        batching = RoleBatching(
            block_size=sample[f"{role}_block_size"],
            max_num_batched_tokens=sample[f"{role}_max_num_batched_tokens"],
            max_num_seqs=sample[f"{role}_max_num_seqs"],
            gpu_memory_utilization=sample[f"{role}_gpu_memory_utilization"],
            nextn=sample["nextn"],
        )
        tokens = kv_tokens_of(config, batching, model, system, backend=sample["backend"])
        capacity[role] = role_capacity_tokens(config, tokens, batching.block_size)
    load: KvLoad = kv_load(ratio, capacity, isl=isl, osl=osl)
    load_role = "decode" if mode == "disagg" else "agg"
    return {
        "kv_load_ratio": load.ratio,
        "kv_load_concurrency_capacity": load.concurrency_capacity,
        "kv_load_capacity_tokens": capacity[load_role],
        **{f"{role}_kv_capacity_tokens": tokens for role, tokens in capacity.items()},
        "concurrency": load.concurrency,
    }


def _shape(sample: Mapping[str, Any], prefix: str) -> WorkerShape:
    return WorkerShape(
        tp=sample[f"{prefix}tp"],
        attention_dp=sample[f"{prefix}attention_dp"],
        moe_tp=sample[f"{prefix}moe_tp"],
        moe_ep=sample[f"{prefix}moe_ep"],
    )
