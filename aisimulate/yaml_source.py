"""YAML config files read together with their node tree, so that every error can say file:line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aisimulate.errors import ConfigError


def line_of(node: yaml.Node | None, path: Sequence[Any]) -> int | None:
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


@dataclass(frozen=True)
class YamlSource:
    path: Path
    data: dict[str, Any]
    tree: yaml.Node | None

    def where(self, field_path: Sequence[Any]) -> str:
        """``file:line`` of a field, or the file alone when the line is unknown."""
        line = line_of(self.tree, field_path)
        return f"{self.path}:{line}" if line else str(self.path)


def read_yaml_mapping(path: str | Path, *, what: str) -> YamlSource:
    """Parse a YAML file that must hold a mapping (``what`` names it in the error)."""
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
        raise ConfigError(f"{what} must be a YAML mapping", where=str(path))
    return YamlSource(path, data, tree)
