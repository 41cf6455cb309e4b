"""Smart search for the best deployment (EXPERIMENTAL): enumerate the legal deployments of a
model on a GPU type within a GPU budget, let Optuna propose candidates, replay each one and return
a ranked list or a Pareto front. APIs, configuration schema, search results and deployment
outputs may change without a deprecation period; no SLA, accuracy or configuration-optimality
guarantee. Run it with ``python -m aisimulate.spica --config FILE.yaml`` or ``run_smart_search``."""

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.deploy import deployment_plan, replay_workload
from aisimulate.spica.evaluate import Evaluation, evaluate, judge
from aisimulate.spica.experimental import ExperimentalWarning
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
from aisimulate.spica.records import TrialRecord
from aisimulate.spica.sample import kv_load_fields, unroll_sample
from aisimulate.spica.sampler import BranchSampler, Suggestion
from aisimulate.spica.score import Scored, hypervolume, pareto_front, rank
from aisimulate.spica.search import SearchResult, run_smart_search
from aisimulate.spica.search_space import Branch, SearchPlan, enumerate_branches

__all__ = [
    "Branch",
    "BranchSampler",
    "DisaggConfig",
    "Evaluation",
    "ExperimentalWarning",
    "KvLoad",
    "ParallelSpace",
    "Param",
    "PoolEntry",
    "Projection",
    "ReplicaConfig",
    "RoleBatching",
    "Scored",
    "SearchPlan",
    "SearchResult",
    "SmartSearchConfig",
    "Suggestion",
    "TrialRecord",
    "WorkerShape",
    "deployment_plan",
    "disagg_pairs",
    "enumerate_branches",
    "evaluate",
    "hypervolume",
    "judge",
    "keep_viable",
    "kv_load",
    "kv_load_fields",
    "kv_tokens_per_rank",
    "pareto_front",
    "rank",
    "replay_workload",
    "replica_configs",
    "run_smart_search",
    "unroll_sample",
    "worker_shapes",
]
