"""[EXPERIMENTAL] Score load forecasters on a mooncake trace: which one should the planner run?

    python examples/aisimulate/spica/tools/run_load_predictor_sweep.py --trace sine.jsonl \
        --interval-s 180 [--candidates constant_last kalman_default_raw ...]

Prints each candidate's mean one-step-ahead loss, best first, and marks the winner.
"""

from __future__ import annotations

import argparse
import sys

from aisimulate.errors import ConfigError
from aisimulate.planner import PRESETS, select_load_predictor, trace_windows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True)
    parser.add_argument("--interval-s", type=float, nargs="+", default=[180.0])
    parser.add_argument("--candidates", nargs="+", default=list(PRESETS), help="preset ids")
    args = parser.parse_args(argv)
    try:
        for interval_s in args.interval_s:
            windows = trace_windows(args.trace, interval_s)
            picked = select_load_predictor(windows, interval_s, args.candidates)
            print(f"interval {interval_s:g} s: {len(windows)} windows, {picked.reason}")
            for note in picked.warnings:
                print(f"  warning: {note}")
            for label, loss in sorted(picked.losses.items(), key=lambda item: item[1]):
                marker = "  <-- best" if label == picked.best else ""
                print(f"  {label:<24} {loss:.5f}{marker}")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
