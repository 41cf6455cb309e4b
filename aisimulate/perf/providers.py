"""Choosing a latency provider by name: ``analytic`` (default), ``aic``, ``auto``, ``polynomial``
or ``table``. ``auto`` takes AIConfigurator when it is installed and covers the worker, else the
analytic model; the provider's ``name`` says which one ran."""

from __future__ import annotations

from pathlib import Path

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.models import ModelSpec
from aisimulate.catalog.systems import System
from aisimulate.errors import ConfigError
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.model import PerfModel
from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.perf.shape import ParallelShape
from aisimulate.perf.table import TablePerfModel

PROVIDERS = ("analytic", "aic", "auto", "polynomial", "table")


def async_scheduling_for(backend: str, requested: bool | None, *, name: str = "async_scheduling") -> bool:
    """Whether an engine schedules asynchronously: vLLM's switch, on unless turned off (as vLLM
    since 0.14). SGLang's and TRT-LLM's overlap schedulers are part of their fitted per-pass
    overhead, so asking for it there is an error."""
    if backend_profile(backend).async_switch:
        return requested is not False
    if requested is not None:
        raise ConfigError(
            f"{name} is vLLM's switch; {backend}'s overlap scheduler is part of its fitted per-pass overhead"
        )
    return False


def get_perf_model(
    name: str,
    *,
    model: ModelSpec,
    system: System,
    shape: ParallelShape,
    backend: str = "vllm",
    kv_cache_dtype: str = "auto",
    nextn: int = 0,
    async_scheduling: bool = False,
    cuda_graph_sizes: tuple[int, ...] = (),
    table_path: str | Path | None = None,
    kernel_tables: bool | None = None,
    moe_a2a_backend: str = "none",
) -> PerfModel:
    """Build the provider ``name`` for one worker shape.

    ``async_scheduling`` only changes the analytic model: it is the one that adds a framework
    overhead to its kernels (AIConfigurator prices kernels alone; measured tables include it).
    So do ``cuda_graph_sizes`` (the batch sizes captured as CUDA graphs, empty: none padded):
    the other providers price a batch as they measured or tabulated it. ``kernel_tables``: the
    analytic model's measured GEMM tables and catalog MoE curves (None: its default).
    ``moe_a2a_backend``: the engine's expert-parallel all-to-all (SGLang's ``deepep`` prices the
    analytic model's experts by DeepEP's own measured kernels)."""
    if name in ("aic", "auto"):
        # Imported here: the module is the only one that touches the optional extra.
        from aisimulate.perf.aic import AicPerfModel

        try:
            return AicPerfModel(
                model, system, shape, backend=backend, kv_cache_dtype=kv_cache_dtype, nextn=nextn
            )
        except ConfigError:
            if name == "aic":
                raise
    if name in ("analytic", "auto"):
        return AnalyticPerfModel(
            model,
            system,
            shape,
            backend=backend,
            kv_cache_dtype=kv_cache_dtype,
            nextn=nextn,
            async_scheduling=async_scheduling,
            cuda_graph_sizes=cuda_graph_sizes,
            kernel_tables=kernel_tables,
            moe_a2a_backend=moe_a2a_backend,
        )
    if name == "polynomial":
        return PolynomialPerfModel()
    if name == "table":
        if table_path is None:
            raise ConfigError("perf: table needs a perf_table file (CSV or NPZ)", where="perf_table")
        return TablePerfModel.from_file(table_path)
    raise ConfigError(f"perf must be one of {', '.join(PROVIDERS)}, but got {name!r}", where="perf")
