"""Building a workload from a config mapping, with errors that name the field."""

from __future__ import annotations

from collections.abc import Collection, Mapping
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


def pydantic_message(
    err: ValidationError, prefix: str = "", *, modes: Mapping[str, Collection[str]] | None = None
) -> str:
    """The most telling validation problem as ``field: message`` (one line). For a union (a
    length that is a number or a distribution) the structured branch's problem wins. ``modes``
    names the members of a union told apart by a ``mode`` key, each with its keys: the mode is
    left out of the field's path, and a key it lacks is named with the modes that take it."""
    modes = modes or {}
    errors = err.errors()
    first = next((e for e in errors if any("LengthDistribution" in str(p) for p in e["loc"])), errors[0])
    loc = [str(p) for p in first["loc"] if str(p) not in _TAGS and not str(p).startswith("function-")]
    loc = [p for p in loc if "LengthDistribution" not in p]
    mode = next((p for p in loc if p in modes), None)
    loc = [p for p in loc if p not in modes]
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        owners = [name for name, keys in modes.items() if loc and loc[-1] in keys]
        message = "unknown key" if mode is None else f"not a setting of mode {mode}"
        if mode is not None and owners:
            message = f"applies to mode {' or '.join(owners)} only, not {mode}"
    elif first["type"] == "union_tag_invalid":  # an unknown mode: the problem of the mode key
        loc.append(first["ctx"]["discriminator"].strip("'"))
        message = f"Input should be one of {first['ctx']['expected_tags']}"
    field = ".".join(loc)
    return f"{prefix}{field}: {message}" if field else f"{prefix}{message}"
