"""Smart search for the best deployment (experimental): the legal deployments so far."""

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
    "ReplicaConfig",
    "WorkerShape",
    "disagg_pairs",
    "keep_viable",
    "kv_tokens_per_rank",
    "replica_configs",
    "worker_shapes",
]
