"""``python -m aisimulate.replay --config replay.yaml``: replay one deployment, print a summary.

    python -m aisimulate.replay --config examples/aisimulate/replay/synthetic_closed_loop.yaml \\
        [--json out.json] [--requests-csv requests.csv] [--timeline-csv timeline.csv]
        [--replicas-csv replicas.csv] [--exact]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aisimulate.cli_args import CliParser
from aisimulate.errors import ConfigError
from aisimulate.replay.config import load_replay_config
from aisimulate.replay.report import Report
from aisimulate.replay.simulation import simulate


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m aisimulate.replay", description="Replay a workload on one deployment.")
    parser.add_argument("--config", required=True, help="replay YAML (deployment, workload, sla, perf, seed)")
    parser.add_argument("--json", dest="json_path", default=None, help="write summary (and captures) as JSON")
    parser.add_argument("--requests-csv", default=None, help="write one row per request")
    parser.add_argument("--timeline-csv", default=None, help="write the time series (1 s intervals)")
    parser.add_argument("--replicas-csv", default=None, help="write the fleet after each planner change")
    parser.add_argument("--exact", action="store_true", help="plain pass-by-pass loop (slower reference)")
    return parser


def _write_atomic(path: str, write: Any) -> None:
    """Write through a temporary file so a crash never leaves half a result."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", newline="") as handle:
        write(handle)
    os.replace(tmp, target)


def _write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    def write(handle: Any) -> None:
        fields = list(rows[0]) if rows else []
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)

    _write_atomic(path, write)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render(report: Report, console: Console, title: str) -> None:
    s = report.summary
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("p50", justify="right")
    table.add_column("p90", justify="right")
    table.add_column("p99", justify="right")
    for label, key in (
        ("TTFT (ms)", "ttft"),
        ("ITL (ms)", "itl"),
        ("TPOT (ms)", "tpot"),
        ("E2E (ms)", "e2e_latency"),
    ):
        table.add_row(
            label, *(_fmt(s.get(f"{stat}_{key}_ms"), 2) for stat in ("mean", "median", "p90", "p99"))
        )
    console.print(table)
    facts = Table(show_header=False)
    facts.add_column("")
    facts.add_column("", justify="right")
    rows = [
        ("requests completed / rejected", f"{s['completed_requests']:,} / {s['rejected_requests']:,}"),
        ("duration (s)", _fmt(s["duration_ms"] / 1000, 2)),
        ("request throughput (req/s)", _fmt(s["request_throughput_rps"], 3)),
        ("output throughput (tok/s)", _fmt(s["output_throughput_tok_s"])),
        ("total throughput (tok/s)", _fmt(s["total_throughput_tok_s"])),
        ("GPU-hours", _fmt(s["gpu_hours"], 4)),
        ("prefix cache reuse", f"{s['prefix_cache_reused_ratio']:.1%}"),
        ("max KV usage", f"{s['max_kv_usage_ratio']:.1%}"),
        ("preemptions", _fmt(s["preemptions"])),
    ]
    if "kv_transfer_ms_mean" in s:
        rows.append(("KV transfer, mean (ms)", _fmt(s["kv_transfer_ms_mean"], 2)))
    if "planner_total_ticks" in s:
        rows.append(("average GPUs provisioned", _fmt(s["avg_gpu"], 2)))
        moves = f"{s['planner_scale_ups']:,} / {s['planner_scale_downs']:,}"
        rows.append(("planner ticks, scale-ups / downs", f"{s['planner_total_ticks']:,}; {moves}"))
    if "goodput_completed_requests" in s:
        rows.append(("goodput (req/s)", _fmt(s["goodput_request_throughput_rps"], 3)))
        rows.append(("requests meeting the SLA", f"{s['goodput_completed_requests']:,}"))
    rows.append(("perf model", s["perf_model"]))
    rows.append(("simulation wall time (ms)", _fmt(s["wall_time_ms"])))
    for label, value in rows:
        facts.add_row(label, value)
    console.print(facts)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        config = load_replay_config(args.config)
        report = simulate(
            config.plan,
            config.workload,
            sla=config.sla,
            perf=config.perf,
            perf_table=config.perf_table,
            seed=config.seed,
            exact=args.exact,
            capture_requests=args.requests_csv is not None,
            capture_timeline=args.timeline_csv is not None,
        )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plan = config.plan
    fleet = ", ".join(
        f"{role} {spec.replicas} x tp{spec.tp}" + (f"·dp{spec.attention_dp}" if spec.attention_dp > 1 else "")
        for role, spec, _ in plan.pools()
    )
    title = f"{plan.model} on {plan.system} ({plan.backend}; {fleet}; {plan.router.mode})"
    title += f" - {config.workload.mode} loop"
    render(report, console, title)
    if args.json_path:
        payload = {**report.to_dict(), "config": config.raw}
        _write_atomic(args.json_path, lambda handle: json.dump(payload, handle, indent=1, default=str))
    if args.requests_csv:
        _write_csv(args.requests_csv, report.requests or [])
    if args.timeline_csv:
        _write_csv(args.timeline_csv, report.timeline or [])
    if args.replicas_csv:
        _write_csv(args.replicas_csv, report.replicas or [])
    return 0
