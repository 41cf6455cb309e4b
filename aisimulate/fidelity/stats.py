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
    """Median and mean of |error| and of the signed error, in percent, over ``n`` rows (NaN when
    there are none). The signed ones show the direction: negative is predicted too fast."""

    n: int
    median_abs_pct: float
    mean_abs_pct: float
    median_signed_pct: float = float("nan")
    mean_signed_pct: float = float("nan")

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: rounded, and None rather than NaN when there are no rows."""
        keys = ("median_abs_pct", "mean_abs_pct", "median_signed_pct", "mean_signed_pct")
        if not self.n:
            return {"n": 0} | dict.fromkeys(keys)
        return {"n": self.n} | {k: round(getattr(self, k), 2) for k in keys}


def error_stats(signed_pct: Iterable[float]) -> ErrorStats:
    signed = list(signed_pct)
    if not signed:
        return ErrorStats(n=0, median_abs_pct=float("nan"), mean_abs_pct=float("nan"))
    absolute = [abs(e) for e in signed]
    return ErrorStats(
        n=len(signed),
        median_abs_pct=statistics.median(absolute),
        mean_abs_pct=statistics.fmean(absolute),
        median_signed_pct=statistics.median(signed),
        mean_signed_pct=statistics.fmean(signed),
    )
