"""Choosing a latency provider by name: ``analytic`` (default), ``polynomial`` or ``table``."""

from __future__ import annotations

from pathlib import Path

from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.errors import ConfigError
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.model import PerfModel
from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.perf.shape import ParallelShape
from aisimulate.perf.table import TablePerfModel

PROVIDERS = ("analytic", "polynomial", "table")


def get_perf_model(
    name: str,
    *,
    model: ModelSpec,
    system: System,
    shape: ParallelShape,
    backend: str = "vllm",
    kv_cache_dtype: str = "auto",
    nextn: int = 0,
    table_path: str | Path | None = None,
) -> PerfModel:
    """Build the provider ``name`` for one worker shape."""
    if name == "analytic":
        return AnalyticPerfModel(
            model, system, shape, backend=backend, kv_cache_dtype=kv_cache_dtype, nextn=nextn
        )
    if name == "polynomial":
        return PolynomialPerfModel()
    if name == "table":
        if table_path is None:
            raise ConfigError("perf: table needs a perf_table file (CSV or NPZ)", where="perf_table")
        return TablePerfModel.from_file(table_path)
    raise ConfigError(f"perf must be one of {', '.join(PROVIDERS)}, but got {name!r}", where="perf")
