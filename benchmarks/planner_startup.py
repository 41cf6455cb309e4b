"""How slow may new workers start before the planner loses the SLA? A startup-time sweep.

    python benchmarks/planner_startup.py --trace conversation_trace.jsonl [--startup-s 0 60 300]

Replays a mooncake trace (512-token hash blocks) on aggregated Llama-3.1-8B workers on h200_sxm
behind the KV router, starting with 2 workers, with the SLA-driven load planner (TTFT 1500 ms,
ITL 50 ms, budget 8 GPUs), once per engine ``startup_time``. The reference's published
experiment (its own trace and model) held the SLA up to about 50-60 s of startup, collapsed
beyond about 100-120 s, and its scale-up count fell from 42 (0 s) to 8 (300 s): the shape to
look for here. Prints a table and one JSON summary line. Without ``--trace`` it uses the bundled
400-request excerpt, which is too short to show the effect.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aisimulate.replay import SLA, DeploymentPlan, simulate
from aisimulate.workload import TraceWorkload

BUNDLED = Path(__file__).parents[1] / "examples" / "aisimulate" / "replay" / "conversation_400.jsonl"
SLA_TARGET = SLA(ttft_ms=1500.0, itl_ms=50.0)


def plan(startup_s: float) -> DeploymentPlan:
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        agg={"replicas": 2, "startup_time": startup_s},
        router={"mode": "kv_router"},
        planner={"ttft_ms": SLA_TARGET.ttft_ms, "itl_ms": SLA_TARGET.itl_ms, "max_gpu_budget": 8},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=BUNDLED)
    parser.add_argument("--startup-s", type=float, nargs="+", default=[0.0, 30.0, 60.0, 120.0, 300.0])
    args = parser.parse_args()
    workload = TraceWorkload(trace_path=args.trace, trace_block_size=512)
    rows = []
    header = ("SLA met", 9), ("p90 TTFT ms", 13), ("ups", 6), ("downs", 7), ("GPU-h", 8), ("avg GPU", 9)
    print(f"{'startup s':>10}" + "".join(f"{name:>{width}}" for name, width in header))
    for startup_s in args.startup_s:
        s = simulate(plan(startup_s), workload, sla=SLA_TARGET).summary
        row = {
            "startup_s": startup_s,
            "sla_met": round(s["goodput_completed_requests"] / max(s["completed_requests"], 1), 4),
            "p90_ttft_ms": round(s["p90_ttft_ms"], 1),
            "scale_ups": s["planner_scale_ups"],
            "scale_downs": s["planner_scale_downs"],
            "gpu_hours": round(s["gpu_hours"], 3),
            "avg_gpu": round(s["avg_gpu"], 2),
            "wall_s": round(s["wall_time_ms"] / 1000.0, 2),
        }
        rows.append(row)
        print(
            f"{startup_s:>10g}{row['sla_met']:>9.1%}{row['p90_ttft_ms']:>13.0f}{row['scale_ups']:>6}"
            f"{row['scale_downs']:>7}{row['gpu_hours']:>8.2f}{row['avg_gpu']:>9.2f}"
        )
    print(json.dumps({"benchmark": "planner_startup", "trace": str(args.trace), "rows": rows}))


if __name__ == "__main__":
    main()
