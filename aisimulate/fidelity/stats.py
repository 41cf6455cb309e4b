"""Relative errors of predictions against measurements, and their summaries."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


def signed_error_pct(predicted: float, measured: float) -> float:
    """``100 * (predicted - measured) / measured``: positive when the prediction is too slow."""
    return 100.0 * (predicted - measured) / measured


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorStats:
    """Median and mean of |error| in percent over ``n`` rows (NaN when there are none)."""

    n: int
    median_abs_pct: float
    mean_abs_pct: float

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: rounded, and None rather than NaN when there are no rows."""
        if not self.n:
            return {"n": 0, "median_abs_pct": None, "mean_abs_pct": None}
        return {
            "n": self.n,
            "median_abs_pct": round(self.median_abs_pct, 2),
            "mean_abs_pct": round(self.mean_abs_pct, 2),
        }


def error_stats(signed_pct: Iterable[float]) -> ErrorStats:
    absolute = [abs(e) for e in signed_pct]
    if not absolute:
        return ErrorStats(n=0, median_abs_pct=float("nan"), mean_abs_pct=float("nan"))
    return ErrorStats(
        n=len(absolute), median_abs_pct=statistics.median(absolute), mean_abs_pct=statistics.fmean(absolute)
    )
