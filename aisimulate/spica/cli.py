"""``python -m aisimulate.spica --config sweep.yaml --dry-run [--json]``: what would be searched.

The dry run validates the config, resolves the model and system, enumerates every branch and
prints, per branch, its layouts before and after the KV filter, the viable backends and every
searched knob, plus the planner policies the goal cannot use, without replaying anything.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from aisimulate.cli_args import CliParser
from aisimulate.errors import ConfigError
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.knobs import NumericRange
from aisimulate.spica.search_space import SearchPlan, enumerate_branches


def build_parser() -> CliParser:
    parser = CliParser(prog="python -m aisimulate.spica", description="Search for the best deployment.")
    parser.add_argument("--config", required=True, help="search YAML (search_space, workload, goal, sweep)")
    parser.add_argument("--dry-run", action="store_true", help="enumerate the search, replay nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print one JSON object")
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.dry_run:
        print("error: the search loop is not built yet; run with --dry-run", file=sys.stderr)
        return 2
    try:
        config = SmartSearchConfig.from_yaml(args.config)
        plan = enumerate_branches(config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = dry_run_summary(plan)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_text(summary, plan.warnings)
    return 0
