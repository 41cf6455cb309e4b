"""Branches of a search: one per deployment mode, with its legal layouts and its searched knobs.

A branch's pool is every legal layout (or the pinned ones) that passes the KV filter for at least
one configured backend, each tagged with the backends it passed for. Knobs are gated so the
optimizer never spends trials on a setting nothing reads: router sub-knobs only when ``kv_router``
is among the router modes (host/disk hit weights only with host offload), planner sub-knobs only
when some scaling policy scales. Planner policies the goal cannot use are dropped up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aisimulate.catalog import ModelSpec, System
from aisimulate.errors import ConfigError
from aisimulate.spica.config import OptimizationGoal, SearchSpace, SmartSearchConfig
from aisimulate.spica.knobs import (
    ROUTER_WEIGHTS,
    SCALING_POLICY_PRESETS,
    TIER_WEIGHTS,
    NumericRange,
    ScalingPolicy,
    expand,
)
from aisimulate.spica.parallel import (
    DisaggConfig,
    ReplicaConfig,
    WorkerShape,
    disagg_pairs,
    kv_tokens_per_rank,
    replica_configs,
    shapes_of,
)
from aisimulate.spica.projection import PoolEntry

_ENGINE_KNOBS = {
    "agg": ("agg_max_num_batched_tokens", "agg_max_num_seqs"),
    "disagg": (
        "prefill_max_num_batched_tokens",
        "prefill_max_num_seqs",
        "decode_max_num_batched_tokens",
        "decode_max_num_seqs",
    ),
}


@dataclass(frozen=True)
class Branch:
    deployment_mode: str
    pool: tuple[PoolEntry, ...]
    pool_size_before_kv: int
    backends: tuple[str, ...]
    knobs: dict[str, tuple[Any, ...] | NumericRange]  # searched knob -> choices or a range
    gpu_budget: int


@dataclass(frozen=True)
class SearchPlan:
    branches: tuple[Branch, ...]
    dropped_policies: tuple[Any, ...]  # planner_scaling_policy entries as written
    warnings: tuple[str, ...] = field(default=())


def _scales(entry: str | ScalingPolicy) -> ScalingPolicy:
    return expand(entry, SCALING_POLICY_PRESETS)


def filter_scaling_policies(space: SearchSpace, goal: OptimizationGoal) -> tuple[list[Any], list[Any]]:
    """(kept, dropped) planner policies. Throughput scaling sizes the fleet for the SLA, so it is
    dropped unless the planner targets the SLA; an SLA with only an end-to-end bound cannot seed
    the planner's per-token targets, so then every scaling policy goes."""
    policies = list(space.planner_scaling_policy)
    if goal.planner_target != "sla":
        kept = [p for p in policies if not _scales(p).enable_throughput_scaling]
        if not kept:
            raise ConfigError(
                "every planner_scaling_policy enables throughput scaling, which needs a goodput goal "
                "with an SLA",
                where="search_space.planner_scaling_policy",
            )
    elif goal.sla is None or goal.sla.ttft_ms is None or goal.sla.itl_ms is None:
        kept = [p for p in policies if not _scales(p).enabled]
        if not kept:
            raise ConfigError(
                "an e2e-only SLA cannot seed the planner: keep a policy without scaling (disabled)",
                where="search_space.planner_scaling_policy",
            )
    else:
        kept = policies
    return kept, [p for p in policies if p not in kept]


def branch_knobs(space: SearchSpace, mode: str, policies: Sequence[Any]) -> dict[str, Any]:
    """Searched knobs of a branch, in order: router, planner, engine."""
    knobs: dict[str, Any] = {"router_mode": tuple(space.router_mode)}
    if "kv_router" in space.router_mode:
        offload = space.num_g2_blocks > 0
        knobs.update({n: getattr(space, n) for n in ROUTER_WEIGHTS if offload or n not in TIER_WEIGHTS})
    knobs["planner_scaling_policy"] = tuple(policies)
    if any(_scales(p).enabled for p in policies):
        knobs["planner_fpm_sampling"] = tuple(space.planner_fpm_sampling)
        knobs["planner_load_sensitivity"] = tuple(space.planner_load_sensitivity)
    for name in _ENGINE_KNOBS[mode]:
        value = getattr(space, name)
        knobs[name] = value if isinstance(value, NumericRange) else tuple(value)
    return knobs


def _viable_shapes(
    space: SearchSpace, model: ModelSpec, system: System, backend: str, role: str, shapes: list[WorkerShape]
) -> set[WorkerShape]:
    max_seq_len = space.context_length or model.max_context_tokens
    utilization = getattr(space, f"{role}_gpu_memory_utilization")
    return set(
        kv_tokens_per_rank(
            shapes,
            model,
            system,
            backend=backend,
            max_seq_len=max_seq_len,
            gpu_memory_utilization=utilization,
        )
    )


def _runs(config: ReplicaConfig | DisaggConfig, viable: dict[str, set[WorkerShape]]) -> bool:
    if isinstance(config, DisaggConfig):
        return config.prefill.shape in viable["prefill"] and config.decode.shape in viable["decode"]
    return config.shape in viable["agg"]


def enumerate_branches(config: SmartSearchConfig) -> SearchPlan:
    """Every viable branch; a mode nothing can run is skipped with a warning, and it is an error
    only when no mode (or a pinned layout) can run."""
    space = config.search_space
    model, system = space.resolve_model(), space.resolve_system()
    kept, dropped = filter_scaling_policies(space, config.goal)
    branches, notes = [], []
    for mode in space.deployment_mode:
        pins = [pin.config for pin in space.parallel_configs]
        build = disagg_pairs if mode == "disagg" else replica_configs
        configs = pins or build(
            moe=model.is_moe, gpu_budget=space.gpu_budget, min_gpu_budget=space.min_gpu_budget
        )
        roles = ("prefill", "decode") if mode == "disagg" else ("agg",)
        backends_of: dict[ReplicaConfig | DisaggConfig, set[str]] = {c: set() for c in configs}
        shapes = shapes_of(configs)
        for backend in space.backend:
            viable = {role: _viable_shapes(space, model, system, backend, role, shapes) for role in roles}
            for c in configs:
                if _runs(c, viable):
                    backends_of[c].add(backend)
        if pins and not all(backends_of[c] for c in pins):
            raise ConfigError(
                "a pinned parallel_config is legal/KV-feasible for no configured backend",
                where="search_space.parallel_configs",
            )
        pool = tuple(PoolEntry(c, frozenset(b)) for c, b in backends_of.items() if b)
        if not pool:
            notes.append(
                f"deployment_mode={mode!r} skipped: no layout within {space.gpu_budget} GPUs holds one "
                f"{space.context_length or model.max_context_tokens}-token sequence on {system.name}"
            )
            continue
        backends = tuple(b for b in space.backend if any(b in e.backends for e in pool))
        knobs = {**branch_knobs(space, mode, kept), "backend": backends}
        ratio = config.workload.kv_load_ratio
        if ratio is not None:
            knobs["kv_load_ratio"] = (
                NumericRange[float](low=ratio[0], high=ratio[1]) if isinstance(ratio, tuple) else (ratio,)
            )
        branches.append(Branch(mode, pool, len(configs), backends, knobs, space.gpu_budget))
    if not branches:
        raise ConfigError(
            "no deployment_mode has a viable parallel config: " + "; ".join(notes),
            where="search_space.deployment_mode",
        )
    return SearchPlan(tuple(branches), tuple(dropped), tuple(notes))
