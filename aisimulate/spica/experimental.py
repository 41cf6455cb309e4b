"""How ``aisimulate.spica`` says it is experimental: a warning category and one decorator.

Entry points that run a search carry the decorator, so a user meets the notice once per call
and can silence it by category (``warnings.filterwarnings("ignore", category=ExperimentalWarning)``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

NOTICE = (
    "aisimulate.spica is EXPERIMENTAL and not production-ready: APIs, configuration schema, search results "
    "and deployment outputs may change without a deprecation period; no SLA, accuracy or "
    "configuration-optimality guarantee."
)


class ExperimentalWarning(UserWarning):
    """Raised (as a warning) by experimental entry points."""


def experimental(func: Callable[P, R]) -> Callable[P, R]:
    """Warn with ``NOTICE`` on each call and say so in the docstring."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        warnings.warn(NOTICE, ExperimentalWarning, stacklevel=2)
        return func(*args, **kwargs)

    wrapper.__doc__ = f"{func.__doc__ or ''}\n\n    .. note:: EXPERIMENTAL. {NOTICE}\n"
    return wrapper
