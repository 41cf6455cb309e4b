"""Predicted vs measured TTFT and TPOT of closed-loop serving benchmarks, row by row.

    python benchmarks/fidelity_measured.py (--csv FILE | --aic-silicon) [--systems S,..] [--models M,..]
        [--modes agg,disagg] [--backends B,..] [--acceptance S,..]
        [--perf analytic|aic|auto|polynomial] [--out rows.csv] [--every K] [--quiet]

Reads our measured-benchmark format or AIConfigurator's serving-run format (``--aic-silicon``: the
installed ``systems/silicon_sample.csv``). Each row is replayed as its closed-loop benchmark:
aggregated rows on their workers, disaggregated rows on their prefill and decode pools with the
KV transfer over the system's links, max(100, 10 x concurrency) requests counted as the load
generator counts them; the steady-state errors drop the first and last ``concurrency``
requests. A row that cannot be built or replayed is skipped with its reason; no row stops the
run. Prints every row, every (system, backend, model, mode) group, each split (development,
validation; see ``aisimulate.fidelity.split``) by mode, backend and model with its coverage, the
end-to-end calibration's fitted vs held-out rows, the skipped rows' reasons, and one JSON summary
line. The acceptance systems' rows are held back unless ``--acceptance`` names them.
``--every K`` replays every K-th row only, ``--max-concurrency C`` the rows of at most C users
(both time boxes: say so when quoting their numbers). A malformed file exits 2 with one line.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aisimulate.catalog import get_model
from aisimulate.cli_args import CliParser
from aisimulate.errors import ConfigError, UnknownNameError
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
from aisimulate.fidelity.client import client_of
from aisimulate.fidelity.measured import MeasuredRow, aic_silicon_path
from aisimulate.fidelity.split import ACCEPTANCE_SYSTEMS, SPLITS, split_of
from aisimulate.perf.calibration import e2e_fitted_models
from aisimulate.replay.workers import resolve_frontend_latency_ms

PERF_CHOICES = ("analytic", "aic", "auto", "polynomial")  # the providers that need no file of their own
OUT_COLUMNS = (
    "id",
    "status",
    "split",
    "system",
    "mode",
    "model",
    "checkpoint",
    "client",
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
    "nextn",
    "workers_from",
)
LISTED_SKIPS = 40  # more skipped rows than this are summarised by reason (all of them are in --out)


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


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--csv", type=Path, help="measured benchmarks (see the docstring)")
    source.add_argument(
        "--aic-silicon", action="store_true", help="AIConfigurator's installed systems/silicon_sample.csv"
    )
    parser.add_argument("--systems", type=_names, default=None, help="only these systems (comma-separated)")
    parser.add_argument(
        "--models", type=_names, default=None, help="only these models, as the file names them"
    )
    parser.add_argument(
        "--modes", type=_names, default=None, help="only these modes (agg, disagg; comma-separated)"
    )
    parser.add_argument(
        "--backends", type=_names, default=None, help="only these backends (sglang, trtllm, vllm)"
    )
    parser.add_argument(
        "--acceptance",
        type=_names,
        default=[],
        help=f"replay these acceptance-set systems ({', '.join(sorted(ACCEPTANCE_SYSTEMS))}) too",
    )
    parser.add_argument(
        "--perf", default="analytic", choices=PERF_CHOICES, help="latency provider (default: analytic)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write one row per input row as CSV")
    parser.add_argument("--every", type=int, default=1, help="replay every K-th row only")
    parser.add_argument(
        "--max-concurrency", type=int, default=None, help="only rows of at most this many users (a time box)"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-row lines")
    parser.add_argument(
        "--cuda-graph-padding",
        action="store_true",
        help="price passes at the backend's captured CUDA-graph batch sizes (engine switch, off by default)",
    )
    return parser


def _stats_block(outcomes: list[Outcome]) -> dict[str, dict]:
    out = {}
    for metric in ("ttft", "tpot"):
        out[metric] = error_stats(o.error(metric) for o in outcomes).as_dict()
        out[f"steady_{metric}"] = error_stats(o.error(metric, steady=True) for o in outcomes).as_dict()
    return out


def _pct(value: float | None, width: int) -> str:
    return f"{'-':>{width}s}" if value is None else f"{value:{width}.1f}%"


def _line(label: str, outcomes: list[Outcome]) -> str:
    s = _stats_block(outcomes)
    t, p = s["ttft"], s["tpot"]
    steady_ttft, steady_tpot = s["steady_ttft"]["median_abs_pct"], s["steady_tpot"]["median_abs_pct"]
    return (
        f"{label:58s} {len(outcomes):4d}  TTFT med {_pct(t['median_abs_pct'], 6)} "
        f"mean {_pct(t['mean_abs_pct'], 6)} signed {_pct(t['median_signed_pct'], 6)}  "
        f"TPOT med {_pct(p['median_abs_pct'], 5)} mean {_pct(p['mean_abs_pct'], 6)} "
        f"signed {_pct(p['median_signed_pct'], 6)}  "
        f"(steady TTFT {_pct(steady_ttft, 6)}, TPOT {_pct(steady_tpot, 5)})"
    )


def _shape(row: MeasuredRow) -> str:
    def one(tp: int, pp: int, dp: int, ep: int) -> str:
        return (
            f"tp{tp}"
            + (f"pp{pp}" if pp > 1 else "")
            + (f"dp{dp}" if dp > 1 else "")
            + (f"ep{ep}" if ep > 1 else "")
        )

    if row.prefill is not None and row.decode is not None:
        p, d = row.prefill, row.decode
        prefill, decode = one(p.tp, p.pp, p.attn_dp, p.moe_ep), one(d.tp, d.pp, d.attn_dp, d.moe_ep)
        return f"{p.workers}x{prefill}/{d.workers}x{decode}"
    agg = one(row.tp, row.pp, row.attn_dp, row.moe_ep)
    return f"{row.workers}x{agg}" if row.workers > 1 else agg


def _reason(skip: Skipped) -> str:
    """A skip reason without the file position, so that equal reasons count together."""
    return re.sub(r"\s*\[[^\]]*\]$", "", skip.reason)


def _write_out(path: Path, results: list[Outcome | Skipped]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=OUT_COLUMNS)
        writer.writeheader()
        for r in results:
            row = r.row
            base = {
                "id": row.id,
                "split": split_of(row.system),
                "system": row.system,
                "mode": row.mode,
                "model": row.model,
                "backend": row.backend,
                "measured_ttft_ms": row.measured_ttft_ms,
                "measured_tpot_ms": row.measured_tpot_ms,
                "nextn": row.nextn,
                "workers_from": row.workers_from,
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
                    "client": client_of(row).name,
                    "async_scheduling": r.case.plan.async_scheduling(r.case.plan.pools()[0][1]),
                    "frontend_latency_ms": resolve_frontend_latency_ms(r.case.plan),
                    "predicted_ttft_ms": round(p.ttft_ms, 3),
                    "predicted_tpot_ms": round(p.tpot_ms, 4),
                    "ttft_error_pct": round(r.error("ttft"), 2),
                    "tpot_error_pct": round(r.error("tpot"), 2),
                    "steady_ttft_error_pct": round(r.error("ttft", steady=True), 2),
                    "steady_tpot_error_pct": round(r.error("tpot", steady=True), 2),
                    "fitted": r.fitted,
                }
            )


def select_rows(rows: list[MeasuredRow], args: argparse.Namespace) -> tuple[list[MeasuredRow], int]:
    """The rows the command line asks for, and how many acceptance-set rows were held back.

    The acceptance set is dropped first, before any filter or replay, unless ``--acceptance``
    names its systems; naming one in ``--systems`` alone is a mistake, not a way in.
    """
    unknown = sorted(set(args.acceptance) - ACCEPTANCE_SYSTEMS)
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)} is not in the acceptance set ({', '.join(sorted(ACCEPTANCE_SYSTEMS))})",
            where="--acceptance",
        )
    asked = sorted(set(args.systems or ()) & ACCEPTANCE_SYSTEMS - set(args.acceptance))
    if asked:
        raise ConfigError(
            f"{', '.join(asked)} is in the acceptance set; name it in --acceptance to replay it",
            where="--systems",
        )
    kept = [r for r in rows if r.system not in ACCEPTANCE_SYSTEMS or r.system in args.acceptance]
    held_back = len(rows) - len(kept)
    if args.systems is not None:
        kept = [r for r in kept if r.system in args.systems]
    if args.models is not None:
        wanted = {m.lower() for m in args.models}
        kept = [r for r in kept if r.model.lower() in wanted]
    if args.modes is not None:
        kept = [r for r in kept if r.mode in args.modes]
    if args.backends is not None:
        kept = [r for r in kept if r.backend in args.backends]
    if args.max_concurrency is not None:
        kept = [r for r in kept if r.problem or r.concurrency <= args.max_concurrency]
    return kept[:: args.every], held_back


def replay_row(
    row: MeasuredRow, perf: str, *, cuda_graph_padding: bool = False
) -> tuple[ReplayCase | None, Prediction | Skipped]:
    """The row's case and prediction, or why there is none. Whatever the case builder, the
    replay or the latency provider raises for this row (AIConfigurator's errors for shapes its
    database lacks among them) skips the row with that reason rather than stopping the run."""
    try:
        case = build_case(row, cuda_graph_padding=cuda_graph_padding)
        if isinstance(case, Skipped):
            return None, case
        return case, predict(case, perf=perf)
    except ConfigError as err:
        return None, Skipped(row=row, reason=str(err))
    except Exception as err:  # any row's failure is that row's result
        return None, Skipped(row=row, reason=f"{type(err).__name__}: {err}".splitlines()[0])


BREAKDOWNS: dict[str, Callable[[Outcome], str]] = {
    "mode": lambda o: o.row.mode,
    "backend": lambda o: o.row.backend,
    "model": lambda o: o.checkpoint,
    "client": lambda o: client_of(o.row).name,
}


def _split_summary(rows: list[MeasuredRow], outcomes: list[Outcome]) -> dict:
    summary: dict = {"rows": len(rows), "replayed": len(outcomes)}
    summary["coverage"] = round(len(outcomes) / len(rows), 4) if rows else None
    summary["all"] = _stats_block(outcomes)
    for name, key in BREAKDOWNS.items():
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in outcomes:
            groups[key(o)].append(o)
        summary[f"by_{name}"] = {k: _stats_block(v) for k, v in sorted(groups.items())}
    return summary


def _print_split(name: str, rows: list[MeasuredRow], outcomes: list[Outcome]) -> None:
    coverage = f"{len(outcomes)}/{len(rows)} rows replayed ({100 * len(outcomes) / len(rows):.0f}%)"
    print(f"\nsplit {name}: {coverage}")
    print(_line(f"  {name}: all replayed rows", outcomes))
    for label, key in BREAKDOWNS.items():
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in outcomes:
            groups[key(o)].append(o)
        for value, members in sorted(groups.items()):
            print(_line(f"  by {label}: {value}", members))


def run(args: argparse.Namespace) -> int:
    if args.every < 1:
        raise ConfigError(f"`--every >= 1` must hold, but got {args.every}", where="--every")
    path = args.csv if args.csv is not None else aic_silicon_path()
    rows, held_back = select_rows(read_measured(path), args)
    fitted_sources = set()
    if args.perf == "analytic":
        fitted_sources = {get_model(name).source for name in e2e_fitted_models()}

    def fitted(row: MeasuredRow) -> bool:
        try:
            return get_model(row.model).source in fitted_sources
        except UnknownNameError:
            return False

    results: list[Outcome | Skipped] = []
    if not args.quiet:
        print(
            f"{'line':>5s} {'system':9s} {'model':34s} {'backend':7s} {'shape':22s} {'isl/osl/c':15s} "
            f"{'TTFT pred/meas ms':>22s} {'err':>7s} {'TPOT pred/meas ms':>17s} {'err':>7s}"
        )
    for row in rows:
        case, result = replay_row(row, args.perf, cuda_graph_padding=args.cuda_graph_padding)
        if isinstance(result, Skipped):
            results.append(result)
            continue
        assert case is not None
        outcome = Outcome(row=row, case=case, prediction=result, fitted=fitted(row))
        results.append(outcome)
        if not args.quiet:
            p = result
            print(
                f"{row.line:5d} {row.system:9s} {case.model[-34:]:34s} {row.backend:7s} {_shape(row):22s} "
                f"{f'{row.isl}/{row.osl}/{row.concurrency}':15s} "
                f"{p.ttft_ms:10.1f}/{row.measured_ttft_ms:<11.1f} {outcome.error('ttft'):+6.1f}% "
                f"{p.tpot_ms:7.2f}/{row.measured_tpot_ms:<9.2f} {outcome.error('tpot'):+6.1f}%",
                flush=True,
            )
    outcomes = [r for r in results if isinstance(r, Outcome)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    groups: dict[tuple[str, ...], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.row.system, o.row.backend, o.checkpoint, o.row.mode)].append(o)
    print("\nper (system, backend, model, mode): rows, median/mean |error|, signed median")
    for key, members in sorted(groups.items()):
        print(_line(" ".join(key), members))
    print()
    print(_line("all replayed rows", outcomes))
    splits = {}
    for name in SPLITS:
        split_rows = [r for r in rows if split_of(r.system) == name]
        if split_rows:
            split_outcomes = [o for o in outcomes if split_of(o.row.system) == name]
            _print_split(name, split_rows, split_outcomes)
            splits[name] = _split_summary(split_rows, split_outcomes)
    fitted_rows = [o for o in outcomes if o.fitted]
    held_out = [o for o in outcomes if not o.fitted]
    if fitted_sources:
        print()
        print(_line("rows the end-to-end calibration was fitted on", fitted_rows))
        print(_line("held-out rows (never fitted on)", held_out))
        for model in sorted({o.row.model for o in held_out}):
            print(_line(f"  held out: {model}", [o for o in held_out if o.row.model == model]))
    reasons = Counter(_reason(s) for s in skipped)
    if skipped:
        print(f"\nskipped {len(skipped)} row(s):")
        if len(skipped) <= LISTED_SKIPS:
            for s in skipped:
                print(f"  line {s.row.line} {s.row.id}: {s.reason}")
        else:
            for reason, count in reasons.most_common():
                print(f"  {count:5d} x {reason}")
    if held_back:
        print(f"\nheld back {held_back} acceptance-set row(s) (--acceptance SYSTEM replays them)")
    if args.out is not None:
        _write_out(args.out, results)
    summary = {
        "benchmark": "fidelity_measured",
        "csv": str(path),
        "perf": args.perf,
        "rows": len(rows),
        "held_back_acceptance": held_back,
        "replayed": len(outcomes),
        "skipped": len(skipped),
        "coverage": round(len(outcomes) / len(rows), 4) if rows else None,
        "all": _stats_block(outcomes),
        "splits": splits,
        "skipped_reasons": dict(reasons.most_common()),
    }
    if fitted_sources:
        by_model: dict[str, list[Outcome]] = defaultdict(list)
        for o in held_out:
            by_model[o.row.model].append(o)
        summary.update(
            fitted=_stats_block(fitted_rows),
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
