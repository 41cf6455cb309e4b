"""Scoring: one definition of every objective, ranking, Pareto front and hypervolume.

The search loop, the optimizer adapter and the output all judge candidates by these functions, so
they are pure functions of plain data (a flat report dict, floats, strings) and can be tested and
reused without running a replay or an optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, Literal, TypeVar

Direction = Literal["max", "min"]
Report = Mapping[str, float]
P = TypeVar("P")

PARETO = "pareto"
_MS_PER_HOUR = 3_600_000.0

OBJECTIVE_DIRECTIONS: Mapping[str, Direction] = MappingProxyType(
    {
        "throughput": "max",
        "throughput_per_gpu": "max",
        "goodput": "max",
        "goodput_per_gpu": "max",
        "throughput_per_user": "max",
        "e2e_latency": "min",
        "cost_per_million_tokens": "min",
    }
)

# The unit of each objective's raw value, for labels.
OBJECTIVE_UNITS: Mapping[str, str] = MappingProxyType(
    {
        "throughput": "output tok/s",
        "throughput_per_gpu": "output tok/s per GPU",
        "goodput": "output tok/s within the SLA",
        "goodput_per_gpu": "output tok/s within the SLA per GPU",
        "throughput_per_user": "tok/s per user",
        "e2e_latency": "mean ms",
        "cost_per_million_tokens": "USD per million output tokens",
    }
)


@dataclass(frozen=True, kw_only=True)
class Scored(Generic[P]):
    """A candidate as ranking sees it; `payload` is whatever the caller needs back (config, report).

    `score` is signed so that higher is better; `objectives` holds raw values (unsigned, in each
    objective's own units) and is set only under a Pareto goal.
    """

    score: float
    used_gpus: int
    payload: P
    objectives: Mapping[str, float] | None = None


def direction(target: str) -> Direction:
    """Fails loudly on `pareto` and on typos, so a wrong goal never silently ranks the wrong way."""
    if target == PARETO:
        raise ValueError("'pareto' is a multi-objective target: it has no scalar direction or value")
    try:
        return OBJECTIVE_DIRECTIONS[target]
    except KeyError:
        known = ", ".join(OBJECTIVE_DIRECTIONS)
        raise ValueError(f"unknown optimization target {target!r}; expected one of: {known}") from None


def avg_gpu(report: Report) -> float:
    """Time-averaged provisioned GPUs, so an autoscaled deployment is charged for what it held on
    average rather than its peak; for a static deployment it is the fixed GPU count."""
    gpu_hours = report.get("gpu_hours", 0.0)
    duration_ms = report.get("duration_ms", 0.0)
    if gpu_hours > 0 and duration_ms > 0:
        return gpu_hours / (duration_ms / _MS_PER_HOUR)
    return 0.0


def _per_gpu(rate: float, report: Report) -> float:
    gpus = avg_gpu(report)
    return rate / gpus if gpus > 0 else 0.0


def _cost_per_million_tokens_usd(report: Report, price_per_gpu_hour_usd: float) -> float:
    # A run that produced no output has no finite cost per token: +inf ranks it last, never first.
    output_tokens = report.get("output_throughput_tok_s", 0.0) * report.get("duration_ms", 0.0) / 1000.0
    if output_tokens <= 0:
        return math.inf
    return report.get("gpu_hours", 0.0) * price_per_gpu_hour_usd / (output_tokens / 1e6)


def objective_value(report: Report, target: str, *, price_per_gpu_hour_usd: float | None = None) -> float:
    """Raw value in the objective's own units. Missing rates count as 0 and a missing latency as
    +inf, so a broken or empty run can never look good."""
    direction(target)
    if target == "cost_per_million_tokens":
        if price_per_gpu_hour_usd is None:
            raise ValueError("objective 'cost_per_million_tokens' needs price_per_gpu_hour_usd")
        return _cost_per_million_tokens_usd(report, price_per_gpu_hour_usd)
    if target == "e2e_latency":
        return report.get("mean_e2e_latency_ms", math.inf)
    throughput = report.get("output_throughput_tok_s", 0.0)
    goodput = report.get("goodput_output_throughput_tok_s", 0.0)
    return {
        "throughput": throughput,
        "throughput_per_gpu": _per_gpu(throughput, report),
        "goodput": goodput,
        "goodput_per_gpu": _per_gpu(goodput, report),
        "throughput_per_user": report.get("mean_output_token_throughput_per_user", 0.0),
    }[target]


def score(report: Report, target: str, *, price_per_gpu_hour_usd: float | None = None) -> float:
    """Signed so that every scalar goal is maximised: the optimizer and `rank` need one direction."""
    value = objective_value(report, target, price_per_gpu_hour_usd=price_per_gpu_hour_usd)
    return value if direction(target) == "max" else -value


def objective_vector(
    report: Report, objectives: Sequence[str], *, price_per_gpu_hour_usd: float | None = None
) -> dict[str, float]:
    """Raw (unsigned) values, because a Pareto front is shown and compared in real units."""
    return {
        name: objective_value(report, name, price_per_gpu_hour_usd=price_per_gpu_hour_usd)
        for name in objectives
    }


def is_feasible(used_gpus: int, gpu_budget: int) -> bool:
    """The GPU budget is the only gate; an SLA is already priced into goodput, not a hard filter."""
    return used_gpus <= gpu_budget


def rank(items: Iterable[Scored[P]]) -> list[Scored[P]]:
    """Best first; on equal scores the cheaper deployment wins, then the earlier one (stable sort)."""
    return sorted(items, key=lambda item: (-item.score, item.used_gpus))


def dominates(a: Mapping[str, float], b: Mapping[str, float], objectives: Sequence[str]) -> bool:
    """No epsilon: any tolerance would make dominance intransitive and the front order-dependent."""
    strictly_better = False
    for name in objectives:
        sign = 1.0 if direction(name) == "max" else -1.0
        mine, theirs = sign * a[name], sign * b[name]
        if mine < theirs:
            return False
        strictly_better = strictly_better or mine > theirs
    return strictly_better


def pareto_front(items: Iterable[Scored[P]], objectives: Sequence[str]) -> list[Scored[P]]:
    """Sorted along the last objective because that is the plot's x-axis. Exact duplicates do not
    dominate each other, so both stay: dropping one would hide a distinct deployment. An incomplete
    vector is an error rather than a default value, which would silently win or lose comparisons."""
    if not objectives:
        raise ValueError("a Pareto front needs at least one objective")
    vectors = [(item, item.objectives) for item in items if item.objectives is not None]
    for _, vector in vectors:
        missing = [name for name in objectives if name not in vector]
        if missing:
            raise ValueError(f"objective vector {dict(vector)} lacks {missing}")
    front = [
        (item, vector)
        for item, vector in vectors
        if not any(dominates(other, vector, objectives) for _, other in vectors)
    ]
    last = objectives[-1]
    return [item for item, _ in sorted(front, key=lambda pair: pair[1][last])]


def hypervolume(
    front_points: Sequence[Sequence[float]],
    reference_point: Sequence[float],
    directions: Sequence[Direction],
) -> float:
    """Volume dominated by the points and bounded by the reference point, exact in any dimension.

    Points are given in raw units with their directions, and minimised coordinates are negated
    internally, so the reference point is simply the worst acceptable value of each objective in its
    own units (e.g. 0 tok/s and 10,000 ms) rather than a pre-transformed corner. A point that is not
    strictly better than the reference in every objective adds nothing. Dominated points are allowed,
    so the whole history of evaluated points gives the same value as its front.
    """
    if len(reference_point) != len(directions) or not directions:
        raise ValueError(
            f"reference point has {len(reference_point)} coordinates but {len(directions)} directions given"
        )
    if any(d not in ("max", "min") for d in directions):
        raise ValueError(f"directions must be 'max' or 'min', got {list(directions)}")
    signs = [1.0 if d == "max" else -1.0 for d in directions]
    reference = tuple(s * r for s, r in zip(signs, reference_point, strict=True))
    points: list[tuple[float, ...]] = []
    for point in front_points:
        if len(point) != len(directions):
            raise ValueError(f"point {list(point)} has {len(point)} coordinates, expected {len(directions)}")
        signed = tuple(s * v for s, v in zip(signs, point, strict=True))
        if all(v > r for v, r in zip(signed, reference, strict=True)):
            points.append(signed)
    return _volume(points, reference) if points else 0.0


def _volume(points: list[tuple[float, ...]], reference: tuple[float, ...]) -> float:
    # Slice along the first objective (HSO): between two consecutive first coordinates, the slab is
    # covered exactly by the points at or beyond the upper one, projected onto the other objectives.
    if len(reference) == 1:
        return max(p[0] for p in points) - reference[0]
    if len(reference) == 2:
        return _area(points, reference)
    ordered = sorted(points, key=lambda p: p[0], reverse=True)
    volume = 0.0
    for i, point in enumerate(ordered):
        lower = ordered[i + 1][0] if i + 1 < len(ordered) else reference[0]
        if point[0] > lower:
            volume += (point[0] - lower) * _volume([p[1:] for p in ordered[: i + 1]], reference[1:])
    return volume


def _area(points: list[tuple[float, ...]], reference: tuple[float, ...]) -> float:
    # The 2-D base case as a sweep, O(n log n) instead of the recursion's O(n^2).
    ordered = sorted(points, key=lambda p: p[0], reverse=True)
    area, best_y = 0.0, reference[1]
    for i, (x, y) in enumerate(ordered):
        best_y = max(best_y, y)
        lower = ordered[i + 1][0] if i + 1 < len(ordered) else reference[0]
        area += (x - lower) * (best_y - reference[1])
    return area
