"""Error of the calibrated analytic kernels against the measured points, per family and GPU.

    python benchmarks/perf_accuracy.py [--data benchmarks/data/calibration]

Prints a table and one JSON summary line; exits 1 if a family misses its target
(median |error|: GEMM 10%, attention 15%, all-reduce/all-to-all 20%, MoE 20%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from aisimulate.perf.points import TARGETS, load_points, relative_errors

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "calibration"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    errors = relative_errors(load_points(args.data))
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
    print(json.dumps({"benchmark": "perf_accuracy", "all_within_target": ok, "median_abs_error": summary}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
