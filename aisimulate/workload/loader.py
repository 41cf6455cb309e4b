"""Building a workload from a config mapping, with errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aisimulate.errors import ConfigError
from aisimulate.workload.mooncake import TraceWorkload
from aisimulate.workload.synthetic import SyntheticWorkload

Workload = SyntheticWorkload | TraceWorkload


def load_workload(
    mapping: dict[str, Any], *, base_dir: Path | None = None, where: str = "workload"
) -> Workload:
    """A trace workload if ``trace_path`` is given (relative to ``base_dir``), else synthetic."""
    if not isinstance(mapping, dict):
        raise ConfigError("workload must be a mapping", where=where)
    data = dict(mapping)
    cls: type = SyntheticWorkload
    if "trace_path" in data:
        path = Path(data["trace_path"]).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        data["trace_path"] = path
        cls = TraceWorkload
    try:
        return cls(**data)
    except ValidationError as err:
        raise ConfigError(pydantic_message(err), where=where) from None


def pydantic_message(err: ValidationError, prefix: str = "") -> str:
    """The first validation problem as ``field: message`` (one line)."""
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{prefix}{field}: {message}" if field else f"{prefix}{message}"
