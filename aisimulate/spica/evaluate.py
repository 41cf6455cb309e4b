"""Judging one candidate: flat sample -> deployment plan -> replay -> objectives.

The evaluator is a plain top-level function of picklable data (the config and the sample), so a
process pool or a Ray cluster can run it unchanged, and any other function with the same
signature (a test's fake, a cached lookup) can replace it. Every way a candidate can go wrong
becomes an ``Evaluation`` with a status and a reason: one bad candidate never stops a search.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from aisimulate.errors import ConfigError, InfeasibleError
from aisimulate.replay import simulate
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.deploy import deployment_plan, replay_workload
from aisimulate.spica.score import PARETO, objective_vector, score

Status = Literal["feasible", "infeasible", "failed", "unsupported", "duplicate"]
STATUSES: tuple[Status, ...] = ("feasible", "infeasible", "failed", "unsupported", "duplicate")


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """What one candidate scored, or why it has no score. ``objectives`` holds raw values keyed by
    objective name (one entry for a scalar goal); ``score`` is signed, higher is better."""

    status: Status
    reason: str | None = None
    summary: Mapping[str, Any] | None = None
    objectives: Mapping[str, float] | None = None
    score: float | None = None
    wall_s: float = 0.0
    traceback: str | None = None


Evaluator = Callable[[SmartSearchConfig, Mapping[str, Any]], Evaluation]


def judge(config: SmartSearchConfig, summary: Mapping[str, Any]) -> Evaluation:
    """A replay summary scored against the goal: a feasible evaluation."""
    goal = config.goal
    price = config.price_per_gpu_hour_usd()
    objectives = objective_vector(summary, goal.objectives, price_per_gpu_hour_usd=price)
    headline = goal.objectives[0] if goal.target == PARETO else goal.target
    return Evaluation(
        status="feasible",
        summary=dict(summary),
        objectives=objectives,
        score=score(summary, headline, price_per_gpu_hour_usd=price),
    )


def evaluate(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    """Replay a sample. Over budget or out of KV memory is infeasible; a candidate the replay
    refuses as configured (e.g. a perf provider without data for it) is unsupported; any other
    error propagates to ``run_guarded``, which records it as failed."""
    budget = config.search_space.gpu_budget
    if sample["used_gpus"] > budget:
        return Evaluation(
            status="infeasible",
            reason=f"over gpu_budget: used_gpus={sample['used_gpus']} > gpu_budget={budget}",
        )
    plan = deployment_plan(sample, config.goal)
    workload = replay_workload(config.workload, sample.get("concurrency"))
    try:
        report = simulate(
            plan, workload, sla=config.goal.sla, perf=config.sweep.perf, seed=config.sweep.random_seed
        )
    except InfeasibleError as err:
        return Evaluation(status="infeasible", reason=f"candidate KV capacity infeasible: {err}")
    except ConfigError as err:
        return Evaluation(status="unsupported", reason=str(err))
    return judge(config, report.summary)


def run_guarded(evaluator: Evaluator, config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    """Run an evaluator so that nothing escapes: an exception becomes a failed evaluation that
    carries its traceback (for the log) and a one-line reason (for the results)."""
    started = time.perf_counter()
    try:
        result = evaluator(config, sample)
    except Exception as err:
        result = Evaluation(
            status="failed",
            reason=f"replay failed: {type(err).__name__}: {err}",
            traceback=traceback.format_exc(),
        )
    return replace(result, wall_s=time.perf_counter() - started)


def timed_out(max_eval_seconds: float) -> Evaluation:
    return Evaluation(
        status="failed",
        reason=f"evaluation exceeded max_eval_seconds={max_eval_seconds:g}",
        wall_s=max_eval_seconds,
    )
