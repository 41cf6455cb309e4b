"""The serving simulator: replay a workload on a deployment plan and report what happens."""

from aisimulate.replay.plan import SLA, DeploymentPlan, EngineSpec, RouterSpec, SglangOptions
from aisimulate.replay.report import Report
from aisimulate.replay.simulation import simulate

__all__ = ["SLA", "DeploymentPlan", "EngineSpec", "Report", "RouterSpec", "SglangOptions", "simulate"]
