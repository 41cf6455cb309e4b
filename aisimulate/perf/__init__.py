"""How long and how much: forward-pass latency and per-GPU memory of a parallel shape."""

from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.memory import MemoryEstimate, estimate_memory
from aisimulate.perf.model import BatchArrays, BatchShape, PassBreakdown, PerfModel
from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.perf.providers import PROVIDERS, get_perf_model
from aisimulate.perf.shape import ParallelShape
from aisimulate.perf.table import TablePerfModel

__all__ = [
    "PROVIDERS",
    "AnalyticPerfModel",
    "BatchArrays",
    "BatchShape",
    "MemoryEstimate",
    "ParallelShape",
    "PassBreakdown",
    "PerfModel",
    "PolynomialPerfModel",
    "TablePerfModel",
    "estimate_memory",
    "get_perf_model",
]
