"""Traffic sized by KV load: a concurrency that fills a chosen share of the fleet's KV cache.

A fixed concurrency is unfair across candidates: 64 users saturate a small deployment and idle a
big one. ``kv_load_ratio`` instead asks for the concurrency that, at average length, occupies
that share of the KV capacity of the role that holds sequences longest (decode when
disaggregated), so every candidate is loaded alike. A request is counted at ``isl + osl / 2``
tokens: its mean footprint over its life.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.errors import InfeasibleError
from aisimulate.perf.memory import estimate_memory
from aisimulate.spica.parallel import ReplicaConfig


@dataclass(frozen=True, slots=True)
class RoleBatching:
    """A role's selected batching and memory knobs: what sizes its KV pool."""

    block_size: int = 64
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.9
    nextn: int = 0


@dataclass(frozen=True, slots=True)
class KvLoad:
    ratio: float
    concurrency: int
    concurrency_capacity: int
    capacity_tokens: dict[str, int]  # role -> KV tokens over all its ranks


def role_capacity_tokens(config: ReplicaConfig, kv_tokens_per_rank: int, block_size: int) -> int:
    """Whole blocks of every rank that holds distinct sequences: attention-DP ranks and replicas
    multiply capacity, tensor and expert ranks shard the same sequences and do not."""
    usable = kv_tokens_per_rank // block_size * block_size
    return usable * config.shape.attention_dp * config.replicas


def kv_tokens_of(
    config: ReplicaConfig, batching: RoleBatching, model: ModelSpec, system: System, *, backend: str
) -> int:
    """KV tokens per rank of a role with its selected batching; raises when none are left."""
    estimate = estimate_memory(
        model,
        system,
        config.shape.parallel_shape,
        backend=backend,
        gpu_memory_utilization=batching.gpu_memory_utilization,
        block_size=batching.block_size,
        max_num_batched_tokens=batching.max_num_batched_tokens,
        max_num_seqs=batching.max_num_seqs,
        nextn=batching.nextn,
    )
    # Holding one max-length sequence is the enumeration's filter; here any whole block will do.
    spare = estimate.kv_budget_bytes_per_gpu - estimate.sliding_kv_bytes_per_gpu
    tokens = int(spare // estimate.kv_bytes_per_token_per_gpu) if spare > 0 else 0
    if tokens < batching.block_size:
        raise InfeasibleError(
            f"no KV budget for backend={backend} at {estimate.shape} "
            f"(max_num_batched_tokens={batching.max_num_batched_tokens})",
            where="kv_load_ratio",
        )
    return tokens


def kv_load(ratio: float, capacity_tokens: dict[str, int], *, isl: int, osl: int) -> KvLoad:
    """The concurrency that puts ``ratio`` of the load role's KV capacity to use (at least 1).

    ``capacity_tokens`` maps roles (``agg``, or ``prefill`` and ``decode``) to their capacity;
    the load role is ``decode`` when present."""
    if isl < 1 or osl < 1:
        raise InfeasibleError(f"kv_load_ratio needs isl and osl >= 1, but got isl={isl}, osl={osl}")
    role = "decode" if "decode" in capacity_tokens else "agg"
    tokens_per_request = isl + osl // 2
    capacity = capacity_tokens[role] // tokens_per_request
    if capacity < 1:
        raise InfeasibleError(
            f"the {role} role's KV cache ({capacity_tokens[role]} tokens) cannot hold one request of "
            f"{tokens_per_request} tokens (isl + osl/2)",
            where="kv_load_ratio",
        )
    return KvLoad(
        ratio=ratio,
        concurrency=max(1, int(ratio * capacity)),
        concurrency_capacity=capacity,
        capacity_tokens=dict(capacity_tokens),
    )
