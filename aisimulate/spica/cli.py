"""``python -m aisimulate.spica --config sweep.yaml [--dry-run] ...``: run a search, or show it.

A search prints a one-line experimental notice on stderr, a progress bar, and at the end the
report (``report.py``: tallies, why candidates did not score, branch stops, the best candidate or
the front with its knobs and launch files, where every file is; ``--quiet``: its first line),
and writes its files to the output directory. Exit codes: 0 done, 1 no feasible candidate, 2 a
bad config or flag (one line naming file and field), 130 interrupted (the trials so far are kept
and summarised; ``--resume`` continues).

The dry run validates the config, resolves the model and system, enumerates every branch and
prints, per branch, its layouts before and after the KV filter, the viable backends and every
searched knob, plus the planner policies the goal cannot use, without replaying anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, get_args

import optuna
from pydantic import BaseModel
from rich.console import Console

from aisimulate.cli_args import CliParser
from aisimulate.errors import ConfigError
from aisimulate.spica.config import PerfProvider, SmartSearchConfig
from aisimulate.spica.experimental import NOTICE, ExperimentalWarning
from aisimulate.spica.knobs import NumericRange
from aisimulate.spica.output import LOG_FILE, SearchProgress, read_reference_curve, write_outputs
from aisimulate.spica.preflight import check_perf_provider
from aisimulate.spica.records import JOURNAL, Journal
from aisimulate.spica.report import reason_groups, render, summary_line
from aisimulate.spica.search import merge, run_smart_search
from aisimulate.spica.search_space import SearchPlan, enumerate_branches

NO_FEASIBLE = "no feasible candidate found (check backends / SLA / gpu_budget / replay errors)"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def build_parser() -> CliParser:
    parser = CliParser(
        prog="python -m aisimulate.spica",
        description="[EXPERIMENTAL] Search for the best deployment of a model on a GPU type within a GPU "
        "budget, by replaying candidates in the simulator.",
    )
    parser.add_argument("--config", required=True, help="search YAML (search_space, workload, goal, sweep)")
    parser.add_argument("--output-dir", type=Path, help="where results go (default: sweep.output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue the search in --output-dir")
    parser.add_argument("--max-rounds", type=_positive, help="override sweep.max_rounds")
    parser.add_argument("--parallel-evals", type=_positive, help="override sweep.parallel_evals")
    parser.add_argument("--executor", choices=("local", "ray"), help="override sweep.executor")
    parser.add_argument("--perf", choices=get_args(PerfProvider), help="override sweep.perf")
    parser.add_argument(
        "--reference-csv", type=Path, help="measured curve for pareto.png (tok_s_per_user, tok_s_per_gpu)"
    )
    parser.add_argument("--dry-run", action="store_true", help="enumerate the search, replay nothing")
    parser.add_argument("--quiet", action="store_true", help="one summary line: no progress bar, no report")
    parser.add_argument("--json", action="store_true", help="print results.json (or the dry run) as JSON")
    return parser


def _entry(value: Any) -> Any:
    """A knob entry as written: preset ids and numbers stay, dict entries become dicts again."""
    return value.model_dump(exclude_defaults=True) if isinstance(value, BaseModel) else value


def _knob(value: Any) -> dict[str, Any]:
    if isinstance(value, NumericRange):
        return {"low": value.low, "high": value.high, "log": value.log}
    return {"choices": [_entry(v) for v in value]}


def dry_run_summary(plan: SearchPlan) -> dict[str, Any]:
    return {
        "branches": [
            {
                "deployment_mode": b.deployment_mode,
                "pool_size_before_kv": b.pool_size_before_kv,
                "pool_size": len(b.pool),
                "backends": list(b.backends),
                "knobs": {name: _knob(value) for name, value in b.knobs.items()},
            }
            for b in plan.branches
        ],
        "dropped_policies": [_entry(p) for p in plan.dropped_policies],
    }


def _print_text(summary: dict[str, Any], warnings: Sequence[str]) -> None:
    for branch in summary["branches"]:
        print(
            f"{branch['deployment_mode']}: {branch['pool_size']} of {branch['pool_size_before_kv']} layouts "
            f"pass the KV filter; backends {', '.join(branch['backends'])}"
        )
        for name, knob in branch["knobs"].items():
            if "choices" in knob:
                text = ", ".join(json.dumps(c) if isinstance(c, dict) else str(c) for c in knob["choices"])
            else:
                text = f"[{knob['low']}, {knob['high']}]" + (" log" if knob["log"] else "")
            print(f"  {name}: {text}")
    if summary["dropped_policies"]:
        print("dropped planner policies: " + ", ".join(str(p) for p in summary["dropped_policies"]))
    for note in warnings:
        print(f"warning: {note}")


def _with_overrides(config: SmartSearchConfig, args: argparse.Namespace) -> SmartSearchConfig:
    flags = {
        "max_rounds": args.max_rounds,
        "parallel_evals": args.parallel_evals,
        "executor": args.executor,
        "perf": args.perf,
        "output_dir": args.output_dir,
    }
    overrides = {name: value for name, value in flags.items() if value is not None}
    if not overrides:
        return config
    data = json.loads(config.model_dump_json(exclude_defaults=True))
    data["sweep"] = {
        **data.get("sweep", {}),
        **{k: str(v) if isinstance(v, Path) else v for k, v in overrides.items()},
    }
    return SmartSearchConfig.from_mapping(data)


@contextmanager
def _logged_to(output_dir: Path) -> Iterator[None]:
    """Failed candidates' tracebacks go to OUTPUT_DIR/spica.log, not to the terminal."""
    output_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(output_dir / LOG_FILE, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("aisimulate.spica")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch scheduler's time limit, ``docker stop``): stopped as Ctrl-C is,
    so the trials so far are written out and the evaluation workers stopped, not orphaned."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _search(config: SmartSearchConfig, args: argparse.Namespace) -> int:
    output_dir = config.sweep.output_dir
    reference = read_reference_curve(args.reference_csv) if args.reference_csv else None
    console = Console(stderr=True, quiet=args.quiet or args.json)
    progress = SearchProgress(config, len(enumerate_branches(config).branches), console)
    try:
        with _logged_to(output_dir), progress.shown(), _terminate_as_interrupt():
            result = run_smart_search(
                config, output_dir=output_dir, resume=args.resume, on_trial=progress.on_trial
            )
    except KeyboardInterrupt as stop:
        plan = enumerate_branches(config)
        records = {(r.branch, r.trial_number): r for r in Journal(output_dir / JOURNAL).read()}
        result = merge(config, records, plan)
        write_outputs(output_dir, result, config, reference)
        print(
            f"interrupted: {len(records)} trial(s) kept in {output_dir}; continue with --resume",
            file=sys.stderr,
        )
        return 143 if isinstance(stop, Terminated) else 130
    content = write_outputs(output_dir, result, config, reference)
    if args.json:
        print(json.dumps(content))
    elif args.quiet:
        print(summary_line(result, output_dir))
    else:
        Console().print(render(result, config, output_dir))
    if not result.best:
        groups = reason_groups(result.records)
        why = f"; most often {groups[0].status}: {groups[0].example.reason}" if groups else ""
        print(f"error: {NO_FEASIBLE}{why}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.reference_csv is not None and not args.reference_csv.is_file():
        print(f"error: --reference-csv: no such file: {args.reference_csv}", file=sys.stderr)
        return 2
    try:
        config = _with_overrides(SmartSearchConfig.from_yaml(args.config), args)
        if args.dry_run:
            plan = enumerate_branches(config)
            check_perf_provider(config, plan)
        else:
            print(NOTICE, file=sys.stderr)  # the notice once, as one line, not as a warning too
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                return _search(config, args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = dry_run_summary(plan)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_text(summary, plan.warnings)
    return 0
