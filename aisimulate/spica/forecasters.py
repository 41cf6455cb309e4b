"""Which load forecaster a throughput-scaling planner runs, chosen once per search.

Throughput scaling sizes the fleet for the load it predicts one interval ahead, and how well a
forecaster predicts depends on the traffic and the interval, not on the deployment. So it is not
a knob: before the search, every configured ``load_predictor_candidates`` entry is scored one step
ahead over the trace's windows, per distinct throughput interval of the kept policies, and the
winner goes into every sample whose policy scales by throughput. A synthetic workload has a
steady load, so the last value is the forecast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from aisimulate.planner.predictors import PredictorSpec, predictor_spec
from aisimulate.planner.selection import select_load_predictor, trace_windows
from aisimulate.spica.config import Workload
from aisimulate.spica.knobs import SCALING_POLICY_PRESETS, expand


@dataclass(frozen=True)
class Forecasters:
    by_interval_s: Mapping[int, PredictorSpec] = field(default_factory=dict)
    losses: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    reason: str = "no_throughput_scaling_candidate"
    warnings: tuple[str, ...] = ()

    def for_policy(self, entry: Any) -> PredictorSpec | None:
        policy = expand(entry, SCALING_POLICY_PRESETS)
        if not policy.enable_throughput_scaling:
            return None
        return self.by_interval_s[policy.throughput_adjustment_interval_seconds]  # type: ignore[index]

    def to_json(self) -> dict[str, Any]:
        return {
            "best_by_interval_s": {str(k): v.model_dump() for k, v in self.by_interval_s.items()},
            "losses": {str(k): dict(v) for k, v in self.losses.items()},
            "reason": self.reason,
            "warnings": list(self.warnings),
        }


def throughput_intervals_s(policies: Sequence[Any]) -> list[int]:
    scaling = (expand(p, SCALING_POLICY_PRESETS) for p in policies)
    return sorted(
        {
            p.throughput_adjustment_interval_seconds
            for p in scaling
            if p.enable_throughput_scaling and p.throughput_adjustment_interval_seconds is not None
        }
    )


def choose_forecasters(workload: Workload, policies: Sequence[Any], candidates: Sequence[Any]) -> Forecasters:
    intervals = throughput_intervals_s(policies)
    if not intervals:
        return Forecasters()
    if not workload.is_trace:
        constant = predictor_spec("constant_last")
        return Forecasters(
            by_interval_s=dict.fromkeys(intervals, constant), reason="static_workload_constant"
        )
    assert workload.trace_path is not None
    entries = [c.model_dump() if isinstance(c, BaseModel) else c for c in candidates]
    chosen, losses, notes, fallbacks = {}, {}, [], []
    for interval in intervals:
        selection = select_load_predictor(trace_windows(workload.trace_path, interval), interval, entries)
        chosen[interval] = predictor_spec(selection.best)
        losses[interval] = selection.losses
        notes += selection.warnings
        if selection.reason != "swept":
            fallbacks.append(interval)
    reason = "swept" + (f"; no_winner_fallback_constant_last@{fallbacks}" if fallbacks else "")
    return Forecasters(
        by_interval_s=chosen, losses=losses, reason=reason, warnings=tuple(dict.fromkeys(notes))
    )
