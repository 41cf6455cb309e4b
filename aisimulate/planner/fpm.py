"""Forward-pass metrics and the pass-time regressions the planner learns from them.

The planner never sees the perf model at work: like the reference planner it learns how long a
pass takes from what the engines report (one snapshot per engine per tick), with a linear fit
over a bounded sample. Retention drops the oldest sample of the most crowded bucket of the
input space, so a long steady phase cannot push out the few samples from a burst — the fit stays
valid across operating points.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardPassMetrics:
    """One engine's latest pass (scheduled work and its wall time) and its queues now."""

    wall_time_ms: float
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    num_queued_prefill: int = 0
    sum_queued_prefill_tokens: int = 0
    num_queued_decode: int = 0
    sum_queued_decode_kv_tokens: int = 0
    fresh: bool = True  # False: no pass since the previous tick (the engine sat idle)


class PassRegression:
    """``wall_time_ms = a + b · x`` over the retained samples, fitted with every coefficient
    ≥ 0 (a pass never gets cheaper with more work). The reference fits freely and discards a
    fit with a negative coefficient; a non-negative fit keeps a usable model where that one
    would keep none (a convex cost curve fitted by a line wants a negative intercept)."""

    def __init__(self, dims: int, *, max_samples: int, bucket_size: int, min_observations: int) -> None:
        self.dims = dims
        self.max_samples = max_samples
        self.per_axis = bucket_size if dims == 1 else math.isqrt(bucket_size)
        self.min_observations = min_observations
        self._x: list[tuple[float, ...]] = []
        self._y: list[float] = []
        self._coef: np.ndarray | None = None
        self._stale = False

    def __len__(self) -> int:
        return len(self._y)

    def add(self, x: Sequence[float], wall_time_ms: float) -> None:
        if wall_time_ms <= 0:
            return
        self._x.append(tuple(float(v) for v in x))
        self._y.append(float(wall_time_ms))
        if len(self._y) > self.max_samples:
            drop = self._oldest_of_fullest_bucket()
            del self._x[drop], self._y[drop]
        self._stale = True

    def _oldest_of_fullest_bucket(self) -> int:
        x = np.asarray(self._x)
        lo, hi = x.min(axis=0), x.max(axis=0)
        width = np.where(hi > lo, (hi - lo) / self.per_axis, 1.0)
        cells = np.minimum(((x - lo) / width).astype(np.int64), self.per_axis - 1)
        flat = np.ravel_multi_index(tuple(cells.T), (self.per_axis,) * self.dims)
        fullest = int(np.bincount(flat).argmax())  # ties: the lowest bucket
        return int(np.flatnonzero(flat == fullest)[0])  # samples are kept oldest first

    @property
    def coefficients(self) -> np.ndarray | None:
        """(a, b...) of the current fit; None until ``min_observations`` samples."""
        if self._stale:
            self._stale = False
            if len(self._y) >= self.min_observations:
                design = np.column_stack([np.ones(len(self._y)), np.asarray(self._x)])
                self._coef = nnls(design, np.asarray(self._y))[0]
        return self._coef

    @property
    def ready(self) -> bool:
        return self.coefficients is not None

    def predict(self, *x: float) -> float:
        coef = self.coefficients
        assert coef is not None, "predict() before the regression has a fit"
        return float(coef[0] + sum(c * v for c, v in zip(coef[1:], x, strict=True)))


class MovingAverage:
    """Mean of the last ``window`` values (empty: ``default``)."""

    def __init__(self, window: int) -> None:
        self._values: deque[float] = deque(maxlen=window)

    def add(self, value: float) -> None:
        self._values.append(value)

    def value(self, default: float = 0.0) -> float:
        return sum(self._values) / len(self._values) if self._values else default
