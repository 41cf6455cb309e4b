"""Speed of one pass estimate (scalar hot path) and of 10,000 decode passes at once (vectorised).

    python benchmarks/perf_call_speed.py

Targets: scalar median <= 5 us per call after construction; 10,000 vectorised decode passes
<= 5 ms. Prints a table and one JSON summary line.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from aisimulate.catalog import get_model, get_system
from aisimulate.perf import AnalyticPerfModel, BatchArrays, ParallelShape, PolynomialPerfModel

CASES = [
    ("meta-llama/Llama-3.1-8B", ParallelShape(tp=1), "vllm"),
    ("meta-llama/Llama-3.1-70B", ParallelShape(tp=4), "vllm"),
    ("Qwen/Qwen3-30B-A3B", ParallelShape(tp=2), "sglang"),
    ("deepseek-ai/DeepSeek-V3", ParallelShape(tp=8, moe_ep=8), "trtllm"),
]
CALLS = 20_000
REPEATS = 7


def scalar_us(model) -> float:
    """Median over repeats of the mean time per call, over a mix of mixed and decode passes."""
    args = [(2048.0, 1.0, 2048 * 1024.5, 0.0, 64.0, 65536.0), (0.0, 0.0, 0.0, 0.0, 128.0, 262144.0)]
    per_call = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for i in range(CALLS):
            model.time_ms(*args[i & 1])
        per_call.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(per_call)


def vector_ms(model, n: int = 10_000) -> float:
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 256, n)
    arrays = BatchArrays(decode_requests=batch, decode_context_tokens=batch * rng.integers(128, 8192, n))
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        model.pass_times_ms(arrays)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    h200 = get_system("h200_sxm")
    rows = []
    for name, shape, backend in CASES:
        model = AnalyticPerfModel(get_model(name), h200, shape, backend=backend)
        rows.append((name, scalar_us(model), vector_ms(model)))
    rows.append(("polynomial", scalar_us(PolynomialPerfModel()), vector_ms(PolynomialPerfModel())))
    print(f"{'model':28s} {'scalar us/call':>15s} {'10k vector ms':>14s}")
    for name, us, ms in rows:
        print(f"{name:28s} {us:15.2f} {ms:14.2f}")
    worst_scalar = max(us for _, us, _ in rows)
    worst_vector = max(ms for _, _, ms in rows)
    print(
        json.dumps(
            {
                "benchmark": "perf_call_speed",
                "scalar_us_worst_median": round(worst_scalar, 3),
                "vector_10k_ms_worst_median": round(worst_vector, 3),
                "targets": {"scalar_us": 5.0, "vector_10k_ms": 5.0},
                "within_target": worst_scalar <= 5.0 and worst_vector <= 5.0,
            }
        )
    )


if __name__ == "__main__":
    main()
