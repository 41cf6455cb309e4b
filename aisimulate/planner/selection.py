"""Which forecaster should the planner's throughput scaling run on this traffic?

Cut a trace into per-interval windows (requests, mean ISL, mean OSL), replay every candidate one
step ahead over them, and keep the lowest mean loss. The loss is on a log scale because the
planner sizes the fleet by ratios: predicting 20 requests for 10 is as bad as 10 for 20. Token
volume (requests × length) weighs 0.8, the lengths alone 0.2: volume is what needs GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aisimulate.errors import ConfigError
from aisimulate.planner.predictors import PRESETS, PredictorSpec, make_predictor, predictor_spec
from aisimulate.workload.mooncake import TraceWorkload

Window = tuple[float, float, float]  # (requests, mean ISL, mean OSL)


def trace_windows(trace_path: str | Path, interval_s: float) -> list[Window]:
    """Per-interval windows from the first busy interval to the last, quiet ones in between as
    ``(0, 0, 0)``; errors name the file and line."""
    if interval_s <= 0:
        raise ConfigError(f"interval must be > 0 s, got {interval_s}", where="interval_s")
    trace = TraceWorkload(trace_path=Path(trace_path))
    buckets: dict[int, list[int]] = {}
    for line_no, row in trace.rows():
        where = f"{trace.trace_path}:{line_no}"
        stamp = row.get("timestamp")
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
            raise ConfigError(f"timestamp must be a finite number (ms), got {stamp!r}", where=where)
        lengths = []
        for key in ("input_length", "output_length"):
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key} must be a non-negative integer, got {value!r}", where=where)
            lengths.append(value)
        bucket = buckets.setdefault(math.floor(stamp / (interval_s * 1000.0)), [0, 0, 0])
        bucket[0] += 1
        bucket[1] += lengths[0]
        bucket[2] += lengths[1]
    if not buckets:
        return []
    windows: list[Window] = []
    for index in range(min(buckets), max(buckets) + 1):
        n, isl, osl = buckets.get(index, (0, 0, 0))
        windows.append((float(n), isl / n, osl / n) if n else (0.0, 0.0, 0.0))
    return windows


def _log_error(predicted: float, actual: float) -> float:
    return abs(math.log1p(max(predicted, 0.0)) - math.log1p(max(actual, 0.0)))


def window_loss(predicted: Window, actual: Window) -> float:
    (pn, pi, po), (n, i, o) = predicted, actual
    return (
        0.4 * _log_error(pn * pi, n * i)
        + 0.4 * _log_error(pn * po, n * o)
        + 0.1 * _log_error(pi, i)
        + 0.1 * _log_error(po, o)
    )


def mean_loss(windows: Sequence[Window], spec: PredictorSpec, *, warmup: int, interval_s: float) -> float:
    """One-step-ahead mean loss of ``spec`` over the windows after ``warmup`` (+inf if none)."""
    series = [make_predictor(spec, interval_s) for _ in range(3)]
    losses = []
    for t, actual in enumerate(windows):
        if t >= warmup:
            losses.append(
                window_loss((series[0].predict(), series[1].predict(), series[2].predict()), actual)
            )
        for predictor, value in zip(series, actual, strict=True):
            predictor.add(value)
    return sum(losses) / len(losses) if losses else math.inf


@dataclass(frozen=True)
class Selection:
    best: str | dict  # a preset id or the winning dict, as given
    losses: dict[str, float]  # label (preset id or custom_<i>) -> mean loss
    reason: str
    warnings: list[str] = field(default_factory=list)


def select_load_predictor(
    windows: Sequence[Window],
    interval_s: float,
    candidates: Sequence[str | dict] = tuple(PRESETS),
) -> Selection:
    """The candidate with the lowest mean loss; ties go to the earlier one, and when nothing
    scores, ``constant_last``. A family whose optional package is missing is skipped with a
    warning rather than failing the whole selection."""
    specs = [predictor_spec(c, where=f"load_predictor_candidates[{i}]") for i, c in enumerate(candidates)]
    warmup = max((s.min_points for s in specs), default=0)
    best: str | dict = "constant_last"
    best_loss = math.inf
    losses: dict[str, float] = {}
    notes: list[str] = []
    for index, (entry, spec) in enumerate(zip(candidates, specs, strict=True)):
        label = entry if isinstance(entry, str) else f"custom_{index}"
        try:
            loss = mean_loss(windows, spec, warmup=warmup, interval_s=interval_s)
        except ConfigError as err:  # an optional forecaster that is not installed
            notes.append(f"{label} skipped: {err}")
            continue
        losses[label] = loss
        if loss < best_loss:  # strict: ties keep the earlier candidate, NaN never wins
            best, best_loss = entry, loss
    reason = "swept" if math.isfinite(best_loss) else "swept; no_winner_fallback_constant_last"
    return Selection(best=best, losses=losses, reason=reason, warnings=notes)
