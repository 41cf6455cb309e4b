"""Reading a replay YAML file: one deployment, one workload, an optional SLA.

Errors name the field and the line (``deployment.agg.tp: ... [replay.yaml:7]``). Relative paths
(``trace_path``, ``perf_table``) resolve against the YAML file's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import ConfigError
from aisimulate.perf.providers import PROVIDERS
from aisimulate.replay.plan import SLA, DeploymentPlan
from aisimulate.replay.router import ROUTERS
from aisimulate.workload.loader import Workload, load_workload, pydantic_message
from aisimulate.yaml_source import read_yaml_mapping

# The keys of each router mode, for errors that name the mode a misplaced router setting belongs to.
_ROUTER_SETTINGS = {mode: tuple(kind.spec.model_fields) for mode, kind in ROUTERS.items()}


class _ReplayFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: DeploymentPlan
    workload: dict[str, Any]
    sla: SLA | None = None
    perf: str = "analytic"
    perf_table: str | None = None
    seed: int = Field(default=0, ge=0)


@dataclass(frozen=True, kw_only=True)
class ReplayConfig:
    plan: DeploymentPlan
    workload: Workload
    sla: SLA | None
    perf: str
    perf_table: Path | None
    seed: int
    raw: dict[str, Any]


def load_replay_config(path: str | Path) -> ReplayConfig:
    source = read_yaml_mapping(path, what="a replay config")
    path, data, where = source.path, source.data, source.where

    try:
        parsed = _ReplayFile(**data)
    except ValidationError as err:
        message = pydantic_message(err, modes=_ROUTER_SETTINGS)
        field = message.split(":", 1)[0]
        raise ConfigError(message, where=where(tuple(field.split(".")))) from None
    if parsed.perf not in PROVIDERS:
        raise ConfigError(
            f"perf must be one of {', '.join(PROVIDERS)}, but got {parsed.perf!r}", where=where(("perf",))
        )
    # A misspelt model or GPU is named with its line here, not when the replay first needs it.
    get_model(parsed.deployment.model, where=f"deployment.model, {where(('deployment', 'model'))}")
    get_system(parsed.deployment.system, where=f"deployment.system, {where(('deployment', 'system'))}")
    base = path.resolve().parent
    try:
        workload = load_workload(parsed.workload, base_dir=base, where="workload")
    except ConfigError as err:
        message = str(err).removesuffix(" [workload]")
        field = message.split(":", 1)[0]
        raise ConfigError(f"workload.{message}", where=where(("workload", field))) from None
    table = None
    if parsed.perf_table is not None:
        table = Path(parsed.perf_table).expanduser()
        table = table if table.is_absolute() else base / table
    return ReplayConfig(
        plan=parsed.deployment,
        workload=workload,
        sla=parsed.sla,
        perf=parsed.perf,
        perf_table=table,
        seed=parsed.seed,
        raw=data,
    )
