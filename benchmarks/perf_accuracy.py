"""Error of the calibrated analytic kernels against the measured points, per family and GPU.

    python benchmarks/perf_accuracy.py [--data benchmarks/data/calibration]

Prints a table and one JSON summary line; exits 1 if a family misses its target
(median |error|: GEMM 10%, attention 15%, all-reduce/all-to-all 20%, MoE 20%). MoE shapes that
were measured densely enough are priced by interpolating their points instead of the fit; their
error is reported leave-one-out (each inner point predicted from the others).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from aisimulate.perf.kernels import MoeCurve
from aisimulate.perf.points import TARGETS, load_curve_points, load_points, moe_curves, relative_errors

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "calibration"


def leave_one_out_errors(points: list) -> dict[str, list[float]]:
    """|error| of each inner point of every MoE curve, interpolated from the curve without it."""
    out: dict[str, list[float]] = {}
    for (system, _), curves in moe_curves(points).items():
        for curve in curves.values():
            xs, ys = curve["tokens"], curve["per_layer_ms"]
            for i in range(1, len(xs) - 1):
                rest = MoeCurve(tuple(xs[:i] + xs[i + 1 :]), tuple(ys[:i] + ys[i + 1 :]), 1.0)
                out.setdefault(system, []).append(abs(rest.scalar()(xs[i]) / ys[i] - 1.0))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    points = load_points(args.data)
    errors = relative_errors(points)
    print(f"{'family':22s} {'system':10s} {'n':>4s} {'median':>8s} {'p90':>8s} {'target':>7s}")
    summary: dict[str, float] = {}
    ok = True
    for (family, system), values in sorted(errors.items()):
        values = sorted(values)
        median = statistics.median(values)
        p90 = values[min(int(0.9 * len(values)), len(values) - 1)]
        target = TARGETS[family]
        ok = ok and median <= target
        summary[f"{family}/{system}"] = round(median, 4)
        flag = "" if median <= target else "  MISS"
        print(f"{family:22s} {system:10s} {len(values):4d} {median:8.1%} {p90:8.1%} {target:7.0%}{flag}")
    loo: dict[str, float] = {}
    for system, values in sorted(leave_one_out_errors(points + load_curve_points(args.data)).items()):
        loo[system] = round(statistics.median(values), 4)
        print(f"{'moe curves (leave-one-out)':22s} {system:10s} {len(values):4d} {loo[system]:8.1%}")
    summary_line = {"benchmark": "perf_accuracy", "all_within_target": ok, "median_abs_error": summary}
    print(json.dumps({**summary_line, "moe_curve_leave_one_out_median": loo}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
