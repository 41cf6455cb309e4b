"""Legal deployments: worker shapes, replica counts within a GPU budget, disaggregated pairs.

The enumeration is the search's whole universe of parallel layouts, so it follows the reference
sweeper's rules exactly (its pinned counts are our tests): ``pp`` is 1; a dense model gets one
shape per GPU count, ``tp = g``; an MoE model at ``g >= 2`` GPUs gets the four pure patterns

* ``tep``: tensor-parallel attention, experts split over GPUs (``tp = g, moe_ep = g``),
* ``dep``: data-parallel attention, experts split over GPUs (``attention_dp = g, moe_ep = g``),
* ``tp``:  tensor-parallel attention, every expert sliced (``tp = g, moe_tp = g``),
* ``dtp``: data-parallel attention, every expert sliced (``attention_dp = g, moe_tp = g``),

the last two only with ``allow_moe_pure_tp``. The reference also scans mixed splits and filters
them per backend; every such rule is subsumed by the pure-pattern filter, so no backend changes
the list. KV feasibility (a rank must hold one max-length sequence) is a separate, model- and
system-specific filter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.errors import InfeasibleError
from aisimulate.perf.memory import estimate_memory
from aisimulate.perf.shape import ParallelShape

Strategy = Literal["tp", "tep", "dep", "dtp"]

# GPUs per worker the search considers.
GPUS_PER_WORKER = (1, 2, 4, 8, 16)


@dataclass(frozen=True, slots=True)
class WorkerShape:
    """How one worker's GPUs split attention and experts."""

    tp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp

    @property
    def strategy(self) -> Strategy | Literal["mixed"]:
        tp, dp, moe_tp, moe_ep = self.tp, self.attention_dp, self.moe_tp, self.moe_ep
        if moe_tp == moe_ep == 1 or (tp > 1 and dp == 1 and moe_tp > 1 and moe_ep == 1):
            return "tp"
        if moe_tp == 1 and moe_ep > 1:
            if tp > 1 and dp == 1:
                return "tep"
            if tp == 1 and dp > 1:
                return "dep"
        if tp == 1 and dp > 1 and moe_tp > 1 and moe_ep == 1:
            return "dtp"
        return "mixed"

    @property
    def parallel_shape(self) -> ParallelShape:
        """The same layout in the memory and latency models' terms."""
        return ParallelShape(
            tp=self.tp, attention_dp=self.attention_dp, moe_tp=self.moe_tp, moe_ep=self.moe_ep
        )


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    shape: WorkerShape
    replicas: int

    @property
    def total_gpus(self) -> int:
        return self.shape.gpus * self.replicas


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    prefill: ReplicaConfig
    decode: ReplicaConfig

    @property
    def total_gpus(self) -> int:
        return self.prefill.total_gpus + self.decode.total_gpus


def worker_shapes(gpus: int, *, moe: bool, allow_moe_pure_tp: bool = True) -> list[WorkerShape]:
    """Shapes of a worker with exactly ``gpus`` GPUs, in the reference's order (dep, dtp, tep, tp)."""
    if not moe:
        return [WorkerShape(tp=gpus)]
    if gpus < 2:
        return []  # one GPU splits neither attention nor experts: not an MoE pattern
    shapes = [WorkerShape(attention_dp=gpus, moe_ep=gpus)]
    if allow_moe_pure_tp:
        shapes.append(WorkerShape(attention_dp=gpus, moe_tp=gpus))
    shapes.append(WorkerShape(tp=gpus, moe_ep=gpus))
    if allow_moe_pure_tp:
        shapes.append(WorkerShape(tp=gpus, moe_tp=gpus))
    return shapes


def replica_configs(
    *,
    moe: bool,
    gpu_budget: int,
    min_gpu_budget: int | None = None,
    min_gpus_per_worker: int = 1,
    allow_moe_pure_tp: bool = True,
) -> list[ReplicaConfig]:
    """Every (shape, replicas) whose GPUs fit ``[min_gpu_budget, gpu_budget]``: GPUs per worker
    ascending, then shape order, then replicas ascending."""
    configs = []
    for gpus in GPUS_PER_WORKER:
        if gpus > gpu_budget or gpus < min_gpus_per_worker:
            continue
        for shape in worker_shapes(gpus, moe=moe, allow_moe_pure_tp=allow_moe_pure_tp):
            for replicas in range(1, gpu_budget // gpus + 1):
                if min_gpu_budget is None or gpus * replicas >= min_gpu_budget:
                    configs.append(ReplicaConfig(shape, replicas))
    return configs


def disagg_pairs(
    *,
    moe: bool,
    gpu_budget: int,
    min_gpu_budget: int | None = None,
    min_gpus_per_worker: int = 1,
    allow_moe_pure_tp: bool = True,
) -> list[DisaggConfig]:
    """Every ordered (prefill, decode) pair whose GPUs fit ``[min_gpu_budget, gpu_budget]``.

    A role alone may take fewer GPUs than ``min_gpu_budget`` (the minimum binds the pair), but
    must leave room for the smallest possible other role."""
    roles = replica_configs(
        moe=moe,
        gpu_budget=gpu_budget,
        min_gpus_per_worker=min_gpus_per_worker,
        allow_moe_pure_tp=allow_moe_pure_tp,
    )
    if not roles:
        return []
    smallest = min(c.total_gpus for c in roles)
    roles = [c for c in roles if c.total_gpus <= gpu_budget - smallest]
    return [
        DisaggConfig(prefill, decode)
        for prefill in roles
        for decode in roles
        if prefill.total_gpus + decode.total_gpus <= gpu_budget
        and (min_gpu_budget is None or prefill.total_gpus + decode.total_gpus >= min_gpu_budget)
    ]


def kv_tokens_per_rank(
    shapes: Iterable[WorkerShape],
    model: ModelSpec,
    system: System,
    *,
    backend: str,
    max_seq_len: int,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    gpu_memory_utilization: float = 0.9,
) -> dict[WorkerShape, int]:
    """KV tokens per rank of each shape that can serve one ``max_seq_len`` sequence.

    Shapes the model cannot split that way (heads not divisible, weights too big) and shapes
    whose rank holds no more than one max-length sequence are left out."""
    viable: dict[WorkerShape, int] = {}
    for shape in dict.fromkeys(shapes):  # each distinct shape once, first-seen order
        try:
            estimate = estimate_memory(
                model,
                system,
                shape.parallel_shape,
                backend=backend,
                gpu_memory_utilization=gpu_memory_utilization,
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=max_num_seqs,
                max_model_len=max_seq_len,
            )
        except InfeasibleError:
            continue
        if estimate.feasible and estimate.kv_tokens_per_rank > max_seq_len:
            viable[shape] = estimate.kv_tokens_per_rank
    return viable


C = TypeVar("C", ReplicaConfig, DisaggConfig)


def _roles(config: ReplicaConfig | DisaggConfig) -> tuple[ReplicaConfig, ...]:
    return (config.prefill, config.decode) if isinstance(config, DisaggConfig) else (config,)


def shapes_of(configs: Sequence[ReplicaConfig | DisaggConfig]) -> list[WorkerShape]:
    """Distinct worker shapes the configs use, first-seen order (the KV filter's input)."""
    return list(dict.fromkeys(role.shape for config in configs for role in _roles(config)))


def keep_viable(configs: Sequence[C], viable: Iterable[WorkerShape]) -> list[C]:
    """The configs whose every role runs a viable shape."""
    allowed = set(viable)
    return [c for c in configs if all(role.shape in allowed for role in _roles(c))]
