"""Replaying a measured row and reading off what the load generator would have reported.

The load generator counts every request, including the ramp-up (all users arrive at once) and
the drain (the last users finish alone), so the headline prediction does too. The steady-state
prediction drops the first and the last ``concurrency`` requests, which shows how much of an
error comes from those edges rather than from the pass model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aisimulate.errors import ConfigError
from aisimulate.fidelity.cases import ReplayCase, Skipped
from aisimulate.replay import simulate


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    ttft_ms: float
    tpot_ms: float
    steady_ttft_ms: float
    steady_tpot_ms: float
    perf_model: str

    def latency_ms(self, metric: str, *, steady: bool = False) -> float:
        """Mean ``"ttft"`` or ``"tpot"``, over all requests or the steady state."""
        if metric == "ttft":
            return self.steady_ttft_ms if steady else self.ttft_ms
        return self.steady_tpot_ms if steady else self.tpot_ms


def predict(case: ReplayCase, *, perf: str = "analytic", seed: int = 0) -> Prediction | Skipped:
    """Mean TTFT and TPOT of the replayed benchmark; a shape the catalog cannot run is skipped."""
    try:
        report = simulate(case.plan, case.workload, perf=perf, seed=seed, capture_requests=True)
    except ConfigError as err:
        return Skipped(row=case.row, reason=str(err))
    records = [r for r in report.requests or [] if r["status"] == "completed"]
    if not records:
        return Skipped(row=case.row, reason="no request completed in the replay")
    records.sort(key=lambda r: r["request_id"])
    edge = case.row.concurrency
    steady = records[edge:-edge] if len(records) > 2 * edge else records
    return Prediction(
        ttft_ms=float(report.summary["mean_ttft_ms"]),
        tpot_ms=float(report.summary["mean_tpot_ms"]),
        steady_ttft_ms=float(np.mean([r["ttft_ms"] for r in steady])),
        steady_tpot_ms=float(np.mean([r["itl_ms"] for r in steady if r["itl_ms"] is not None])),
        perf_model=report.perf_model,
    )
