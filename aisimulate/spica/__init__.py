"""Smart search for the best deployment (experimental): legal deployments, KV load, the
latent parallel space and its projection, and scoring so far."""

from aisimulate.spica.kv_load import KvLoad, RoleBatching, kv_load
from aisimulate.spica.parallel import (
    DisaggConfig,
    ReplicaConfig,
    WorkerShape,
    disagg_pairs,
    keep_viable,
    kv_tokens_per_rank,
    replica_configs,
    worker_shapes,
)
from aisimulate.spica.projection import ParallelSpace, Param, PoolEntry, Projection
from aisimulate.spica.score import Scored, hypervolume, pareto_front, rank

__all__ = [
    "DisaggConfig",
    "KvLoad",
    "ParallelSpace",
    "Param",
    "PoolEntry",
    "Projection",
    "ReplicaConfig",
    "RoleBatching",
    "Scored",
    "WorkerShape",
    "disagg_pairs",
    "hypervolume",
    "keep_viable",
    "kv_load",
    "kv_tokens_per_rank",
    "pareto_front",
    "rank",
    "replica_configs",
    "worker_shapes",
]
