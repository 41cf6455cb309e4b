"""Errors a user can cause.

Hierarchy::

    AisimulateError
     └── ConfigError (also a ValueError)       a config value, file or name is wrong
          ├── UnknownNameError (also KeyError)  a model or system name is not in the catalog
          └── InfeasibleError                   a shape that cannot run (weights do not fit, ...)

CLIs print ``str(err)`` on one line and exit with status 2; a traceback means a bug in
aisimulate, never a user's mistake.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AisimulateError(Exception):
    """Base of every error aisimulate raises on purpose."""


class ConfigError(AisimulateError, ValueError):
    """A user-supplied value is invalid; the message names the field and where it came from."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{message} [{where}]" if where else message)


class UnknownNameError(ConfigError, KeyError):
    """A name that is not in the catalog; the message lists the closest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, where: str | None = None):
        known = sorted(set(known))
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.4)
        if not close:
            lowered = name.lower()
            close = [k for k in known if lowered in k.lower() or k.lower() in lowered][:5]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        self.name = name
        self.close_matches = close
        super().__init__(f"unknown {kind} {name!r}{hint}", where=where)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0]


class InfeasibleError(ConfigError):
    """A configuration that is well-formed but cannot run (for example, weights do not fit)."""
