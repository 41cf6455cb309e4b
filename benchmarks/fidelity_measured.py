"""Predicted vs measured TTFT and TPOT of closed-loop serving benchmarks, row by row.

    python benchmarks/fidelity_measured.py --csv benchmarks/data/calibration/e2e_measured_h100.csv \
        [--perf analytic|aic|auto|polynomial] [--out rows.csv] [--every K] [--quiet]

Each row (system, backend, model, precision, isl, osl, concurrency, shape, measured mean TTFT and
TPOT) is replayed as its closed-loop synthetic benchmark on one aggregated worker of that shape,
with max(100, 10 x concurrency) requests, all counted as the load generator counts them; the
steady-state errors drop the first and last ``concurrency`` requests. Prints every row, every
(system, backend, model) group, the rows the calibration was fitted on vs the held-out rows,
the skipped rows with their reasons, and one JSON summary line. ``--every K`` replays every K-th
row only (a quick look). A malformed file exits 2 with one line naming the cell.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from aisimulate.catalog import get_model
from aisimulate.cli_args import CliParser
from aisimulate.errors import ConfigError
from aisimulate.fidelity import (
    Prediction,
    ReplayCase,
    Skipped,
    build_case,
    error_stats,
    predict,
    read_measured,
    signed_error_pct,
)
from aisimulate.fidelity.measured import MeasuredRow
from aisimulate.perf.calibration import e2e_fitted_models

PERF_CHOICES = ("analytic", "aic", "auto", "polynomial")  # the providers that need no file of their own
OUT_COLUMNS = (
    "id",
    "status",
    "model",
    "checkpoint",
    "backend",
    "async_scheduling",
    "frontend_latency_ms",
    "predicted_ttft_ms",
    "measured_ttft_ms",
    "ttft_error_pct",
    "predicted_tpot_ms",
    "measured_tpot_ms",
    "tpot_error_pct",
    "steady_ttft_error_pct",
    "steady_tpot_error_pct",
    "fitted",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    row: MeasuredRow
    case: ReplayCase
    prediction: Prediction
    fitted: bool

    @property
    def checkpoint(self) -> str:
        return self.case.model

    def error(self, metric: str, *, steady: bool = False) -> float:
        measured = self.row.measured_ms(metric)
        assert measured is not None  # rows without it are skipped
        return signed_error_pct(self.prediction.latency_ms(metric, steady=steady), measured)


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", required=True, type=Path, help="measured benchmarks (see the docstring)")
    parser.add_argument(
        "--perf", default="analytic", choices=PERF_CHOICES, help="latency provider (default: analytic)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write one row per input row as CSV")
    parser.add_argument("--every", type=int, default=1, help="replay every K-th row only")
    parser.add_argument("--quiet", action="store_true", help="no per-row lines")
    return parser


def _stats_block(outcomes: list[Outcome]) -> dict[str, dict]:
    out = {}
    for metric in ("ttft", "tpot"):
        out[metric] = error_stats(o.error(metric) for o in outcomes).as_dict()
        out[f"steady_{metric}"] = error_stats(o.error(metric, steady=True) for o in outcomes).as_dict()
    return out


def _line(label: str, outcomes: list[Outcome]) -> str:
    s = _stats_block(outcomes)
    return (
        f"{label:58s} {len(outcomes):4d}  TTFT med {s['ttft']['median_abs_pct']:6.1f}% "
        f"mean {s['ttft']['mean_abs_pct']:6.1f}%  TPOT med {s['tpot']['median_abs_pct']:5.1f}% "
        f"mean {s['tpot']['mean_abs_pct']:5.1f}%  (steady TTFT {s['steady_ttft']['median_abs_pct']:6.1f}%, "
        f"TPOT {s['steady_tpot']['median_abs_pct']:5.1f}%)"
    )


def _write_out(path: Path, results: list[Outcome | Skipped]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=OUT_COLUMNS)
        writer.writeheader()
        for r in results:
            row = r.row
            base = {
                "id": row.id,
                "model": row.model,
                "backend": row.backend,
                "measured_ttft_ms": row.measured_ttft_ms,
                "measured_tpot_ms": row.measured_tpot_ms,
            }
            if isinstance(r, Skipped):
                writer.writerow({**base, "status": f"skipped: {r.reason}"})
                continue
            p = r.prediction
            writer.writerow(
                {
                    **base,
                    "status": "ok",
                    "checkpoint": r.checkpoint,
                    "async_scheduling": r.case.plan.async_scheduling(r.case.plan.pools()[0][1]),
                    "frontend_latency_ms": r.case.plan.frontend_latency_ms,
                    "predicted_ttft_ms": round(p.ttft_ms, 3),
                    "predicted_tpot_ms": round(p.tpot_ms, 4),
                    "ttft_error_pct": round(r.error("ttft"), 2),
                    "tpot_error_pct": round(r.error("tpot"), 2),
                    "steady_ttft_error_pct": round(r.error("ttft", steady=True), 2),
                    "steady_tpot_error_pct": round(r.error("tpot", steady=True), 2),
                    "fitted": r.fitted,
                }
            )


def run(args: argparse.Namespace) -> int:
    if args.every < 1:
        raise ConfigError(f"`--every >= 1` must hold, but got {args.every}", where="--every")
    rows = read_measured(args.csv)[:: args.every]
    fitted_models = (
        {get_model(name).source for name in e2e_fitted_models()} if args.perf == "analytic" else set()
    )
    results: list[Outcome | Skipped] = []
    if not args.quiet:
        print(
            f"{'line':>5s} {'model':34s} {'backend':7s} {'shape':10s} {'isl/osl/c':15s} "
            f"{'TTFT pred/meas ms':>22s} {'err':>7s} {'TPOT pred/meas ms':>17s} {'err':>7s}"
        )
    for row in rows:
        case = build_case(row)
        result = case if isinstance(case, Skipped) else predict(case, perf=args.perf)
        if isinstance(result, Skipped):
            results.append(result)
            continue
        assert not isinstance(case, Skipped)
        fitted = get_model(row.model).source in fitted_models
        outcome = Outcome(row=row, case=case, prediction=result, fitted=fitted)
        results.append(outcome)
        if not args.quiet:
            p = result
            shape = (
                f"tp{row.tp}"
                + (f"pp{row.pp}" if row.pp > 1 else "")
                + (f"ep{row.moe_ep}" if row.moe_ep > 1 else "")
            )
            print(
                f"{row.line:5d} {case.model[-34:]:34s} {row.backend:7s} {shape:10s} "
                f"{f'{row.isl}/{row.osl}/{row.concurrency}':15s} "
                f"{p.ttft_ms:10.1f}/{row.measured_ttft_ms:<11.1f} {outcome.error('ttft'):+6.1f}% "
                f"{p.tpot_ms:7.2f}/{row.measured_tpot_ms:<9.2f} {outcome.error('tpot'):+6.1f}%"
            )
    outcomes = [r for r in results if isinstance(r, Outcome)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    groups: dict[tuple[str, str, str], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.row.system, o.row.backend, o.checkpoint)].append(o)
    print("\nper (system, backend, model): rows, median/mean |error|")
    for key, members in sorted(groups.items()):
        print(_line(" ".join(key), members))
    print()
    print(_line("all replayed rows", outcomes))
    fitted = [o for o in outcomes if o.fitted]
    held_out = [o for o in outcomes if not o.fitted]
    if fitted_models:
        print(_line("rows the end-to-end calibration was fitted on", fitted))
        print(_line("held-out rows (never fitted on)", held_out))
        for model in sorted({o.row.model for o in held_out}):
            print(_line(f"  held out: {model}", [o for o in held_out if o.row.model == model]))
    if skipped:
        print(f"\nskipped {len(skipped)} row(s):")
        for s in skipped:
            print(f"  line {s.row.line} {s.row.id}: {s.reason}")
    if args.out is not None:
        _write_out(args.out, results)
    summary = {
        "benchmark": "fidelity_measured",
        "csv": str(args.csv),
        "perf": args.perf,
        "rows": len(rows),
        "replayed": len(outcomes),
        "skipped": len(skipped),
        "all": _stats_block(outcomes),
    }
    if fitted_models:
        by_model: dict[str, list[Outcome]] = defaultdict(list)
        for o in held_out:
            by_model[o.row.model].append(o)
        summary.update(
            fitted=_stats_block(fitted),
            held_out=_stats_block(held_out),
            held_out_by_model={m: _stats_block(members) for m, members in sorted(by_model.items())},
        )
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
