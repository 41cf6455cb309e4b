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


_TAGS = ("int", "float", "str", "bool", "LengthDistribution")


def pydantic_message(err: ValidationError, prefix: str = "") -> str:
    """The most telling validation problem as ``field: message`` (one line). For a union (a
    length that is a number or a distribution) the structured branch's problem wins."""
    errors = err.errors()
    first = next((e for e in errors if any("LengthDistribution" in str(p) for p in e["loc"])), errors[0])
    loc = [str(p) for p in first["loc"] if str(p) not in _TAGS and not str(p).startswith("function-")]
    loc = [p for p in loc if "LengthDistribution" not in p]
    field = ".".join(loc)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{prefix}{field}: {message}" if field else f"{prefix}{message}"
