"""Smart search for the best deployment (experimental): legal deployments and KV load so far."""

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

__all__ = [
    "DisaggConfig",
    "KvLoad",
    "ReplicaConfig",
    "RoleBatching",
    "WorkerShape",
    "disagg_pairs",
    "keep_viable",
    "kv_load",
    "kv_tokens_per_rank",
    "replica_configs",
    "worker_shapes",
]
