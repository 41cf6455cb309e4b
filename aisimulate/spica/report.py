"""The report a search prints when it ends: what ran, why candidates did not score, where
branches stopped and why, the best candidate (or the front) with its knobs and launch files, and
where every file is. ``--quiet`` keeps its first line only (``summary_line``).

A run that found nothing is explained too: the reasons table then holds every evaluation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.output import (
    CONVERGENCE_PNG,
    DEPLOY_DIR,
    LOG_FILE,
    MAX_DEPLOY_ARTIFACTS,
    PARETO_PNG,
    RESULTS_CSV,
    RESULTS_JSON,
    deploy_folder,
    notes,
    result_table,
    spelled_out,
)
from aisimulate.spica.records import JOURNAL, TrialRecord
from aisimulate.spica.score import OBJECTIVE_UNITS, PARETO
from aisimulate.spica.search import STUDY_DB, SearchResult

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_NOT_SCORED = ("infeasible", "failed", "unsupported")


@dataclass(frozen=True, kw_only=True)
class ReasonGroup:
    """Trials that did not score for the same reason (numbers aside), and the first of them."""

    status: str
    count: int
    example: TrialRecord


def reason_groups(records: Sequence[TrialRecord]) -> list[ReasonGroup]:
    """Most frequent first. Reasons that differ only in their numbers (GPU counts, sizes,
    seconds) are one group, so a hundred over-budget layouts make one line."""
    groups: dict[tuple[str, str], list[TrialRecord]] = {}
    for record in records:
        if record.status in _NOT_SCORED:
            key = (record.status, _NUMBER.sub("#", record.reason or record.status))
            groups.setdefault(key, []).append(record)
    ordered = sorted(groups.values(), key=lambda members: -len(members))
    return [ReasonGroup(status=m[0].status, count=len(m), example=m[0]) for m in ordered]


def _tallies(result: SearchResult) -> str:
    return ", ".join(f"{count} {status}" for status, count in result.tallies.items() if count)


def _value(record: TrialRecord, objective: str) -> str:
    value = (record.objectives or {}).get(objective)
    return "-" if value is None else f"{value:.4g} {OBJECTIVE_UNITS[objective]}"


def summary_line(result: SearchResult, output_dir: Path) -> str:
    """The whole run in one line: trials, time, the best (or the front's size), where results are."""
    took = f" in {result.wall_s:.1f} s" if result.wall_s else ""
    head = f"spica: {len(result.records)} trial(s){took} ({_tallies(result) or 'none'})"
    if not result.best:
        groups = reason_groups(result.records)
        why = f"; most often {groups[0].status}: {groups[0].example.reason}" if groups else ""
        return f"{head}; no feasible candidate{why}; results in {output_dir}"
    if result.goal.target == PARETO:
        return f"{head}; Pareto front of {len(result.best)} point(s); results in {output_dir}"
    best = result.best[0]
    assert best.sample is not None
    target = result.goal.target
    return (
        f"{head}; best {target} {_value(best, target)}: {spelled_out(best.sample)}; results in {output_dir}"
    )


def _branches(result: SearchResult) -> Table:
    table = Table(title="branches", title_justify="left", show_edge=False)
    for column in ("branch", "rounds", "asks", "new samples", "feasible", "how it ended"):
        table.add_column(column, overflow="fold")
    for outcome in result.branches:
        feasible = sum(r.status == "feasible" for r in result.records if r.branch == outcome.deployment_mode)
        ended = f"stopped: {outcome.stopped}" if outcome.stopped else "ran every round"
        if not feasible:
            ended += "; no feasible candidate"
        table.add_row(
            outcome.deployment_mode,
            str(outcome.rounds),
            str(outcome.asks),
            str(outcome.new_samples),
            str(feasible),
            ended,
        )
    return table


def _reasons(groups: Sequence[ReasonGroup]) -> Table:
    table = Table(title="why candidates did not score", title_justify="left", show_edge=False)
    for column in ("status", "trials", "reason (first example)"):
        table.add_column(column, overflow="fold")
    for group in groups:
        example = group.example
        table.add_row(
            group.status,
            str(group.count),
            f"{example.reason} ({example.branch} trial {example.trial_number})",
        )
    return table


def _knobs(result: SearchResult, record: TrialRecord) -> str:
    """The searched knobs' values in this candidate (those its branch searches)."""
    assert record.sample is not None
    branch = next((b for b in result.plan.branches if b.deployment_mode == record.branch), None)
    names = list(branch.knobs) if branch is not None else []
    names += [n for n in ("kv_load_ratio", "concurrency") if n in record.sample and n not in names]
    return ", ".join(f"{n}={_show(record.sample[n])}" for n in names if n in record.sample)


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _best(result: SearchResult, output_dir: Path) -> list[RenderableType]:
    lines: list[RenderableType] = []
    pareto = result.goal.target == PARETO
    # The table ranks the rest; the winner (or each front point with launch files) in full.
    for rank, record in enumerate(result.best[: MAX_DEPLOY_ARTIFACTS if pareto else 1], start=1):
        assert record.sample is not None
        values = " · ".join(f"{o} {_value(record, o)}" for o in result.goal.objectives)
        label = f"front point {rank}" if pareto else "best"
        launch = deploy_folder(output_dir / DEPLOY_DIR, rank, record) / "launch.sh"
        lines.append(Text(f"{label}: {values} ({record.branch} trial {record.trial_number})", style="bold"))
        lines.append(Text(f"  {spelled_out(record.sample)}"))
        lines.append(Text(f"  knobs: {_knobs(result, record)}"))
        lines.append(Text(f"  launch: {launch}"))
    return lines


def files(config: SmartSearchConfig, output_dir: Path) -> list[tuple[str, str]]:
    """(where, what) for every file the run left, in the order a reader wants them."""
    study = output_dir / STUDY_DB
    storage = config.sweep.storage or f"{study} (browse: optuna-dashboard sqlite:///{study.resolve()})"
    found = [
        (output_dir / RESULTS_JSON, "the best candidates, tallies, progress by round, the config"),
        (output_dir / RESULTS_CSV, "every trial, one row each, with its sample"),
        (output_dir / JOURNAL, "the trial journal; --resume continues from it"),
        (output_dir / CONVERGENCE_PNG, "hypervolume or best value by round"),
        (output_dir / PARETO_PNG, "every feasible point and the front"),
        (output_dir / DEPLOY_DIR, f"launch.sh and a Dynamo manifest for the best {MAX_DEPLOY_ARTIFACTS}"),
        (output_dir / LOG_FILE, "tracebacks of failed candidates, branch stops"),
    ]
    listed = [(str(path), what) for path, what in found if path.exists()]
    return [*listed, (storage, "the Optuna studies")]


def render(result: SearchResult, config: SmartSearchConfig, output_dir: Path) -> Group:
    """The whole report as one rich renderable (print it with a ``rich.console.Console``)."""
    parts: list[RenderableType] = [Text(summary_line(result, output_dir), style="bold")]
    if result.branches:
        parts.append(_branches(result))
    parts.extend(Text(f"note: {note}") for note in notes(result))
    groups = reason_groups(result.records)
    if groups:
        parts.append(_reasons(groups))
    if result.best:
        parts.append(result_table(result))
        parts.extend(_best(result, output_dir))
    listing = Table(title="files", title_justify="left", show_edge=False, show_header=False)
    listing.add_column("where", overflow="fold")
    listing.add_column("what", overflow="fold")
    for where, what in files(config, output_dir):
        listing.add_row(where, what)
    parts.append(listing)
    return Group(*parts)
