"""Smart search for the best deployment (experimental): the config, legal deployments,
branches, KV load, the latent parallel space, samples and scoring so far (no search loop yet)."""

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.deploy import deployment_plan, replay_workload
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
from aisimulate.spica.sample import kv_load_fields, unroll_sample
from aisimulate.spica.score import Scored, hypervolume, pareto_front, rank
from aisimulate.spica.search_space import Branch, SearchPlan, enumerate_branches

__all__ = [
    "Branch",
    "DisaggConfig",
    "KvLoad",
    "ParallelSpace",
    "Param",
    "PoolEntry",
    "Projection",
    "ReplicaConfig",
    "RoleBatching",
    "Scored",
    "SearchPlan",
    "SmartSearchConfig",
    "WorkerShape",
    "deployment_plan",
    "disagg_pairs",
    "enumerate_branches",
    "hypervolume",
    "keep_viable",
    "kv_load",
    "kv_load_fields",
    "kv_tokens_per_rank",
    "pareto_front",
    "rank",
    "replay_workload",
    "replica_configs",
    "unroll_sample",
    "worker_shapes",
]
