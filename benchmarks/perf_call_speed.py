"""Speed of one pass estimate (scalar hot path) and of 10,000 decode passes at once (vectorised),
and what the AIConfigurator provider costs a whole replay next to the analytic one.

    python benchmarks/perf_call_speed.py

Targets: scalar median <= 5 us per call after construction; 10,000 vectorised decode passes
<= 5 ms; a replay with ``perf: aic`` at most 3x the same replay with ``perf: analytic`` (the
engine compiled once beforehand, as a process does once per worker shape). The aic rows need the
``aic`` extra; without it they are left out and said so. Prints tables and one JSON summary line.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from aisimulate.catalog import get_model, get_system
from aisimulate.errors import ConfigError
from aisimulate.perf import AnalyticPerfModel, BatchArrays, ParallelShape, PolynomialPerfModel
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.workload import SyntheticWorkload

CASES = [
    ("meta-llama/Llama-3.1-8B", ParallelShape(tp=1), "vllm"),
    ("meta-llama/Llama-3.1-70B", ParallelShape(tp=4), "vllm"),
    ("Qwen/Qwen3-30B-A3B", ParallelShape(tp=2), "sglang"),
    ("deepseek-ai/DeepSeek-V3", ParallelShape(tp=8, moe_ep=8), "trtllm"),
]
AIC_CASES = CASES[:2]  # dense models keep the engine compile short
CALLS = 20_000
REPEATS = 7
REPLAY_REPEATS = 3
REPLAY_PLAN = DeploymentPlan(
    model="meta-llama/Llama-3.1-8B",
    system="h200_sxm",
    backend="vllm",
    agg=EngineSpec(tp=1, replicas=4, max_num_batched_tokens=8192, max_num_seqs=256, block_size=64),
)
REPLAY_WORKLOAD = SyntheticWorkload(isl=1024, osl=256, concurrency=64, num_requests=640)


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


def replay_ms(perf: str) -> float:
    """Median wall time of one replay (engine resolution included), after one untimed run."""
    simulate(REPLAY_PLAN, REPLAY_WORKLOAD, perf=perf)
    times = []
    for _ in range(REPLAY_REPEATS):
        start = time.perf_counter()
        simulate(REPLAY_PLAN, REPLAY_WORKLOAD, perf=perf)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def aic_rows(h200) -> list[tuple[str, float, float]]:
    """The aic provider on the first cases; empty when the extra is not installed."""
    from aisimulate.perf.aic import AicPerfModel

    rows = []
    for name, shape, backend in AIC_CASES:
        model = AicPerfModel(get_model(name), h200, shape, backend=backend)
        rows.append((f"aic {name}", scalar_us(model), vector_ms(model)))
    return rows


def main() -> None:
    h200 = get_system("h200_sxm")
    rows = []
    for name, shape, backend in CASES:
        model = AnalyticPerfModel(get_model(name), h200, shape, backend=backend)
        rows.append((name, scalar_us(model), vector_ms(model)))
    rows.append(("polynomial", scalar_us(PolynomialPerfModel()), vector_ms(PolynomialPerfModel())))
    try:
        aic = aic_rows(h200)
    except ConfigError as err:
        print(f"aic left out: {err}")
        aic = []
    print(f"{'model':36s} {'scalar us/call':>15s} {'10k vector ms':>14s}")
    for name, us, ms in rows + aic:
        print(f"{name:36s} {us:15.2f} {ms:14.2f}")
    worst_scalar = max(us for _, us, _ in rows)
    worst_vector = max(ms for _, _, ms in rows)
    summary = {
        "benchmark": "perf_call_speed",
        "scalar_us_worst_median": round(worst_scalar, 3),
        "vector_10k_ms_worst_median": round(worst_vector, 3),
        "targets": {"scalar_us": 5.0, "vector_10k_ms": 5.0, "aic_replay_ratio": 3.0},
        "within_target": worst_scalar <= 5.0 and worst_vector <= 5.0,
    }
    if aic:
        analytic_ms, aic_ms = replay_ms("analytic"), replay_ms("aic")
        ratio = aic_ms / analytic_ms
        print(f"\nreplay of {REPLAY_WORKLOAD.num_requests} requests on 4 Llama-3.1-8B workers:")
        print(f"  analytic {analytic_ms:9.1f} ms\n  aic      {aic_ms:9.1f} ms  ({ratio:.2f}x)")
        summary.update(
            aic_scalar_us_worst_median=round(max(us for _, us, _ in aic), 3),
            aic_vector_10k_ms_worst_median=round(max(ms for _, _, ms in aic), 3),
            replay_ms={"analytic": round(analytic_ms, 1), "aic": round(aic_ms, 1)},
            aic_replay_ratio=round(ratio, 3),
        )
        summary["within_target"] = summary["within_target"] and ratio <= 3.0
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
