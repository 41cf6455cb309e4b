"""Speculative decoding (MTP) on the fast path against the pass-by-pass loop, and against no MTP.

    python benchmarks/replay_mtp_speed.py [--quick]

A replay with ``nextn`` draft tokens keeps its decoders in the rank's ledger (bursts drawn when a
request starts decoding), so a pass costs the same whatever the batch; ``exact=True`` visits every
decoder every pass. Workload: 8 Llama-3.1-8B workers (h200_sxm, vLLM, analytic perf), closed
loop, isl = osl = 1024, 10 x concurrency requests; concurrency 64 and 256 (``--quick``: 64).
Each wall time is the median of 3 replays (``wall_time_ms``). Targets: the fast path at least 5x
faster than the exact loop at concurrency 256, every headline metric within 0.5% of it. Prints a
table and one JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import statistics

from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.workload import SyntheticWorkload

ENGINE = {"replicas": 8, "block_size": 64, "max_num_seqs": 256, "max_num_batched_tokens": 8192}
METRICS = (
    "mean_ttft_ms",
    "mean_itl_ms",
    "mean_e2e_latency_ms",
    "output_throughput_tok_s",
    "mean_tokens_per_step",
)
REPEATS = 3


def replay(concurrency: int, nextn: int, exact: bool) -> tuple[float, dict]:
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B", system="h200_sxm", agg=EngineSpec(nextn=nextn, **ENGINE)
    )
    workload = SyntheticWorkload(isl=1024, osl=1024, num_requests=10 * concurrency, concurrency=concurrency)
    reports = [simulate(plan, workload, exact=exact) for _ in range(REPEATS)]
    return statistics.median(r.summary["wall_time_ms"] for r in reports), reports[-1].summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="concurrency 64 only")
    args = parser.parse_args()
    rows = []
    header = ("conc", "no MTP ms", "MTP fast ms", "MTP exact ms", "exact/fast", "max |rel|")
    print("".join(f"{h:>14}" for h in header))
    for concurrency in (64,) if args.quick else (64, 256):
        plain_ms, _ = replay(concurrency, 0, exact=False)
        fast_ms, fast = replay(concurrency, 2, exact=False)
        exact_ms, exact = replay(concurrency, 2, exact=True)
        worst = max(abs(fast[k] - exact[k]) / abs(exact[k]) for k in METRICS)
        rows.append(
            {
                "concurrency": concurrency,
                "no_mtp_ms": round(plain_ms, 1),
                "mtp_fast_ms": round(fast_ms, 1),
                "mtp_exact_ms": round(exact_ms, 1),
                "speedup": round(exact_ms / fast_ms, 2),
                "max_rel_metric_diff": worst,
                "mean_tokens_per_step": fast["mean_tokens_per_step"],
            }
        )
        cells = (
            f"{plain_ms:.1f}",
            f"{fast_ms:.1f}",
            f"{exact_ms:.1f}",
            f"{exact_ms / fast_ms:.1f}x",
            f"{worst:.2e}",
        )
        print(f"{concurrency:>14}" + "".join(f"{c:>14}" for c in cells))
    print(json.dumps({"benchmark": "replay_mtp_speed", "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
