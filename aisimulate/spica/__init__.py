"""Smart search for the best deployment (EXPERIMENTAL): enumerate the legal deployments of a
model on a GPU type within a GPU budget, let Optuna propose candidates, replay each one and return
a ranked list or a Pareto front. APIs, configuration schema, search results and deployment
outputs may change without a deprecation period; no SLA, accuracy or configuration-optimality
guarantee; not production-ready. Run it with ``python -m aisimulate.spica --config FILE.yaml`` or
``run_smart_search``.

The reference sweeper's public names are here too where they mean the same thing (its
``Candidate`` is our ``TrialRecord``, ``SLATarget`` the replay's ``SLA``, its preset tables our
``*_PRESETS``); docs/spica/running.md maps the rest to ours."""

from aisimulate.replay.plan import SLA as SLATarget
from aisimulate.replay.plan import DeploymentPlan
from aisimulate.spica.config import (
    OptimizationGoal,
    OptimizationTarget,
    SearchSpace,
    SmartSearchConfig,
    SweepConfig,
    Workload,
)
from aisimulate.spica.deploy import deployment_plan, replay_workload
from aisimulate.spica.evaluate import Evaluation, evaluate, judge
from aisimulate.spica.experimental import ExperimentalWarning
from aisimulate.spica.forecasters import throughput_intervals_s as throughput_intervals
from aisimulate.spica.knobs import FPM_SAMPLING_PRESETS as FPM_SAMPLING
from aisimulate.spica.knobs import LOAD_SENSITIVITY_PRESETS as LOAD_SENSITIVITY
from aisimulate.spica.knobs import SCALING_POLICY_PRESETS as SCALING_POLICIES
from aisimulate.spica.knobs import ScalingPolicy
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
from aisimulate.spica.records import TrialRecord as Candidate
from aisimulate.spica.sample import kv_load_fields, unroll_sample
from aisimulate.spica.sampler import BranchSampler, Suggestion
from aisimulate.spica.score import (
    Scored,
    hypervolume,
    is_feasible,
    objective_value,
    objective_vector,
    pareto_front,
    rank,
)
from aisimulate.spica.search import BranchOutcome, SearchResult, run_smart_search
from aisimulate.spica.search_space import Branch, SearchPlan, enumerate_branches

__all__ = [
    "FPM_SAMPLING",
    "LOAD_SENSITIVITY",
    "SCALING_POLICIES",
    "Branch",
    "BranchOutcome",
    "BranchSampler",
    "Candidate",
    "DeploymentPlan",
    "DisaggConfig",
    "Evaluation",
    "ExperimentalWarning",
    "KvLoad",
    "OptimizationGoal",
    "OptimizationTarget",
    "ParallelSpace",
    "Param",
    "PoolEntry",
    "Projection",
    "ReplicaConfig",
    "RoleBatching",
    "SLATarget",
    "ScalingPolicy",
    "Scored",
    "SearchPlan",
    "SearchResult",
    "SearchSpace",
    "SmartSearchConfig",
    "Suggestion",
    "SweepConfig",
    "TrialRecord",
    "WorkerShape",
    "Workload",
    "deployment_plan",
    "disagg_pairs",
    "enumerate_branches",
    "evaluate",
    "hypervolume",
    "is_feasible",
    "judge",
    "keep_viable",
    "kv_load",
    "kv_load_fields",
    "kv_tokens_per_rank",
    "objective_value",
    "objective_vector",
    "pareto_front",
    "rank",
    "replay_workload",
    "replica_configs",
    "run_smart_search",
    "throughput_intervals",
    "unroll_sample",
    "worker_shapes",
]
