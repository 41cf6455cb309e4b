"""Everything a search shows or writes: the progress bar, the final table, ``results.json``,
``results.csv``, ``pareto.png``, ``convergence.png`` and the ``deploy/`` artifacts of the best
candidates (the end-of-run report is ``report.py``).

Only this module and the CLI write for the user; the search itself returns plain data.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from aisimulate.spica.artifacts import dynamo_graph_deployment, gpus_per_engine, launch_commands, roles
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.records import TrialRecord
from aisimulate.spica.score import OBJECTIVE_DIRECTIONS, OBJECTIVE_UNITS, PARETO, hypervolume
from aisimulate.spica.search import SearchResult, reference_point

RESULTS_JSON, RESULTS_CSV, PARETO_PNG, DEPLOY_DIR = "results.json", "results.csv", "pareto.png", "deploy"
CONVERGENCE_PNG, LOG_FILE = "convergence.png", "spica.log"
MAX_DEPLOY_ARTIFACTS = 3  # best candidates (or front points) that get launch files
_TABLE_ROWS = 10


def describe(sample: Mapping[str, Any]) -> dict[str, str]:
    """A candidate in words: what an operator needs to stand it up."""
    shapes, batching = [], []
    for role, prefix in roles(sample):
        shape = f"tp{sample[f'{prefix}tp']}"
        if sample[f"{prefix}attention_dp"] > 1:
            shape += f"·dp{sample[f'{prefix}attention_dp']}"
        if sample[f"{prefix}moe_ep"] > 1:
            shape += f"·ep{sample[f'{prefix}moe_ep']}"
        label = "" if role == "agg" else f"{role} "
        shapes.append(
            f"{label}{sample[f'{prefix}replicas']}× {shape} ({gpus_per_engine(sample, prefix)} GPU each)"
        )
        batching.append(
            f"{label}seqs {sample[f'{role}_max_num_seqs']}, tokens {sample[f'{role}_max_num_batched_tokens']}"
        )
    policy = sample.get("planner_scaling_policy", "disabled")
    return {
        "mode": sample["deployment_mode"],
        "backend": sample["backend"],
        "shape": "; ".join(shapes),
        "gpus": str(sample["used_gpus"]),
        "batching": "; ".join(batching),
        "router": sample.get("router_mode", "round_robin"),
        "planner": policy if isinstance(policy, str) else json.dumps(policy, sort_keys=True),
        "concurrency": str(sample.get("concurrency", "-")),
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def spelled_out(sample: Mapping[str, Any]) -> str:
    words = describe(sample)
    concurrency = "" if words["concurrency"] == "-" else f" · concurrency {words['concurrency']}"
    return (
        f"{words['mode']} {words['backend']} · {words['shape']} · {words['gpus']} GPUs · {words['batching']}"
        f" · router {words['router']} · planner {words['planner']}{concurrency}"
    )


def result_table(result: SearchResult) -> Table:
    """The ranked candidates (the first ten) or the whole Pareto front, each deployment in words."""
    pareto = result.goal.target == PARETO
    title = f"Pareto front ({len(result.best)} points)" if pareto else f"best of {len(result.best)} feasible"
    table = Table(title=title)
    names = list(result.goal.objectives)
    for column in ("#", *names, "deployment"):
        table.add_column(column, overflow="fold")
    for i, record in enumerate(result.best if pareto else result.best[:_TABLE_ROWS], start=1):
        assert record.sample is not None and record.objectives is not None
        values = [_fmt(record.objectives[n]) for n in names]
        table.add_row(str(i), *values, spelled_out(record.sample))
    return table


def results_json(result: SearchResult, config: SmartSearchConfig) -> dict[str, Any]:
    history = "hypervolume_by_round" if result.goal.target == PARETO else "best_value_by_round"
    return {
        "goal": config.goal.model_dump(mode="json"),
        "best": [
            {
                "trial_number": r.trial_number,
                "branch": r.branch,
                "sample": r.sample,
                "objectives": r.objectives,
                "score": r.score,
                "summary": r.summary,
            }
            for r in result.best
        ],
        "tallies": dict(result.tallies),
        "branches": [asdict(outcome) for outcome in result.branches],
        "notes": notes(result),
        history: list(result.progress_by_round),
        "load_predictor": result.forecasters.to_json(),
        "config": config.model_dump(mode="json"),
    }


def notes(result: SearchResult) -> list[str]:
    """What the search left out before its first ask: skipped modes and unusable planner policies."""
    dropped = result.plan.dropped_policies
    if not dropped:
        return list(result.plan.warnings)
    names = ", ".join(
        p if isinstance(p, str) else json.dumps(p.model_dump(), sort_keys=True) for p in dropped
    )
    return [
        *result.plan.warnings,
        f"planner_scaling_policy entries the goal cannot use (not searched): {names}",
    ]


def strict_json(value: Any) -> Any:
    """inf and nan become null: results.json is read by tools that reject JSON's extensions."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def write_csv(path: Path, records: Sequence[TrialRecord], objectives: Sequence[str]) -> None:
    sample_keys: dict[str, None] = {}
    for record in records:
        sample_keys.update(dict.fromkeys(record.sample or {}))
    fields = ["trial_number", "branch", "round", "status", "reason", "score", *objectives, "wall_s"]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([*fields, *sample_keys])
        for r in records:
            values = [r.trial_number, r.branch, r.round, r.status, r.reason, r.score]
            values += [(r.objectives or {}).get(name) for name in objectives] + [round(r.wall_s, 4)]
            writer.writerow([*values, *(_cell((r.sample or {}).get(k)) for k in sample_keys)])


def read_reference_curve(path: Path) -> list[tuple[float, float]]:
    """(tok/s per user, tok/s per GPU) points of a measured curve, sorted along x."""
    with path.open(newline="", encoding="utf-8") as source:
        rows = list(csv.DictReader(source))
    return sorted((float(row["tok_s_per_user"]), float(row["tok_s_per_gpu"])) for row in rows)


def plot_pareto(
    path: Path, result: SearchResult, reference_curve: Sequence[tuple[float, float]] | None = None
) -> None:
    """All feasible points and the front: x is the last objective (the front's order), y the first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_name, y_name = result.goal.objectives[-1], result.goal.objectives[0]
    feasible = [r.objectives for r in result.records if r.status == "feasible" and r.objectives]
    front = [r.objectives for r in result.best if r.objectives]
    figure, axes = plt.subplots(figsize=(7, 5))
    axes.scatter(
        [p[x_name] for p in feasible], [p[y_name] for p in feasible], s=12, alpha=0.4, label="evaluated"
    )
    axes.plot([p[x_name] for p in front], [p[y_name] for p in front], "o-", color="C3", label="Pareto front")
    if reference_curve:
        axes.plot(*zip(*reference_curve, strict=True), "s--", color="C2", label="reference")
    axes.set_xlabel(f"{x_name} ({OBJECTIVE_UNITS[x_name]})")
    axes.set_ylabel(f"{y_name} ({OBJECTIVE_UNITS[y_name]})")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_convergence(path: Path, result: SearchResult) -> None:
    """The search's progress by round: the front's hypervolume (Pareto) or the best value of the
    objective so far, one point per round, branches one after another."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pareto = result.goal.target == PARETO
    objective = result.goal.target
    label = "hypervolume" if pareto else f"best {objective}"
    title = "hypervolume of the front so far" if pareto else f"best so far, {OBJECTIVE_UNITS[objective]}"
    x = list(range(1, len(result.progress_by_round) + 1))
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(x, result.progress_by_round, "o-", color="C0")
    for i, (branch, round_no) in enumerate(result.rounds):
        if round_no == 1:
            axes.axvline(x[i] - 0.5, color="0.7", linestyle=":")
            axes.annotate(branch, (x[i] - 0.4, 1.0), xycoords=("data", "axes fraction"), va="top")
    axes.set_xlabel("round (branches in search order)")
    axes.set_ylabel(label)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def deploy_folder(directory: Path, rank: int, record: TrialRecord) -> Path:
    """Where the launch files of the ``rank``-th best candidate (1-based) go."""
    return directory / f"{rank:02d}_{record.branch}_trial{record.trial_number}"


def write_deploy_artifacts(directory: Path, result: SearchResult) -> list[Path]:
    written = []
    for i, record in enumerate(result.best[:MAX_DEPLOY_ARTIFACTS], start=1):
        assert record.sample is not None
        folder = deploy_folder(directory, i, record)
        folder.mkdir(parents=True, exist_ok=True)
        launch = folder / "launch.sh"
        launch.write_text(launch_commands(record.sample), encoding="utf-8")
        name = f"spica-{record.branch}-{record.sample['backend']}-{i}"
        (folder / "dynamo_graph_deployment.yaml").write_text(
            dynamo_graph_deployment(record.sample, name), encoding="utf-8"
        )
        (folder / "sample.json").write_text(json.dumps(record.sample, indent=2), encoding="utf-8")
        written.append(folder)
    return written


def write_outputs(
    output_dir: Path,
    result: SearchResult,
    config: SmartSearchConfig,
    reference_curve: Sequence[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """Write every result file; returns the ``results.json`` content."""
    output_dir.mkdir(parents=True, exist_ok=True)
    content = strict_json(results_json(result, config))
    (output_dir / RESULTS_JSON).write_text(json.dumps(content, indent=2, allow_nan=False), encoding="utf-8")
    write_csv(output_dir / RESULTS_CSV, result.records, result.goal.objectives)
    if result.goal.target == PARETO and result.best:
        plot_pareto(output_dir / PARETO_PNG, result, reference_curve)
    if any(math.isfinite(value) for value in result.progress_by_round):  # nan until something scores
        plot_convergence(output_dir / CONVERGENCE_PNG, result)
    if result.best:
        write_deploy_artifacts(output_dir / DEPLOY_DIR, result)
    return content


def _progress_text(result_goal_target: str, best: float | None) -> str:
    label = "hypervolume" if result_goal_target == PARETO else "best"
    return f"{label} {_fmt(best)}"


class SearchProgress:
    """A rich progress bar over new evaluations: done, feasible, best (or hypervolume), ETA."""

    def __init__(self, config: SmartSearchConfig, branches: int, console: Console) -> None:
        self._goal = config.goal
        self._total = branches * config.sweep.max_rounds * config.sweep.candidates_per_round
        self._feasible: list[TrialRecord] = []
        self._progress = Progress(
            TextColumn("spica"),
            BarColumn(),
            TextColumn(
                "{task.completed}/{task.total} trials · {task.fields[feasible]} feasible"
                " · {task.fields[best]}"
            ),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task("search", total=self._total, feasible=0, best="-")

    @contextmanager
    def shown(self) -> Iterator[SearchProgress]:
        with self._progress:
            yield self

    def on_trial(self, record: TrialRecord) -> None:
        if record.status == "duplicate":
            return
        if record.status == "feasible":
            self._feasible.append(record)
        self._progress.update(
            self._task,
            advance=1,
            feasible=len(self._feasible),
            best=_progress_text(self._goal.target, self._best()),
        )

    def _best(self) -> float | None:
        if not self._feasible:
            return None
        if self._goal.target != PARETO:  # the raw value of the best score, in the goal's units
            best = max(self._feasible, key=lambda r: r.score if r.score is not None else -math.inf)
            return (best.objectives or {}).get(self._goal.target)
        names = self._goal.objectives
        points = [
            [r.objectives[n] for n in names]
            for r in self._feasible
            if r.objectives and all(math.isfinite(r.objectives[n]) for n in names)
        ]
        return hypervolume(
            points, reference_point(self._goal, points), [OBJECTIVE_DIRECTIONS[n] for n in names]
        )
