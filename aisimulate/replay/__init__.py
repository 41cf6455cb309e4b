"""The serving simulator: replay a workload on a deployment plan and report what happens."""

from aisimulate.replay.plan import (
    SLA,
    DeploymentPlan,
    EngineSpec,
    KvRouterSpec,
    LeastLoadedRouterSpec,
    RandomRouterSpec,
    RoundRobinRouterSpec,
    RouterSpec,
    SglangOptions,
    router_spec,
)
from aisimulate.replay.report import Report
from aisimulate.replay.simulation import simulate

__all__ = [
    "SLA",
    "DeploymentPlan",
    "EngineSpec",
    "KvRouterSpec",
    "LeastLoadedRouterSpec",
    "RandomRouterSpec",
    "Report",
    "RoundRobinRouterSpec",
    "RouterSpec",
    "SglangOptions",
    "router_spec",
    "simulate",
]
