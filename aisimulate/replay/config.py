"""Reading a replay YAML file: one deployment, one workload, an optional SLA.

Errors name the field and the line (``deployment.agg.tp: ... [replay.yaml:7]``). Relative paths
(``trace_path``, ``perf_table``) resolve against the YAML file's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisimulate.errors import ConfigError
from aisimulate.perf.providers import PROVIDERS
from aisimulate.replay.plan import SLA, DeploymentPlan
from aisimulate.workload.loader import Workload, load_workload, pydantic_message


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


def _line_of(node: yaml.Node | None, path: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``path`` (or of its deepest existing parent)."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if getattr(k, "value", None) == str(key)), None)
            if match is None:
                key_node = next((k for k, _ in node.value if getattr(k, "value", None) == str(key)), None)
                return key_node.start_mark.line + 1 if key_node is not None else line
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
        line = node.start_mark.line + 1
    return line


def load_replay_config(path: str | Path) -> ReplayConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read config: {err.strerror}", where=str(path)) from None
    try:
        data = yaml.safe_load(text)
        tree = yaml.compose(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"invalid YAML ({getattr(err, 'problem', err)})", where=where) from None
    if not isinstance(data, dict):
        raise ConfigError("a replay config must be a YAML mapping", where=str(path))

    def where(loc: tuple[Any, ...]) -> str:
        line = _line_of(tree, loc)
        return f"{path}:{line}" if line else str(path)

    try:
        parsed = _ReplayFile(**data)
    except ValidationError as err:
        message = pydantic_message(err)
        field = message.split(":", 1)[0]
        raise ConfigError(message, where=where(tuple(field.split(".")))) from None
    if parsed.perf not in PROVIDERS:
        raise ConfigError(
            f"perf must be one of {', '.join(PROVIDERS)}, but got {parsed.perf!r}", where=where(("perf",))
        )
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
