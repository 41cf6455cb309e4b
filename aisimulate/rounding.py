"""Rounding as the reference replay's Rust code does it (half away from zero), not Python's
banker's rounding; used wherever a count or a percentile rank must match it."""

from __future__ import annotations

import math


def round_half_away(x: float) -> int:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)
