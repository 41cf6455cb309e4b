"""Requests: mooncake traces and the seeded synthetic generator (read by replay, planner, spica)."""

from aisimulate.workload.lengths import LengthDistribution
from aisimulate.workload.loader import Workload, load_workload
from aisimulate.workload.mooncake import TraceWorkload
from aisimulate.workload.request import RequestSpec, Session
from aisimulate.workload.synthetic import SyntheticWorkload

__all__ = [
    "LengthDistribution",
    "RequestSpec",
    "Session",
    "SyntheticWorkload",
    "TraceWorkload",
    "Workload",
    "load_workload",
]
