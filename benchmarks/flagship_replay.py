"""Wall time and peak memory of single flagship-scale replays (disaggregated, wide-EP, sglang).

    python benchmarks/flagship_replay.py [--cases 2p6d,1p3d] [--scale F] [--model NAME]
                                         [--profile FILE]

Each case is one candidate of the flagship search (the GLM-5 disaggregated Pareto example's
search space, B200, sglang, round robin, isl = osl = 1024, 10 requests per unit of concurrency)
with ``--model`` in place of GLM-5 (default DeepSeek-V3, FP8). The plan goes through the search's
own path: ``unroll_sample`` on the layout, ``kv_load_fields`` (the KV-load ratio is chosen so
that it resolves to the case's concurrency), ``deployment_plan`` and ``replay_workload``.

Cases (prefill x decode workers; DEP = attention DP + expert parallel, DTP = attention DP +
expert TP):
  2p6d  2 x DEP8 prefill + 6 x DTP8 decode, concurrency 11,940 (119,400 requests); target <= 8 s
  1p3d  1 x DEP16 prefill + 3 x DTP16 decode, concurrency 29,791 (297,910 requests); target <= 40 s
Peak RSS target: <= 1 GiB. ``--scale`` replays that fraction of the concurrency (and so of the
requests) for a quick run; the per-request cost it reports does not extrapolate linearly (decode
batches are smaller). Prints one JSON summary line: per case the wall time of the whole
``simulate()`` call, requests, requests/s, microseconds per request, the process's peak RSS, and
the headline metrics (throughput per GPU and per user, mean TTFT/TPOT) for parity checks.
``--profile FILE`` runs the first case under cProfile, writes the stats there and adds the
replay's structural counters (passes stepped one by one, events of planned passes).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import resource
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aisimulate.replay import simulate
from aisimulate.replay.simulation import Simulation
from aisimulate.replay.workers import Worker
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.deploy import deployment_plan, replay_workload
from aisimulate.spica.experimental import ExperimentalWarning
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape
from aisimulate.spica.sample import kv_load_fields, unroll_sample
from aisimulate.spica.score import objective_value

SEARCH_CONFIG = (
    Path(__file__).parents[1] / "examples/aisimulate/spica/configs/glm5-disagg-pareto-frontier.yaml"
)
# The issue's runs record the layouts and loads, not the batching knobs: these are the search's
# largest decode batch and a middle prefill budget.
SELECTION = {
    "deployment_mode": "disagg",
    "backend": "sglang",
    "prefill_max_num_batched_tokens": 16384,
    "prefill_max_num_seqs": 8,
    "decode_max_num_batched_tokens": 8192,
    "decode_max_num_seqs": 1024,
    "router_mode": "round_robin",
    "planner_scaling_policy": "disabled",
}


@dataclass(frozen=True)
class Case:
    prefill_gpus: int
    prefill_replicas: int
    decode_gpus: int
    decode_replicas: int
    concurrency: int
    target_s: float

    @property
    def layout(self) -> DisaggConfig:
        n, m = self.prefill_gpus, self.decode_gpus
        return DisaggConfig(
            prefill=ReplicaConfig(WorkerShape(tp=1, attention_dp=n, moe_ep=n), self.prefill_replicas),
            decode=ReplicaConfig(WorkerShape(tp=1, attention_dp=m, moe_tp=m), self.decode_replicas),
        )


CASES = {
    "2p6d": Case(8, 2, 8, 6, concurrency=11_940, target_s=8.0),
    "1p3d": Case(16, 1, 16, 3, concurrency=29_791, target_s=40.0),
}
RSS_TARGET_MIB = 1024.0


def search_config(model: str) -> SmartSearchConfig:
    data = json.loads(SmartSearchConfig.from_yaml(SEARCH_CONFIG).model_dump_json(exclude_defaults=True))
    data["search_space"]["model_name"] = model
    return SmartSearchConfig.from_mapping(data)


def candidate(config: SmartSearchConfig, case: Case, scale: float) -> dict[str, Any]:
    """The case's sample as the search builds it, at ``scale`` of the case's concurrency."""
    space, workload = config.search_space, config.workload
    assert workload.isl is not None and workload.osl is not None
    sample = unroll_sample(space, SELECTION, case.layout)
    model, system = space.resolve_model(), space.resolve_system()
    target = max(1, round(case.concurrency * scale))
    capacity = kv_load_fields(sample, 1.0, model, system, isl=workload.isl, osl=workload.osl)["concurrency"]
    ratio = (target + 0.5) / capacity
    sample.update(kv_load_fields(sample, ratio, model, system, isl=workload.isl, osl=workload.osl))
    if sample["concurrency"] != target:
        raise SystemExit(f"kv_load_ratio {ratio} resolved to {sample['concurrency']}, not {target}")
    return sample


def peak_rss_mib() -> float:
    """The process's peak resident set so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


def run_case(config: SmartSearchConfig, name: str, scale: float) -> dict[str, Any]:
    case = CASES[name]
    sample = candidate(config, case, scale)
    plan = deployment_plan(sample, config.goal)
    workload = replay_workload(config.workload, sample["concurrency"])
    started = time.perf_counter()
    report = simulate(plan, workload, perf=config.sweep.perf, seed=config.sweep.random_seed)
    wall_s = time.perf_counter() - started
    summary = report.summary
    requests = workload.num_requests
    return {
        "case": name,
        "scale": scale,
        "concurrency": sample["concurrency"],
        "kv_load_ratio": round(sample["kv_load_ratio"], 6),
        "used_gpus": sample["used_gpus"],
        "wall_s": round(wall_s, 3),
        "target_s": case.target_s if scale == 1.0 else None,
        "requests": requests,
        "requests_per_s": round(requests / wall_s, 1),
        "us_per_request": round(1e6 * wall_s / requests, 2),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "completed_requests": summary["completed_requests"],
        "throughput_per_gpu": objective_value(summary, "throughput_per_gpu"),
        "throughput_per_user": objective_value(summary, "throughput_per_user"),
        "mean_ttft_ms": summary["mean_ttft_ms"],
        "mean_tpot_ms": summary["mean_tpot_ms"],
        "duration_ms": summary["duration_ms"],
    }


def _counting(counts: Counter[str], cls: type, name: str, tally: Callable[..., dict[str, int]]) -> Callable:
    """``cls.name`` wrapped so that each call adds what ``tally`` returns to ``counts``."""
    original = getattr(cls, name)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        counts.update(tally(self, result))
        return result

    setattr(cls, name, wrapped)
    return original


@contextmanager
def structure_counters() -> Iterator[Counter[str]]:
    """Count the replay's structural events from outside (the product carries no counters):
    worker passes stepped and rank passes stepped one by one, events of workers running planned
    passes (and those moved earlier by new work), and requests handed off or completed."""
    counts: Counter[str] = Counter()
    wraps = {
        (Worker, "begin"): lambda w, _: {
            f"{w.ranks[0].role}_worker_passes_stepped": not w.planned,
            f"{w.ranks[0].role}_rank_passes_stepped": 0 if w.planned else len(w._stepping),
            f"{w.ranks[0].role}_planned_events": w.planned,
        },
        (Worker, "cut"): lambda _, moved: {"planned_events_moved": moved is not None},
        (Simulation, "_handoff"): lambda *_: {"handoffs": 1},
        (Simulation, "_complete"): lambda *_: {"completions": 1},
    }
    originals = {key: _counting(counts, *key, tally) for key, tally in wraps.items()}
    try:
        yield counts
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the concurrency (and requests)")
    parser.add_argument("--model", default="deepseek-ai/DeepSeek-V3", help="e.g. zai-org/GLM-5-FP8")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the first case into FILE")
    args = parser.parse_args()
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not 0 < args.scale <= 1:
        parser.error(f"unknown case {unknown}" if unknown else "--scale must be in (0, 1]")
    warnings.simplefilter("ignore", ExperimentalWarning)
    config = search_config(args.model)
    out: dict[str, Any] = {"model": args.model}
    if args.profile is not None:
        with structure_counters() as counts:
            profiler = cProfile.Profile()
            result = profiler.runcall(run_case, config, names[0], args.scale)
        profiler.dump_stats(args.profile)
        out.update(cases=[result], profile=str(args.profile), counters=dict(sorted(counts.items())))
    else:
        out["cases"] = [run_case(config, name, args.scale) for name in names]
    out.update(peak_rss_mib=round(peak_rss_mib(), 1), rss_target_mib=RSS_TARGET_MIB)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
