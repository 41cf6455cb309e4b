"""[EXPERIMENTAL] Write a mooncake trace whose request rate follows a sine wave.

Second ``t`` gets ``max(0, round(base + amplitude * sin(2 pi t / period)))`` requests, spread evenly
over that second; every request has its own hash ids (no prefix sharing), so the trace exercises
autoscaling and forecasting, not caching.

    python examples/aisimulate/spica/tools/gen_sine_trace.py --out sine.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def sine_rows(
    *, duration_s: int, period_s: float, base: float, amplitude: float, isl: int, osl: int, block_tokens: int
):
    blocks = -(-isl // block_tokens)
    next_hash = 0
    for second in range(duration_s):
        count = max(0, round(base + amplitude * math.sin(2 * math.pi * second / period_s)))
        for k in range(count):
            yield {
                "timestamp": round(1000.0 * (second + k / count), 3),
                "input_length": isl,
                "output_length": osl,
                "hash_ids": list(range(next_hash, next_hash + blocks)),
            }
            next_hash += blocks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--duration-s", type=int, default=5400)
    parser.add_argument("--period-s", type=float, default=900.0)
    parser.add_argument("--base", type=float, default=6.0, help="mean requests per second")
    parser.add_argument("--amplitude", type=float, default=4.0, help="requests per second")
    parser.add_argument("--isl", type=int, default=4000)
    parser.add_argument("--osl", type=int, default=200)
    parser.add_argument("--block-tokens", type=int, default=512, help="tokens per hash id")
    args = parser.parse_args(argv)
    for name in ("duration_s", "period_s", "isl", "osl", "block_tokens"):
        if getattr(args, name) <= 0:
            print(f"error: --{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    rows = sine_rows(
        duration_s=args.duration_s,
        period_s=args.period_s,
        base=args.base,
        amplitude=args.amplitude,
        isl=args.isl,
        osl=args.osl,
        block_tokens=args.block_tokens,
    )
    count = 0
    with args.out.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
            count += 1
    print(f"wrote {count} requests to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
