"""How close the search gets to the true optimum, and how fast, against random search.

    python benchmarks/search_quality.py [--seeds 5] [--workers 2]

The space (Llama-3.1-70B on H200, up to 16 GPUs, agg and disagg, vLLM, a few batching choices,
a short synthetic workload) is small enough to replay every candidate. The search then runs with
an evaluator that looks results up in that table, for 10/20/40% of the candidates as its budget
(mean over seeds), once with the configured sampler and once with random search.

Targets: within 20% of the evaluations, >= 97% of the optimum (goodput per GPU under an SLA)
and >= 95% of the exhaustive hypervolume (throughput per GPU vs per user), and better than random
on both. Prints a table and one JSON summary line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import time
import warnings
from collections.abc import Mapping
from typing import Any

import optuna

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.evaluate import Evaluation, evaluate
from aisimulate.spica.executor import ProcessExecutor
from aisimulate.spica.experimental import ExperimentalWarning
from aisimulate.spica.knobs import NumericRange
from aisimulate.spica.records import sample_key
from aisimulate.spica.sample import unroll_sample
from aisimulate.spica.score import OBJECTIVE_DIRECTIONS, PARETO, hypervolume
from aisimulate.spica.search import reference_point, run_smart_search
from aisimulate.spica.search_space import enumerate_branches

FRACTIONS = (0.1, 0.2, 0.4)
ROUND_SIZE = 4
SPACE = {
    "model_name": "meta-llama/Llama-3.1-70B",
    "hardware_sku": "h200_sxm",
    "gpu_budget": 16,
    "context_length": 4096,
    "deployment_mode": ["agg", "disagg"],
    "backend": ["vllm"],
    "router_mode": ["round_robin"],
    "planner_scaling_policy": ["disabled"],
    "agg_max_num_batched_tokens": [2048, 8192],
    "agg_max_num_seqs": [4, 8, 16, 32, 64, 128, 256],
    "prefill_max_num_batched_tokens": [2048, 8192],
    "prefill_max_num_seqs": [1, 4, 16],
    "decode_max_num_seqs": [8, 32, 128],
}
WORKLOAD = {"isl": 1024, "osl": 128, "concurrency": 48, "num_request_ratio": 2}
GOALS = {
    "scalar": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 800, "itl_ms": 25}},
    "pareto": {"target": "pareto", "pareto_objectives": ["throughput_per_gpu", "throughput_per_user"]},
}

TABLE: dict[str, Evaluation] = {}  # sample key -> evaluation, filled by the exhaustive pass


def lookup(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    return TABLE[sample_key(sample)]


def config_for(goal: str, *, sampler: str = "auto", rounds: int = 1, seed: int = 1) -> SmartSearchConfig:
    sweep = {
        "max_rounds": rounds,
        "candidates_per_round": ROUND_SIZE,
        "parallel_evals": 1,
        "random_seed": seed,
        "sampler": sampler,
    }
    return SmartSearchConfig.from_mapping(
        {"search_space": SPACE, "workload": WORKLOAD, "goal": GOALS[goal], "sweep": sweep}
    )


def every_sample(config: SmartSearchConfig) -> list[dict[str, Any]]:
    samples = []
    for branch in enumerate_branches(config).branches:
        names = [n for n in branch.knobs if n != "backend"]
        menus = [branch.knobs[n] for n in names]
        assert not any(isinstance(m, NumericRange) for m in menus), "the exhaustive space needs menus"
        for entry in branch.pool:
            for backend in sorted(entry.backends):
                for values in itertools.product(*menus):
                    selection = {"deployment_mode": branch.deployment_mode, "backend": backend}
                    selection.update(zip(names, values, strict=True))
                    samples.append(unroll_sample(config.search_space, selection, entry.config))
    return samples


def fill_table(samples: list[dict[str, Any]], workers: int) -> float:
    """Replay every sample once, for both goals (a summary serves both); returns seconds."""
    started = time.perf_counter()
    executor = ProcessExecutor(evaluate, config_for("scalar"), workers, None)
    try:
        for index, evaluation in executor.run(samples):
            TABLE[sample_key(samples[index])] = evaluation
    finally:
        executor.close()
    return time.perf_counter() - started


def rescored(goal: str) -> None:
    """The table's summaries judged against ``goal`` (replays are goal-independent)."""
    from aisimulate.spica.evaluate import judge

    config = config_for(goal)
    for key, evaluation in TABLE.items():
        if evaluation.status == "feasible" and evaluation.summary is not None:
            TABLE[key] = judge(config, evaluation.summary)


def quality(goal: str, evaluations: list[Evaluation]) -> float:
    feasible = [e for e in evaluations if e.status == "feasible"]
    if not feasible:
        return 0.0
    config = config_for(goal)
    if config.goal.target != PARETO:
        return max(e.score for e in feasible if e.score is not None)
    names = config.goal.objectives
    points = [[e.objectives[n] for n in names] for e in feasible if e.objectives]
    all_points = [[e.objectives[n] for n in names] for e in TABLE.values() if e.objectives]
    reference = reference_point(config.goal, all_points)
    return hypervolume(points, reference, [OBJECTIVE_DIRECTIONS[n] for n in names])


def searched(goal: str, sampler: str, fraction: float, seed: int, total: int, branches: int) -> float:
    rounds = max(1, math.ceil(fraction * total / (ROUND_SIZE * branches)))
    result = run_smart_search(config_for(goal, sampler=sampler, rounds=rounds, seed=seed), evaluator=lookup)
    found = [r.evaluation() for r in result.records if r.status != "duplicate"]
    return quality(goal, found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    samples = every_sample(config_for("scalar"))
    branches = len(enumerate_branches(config_for("scalar")).branches)
    replay_s = fill_table(samples, args.workers)
    summary: dict[str, Any] = {"candidates": len(samples), "exhaustive_replay_s": round(replay_s, 1)}
    print(f"{len(samples)} candidates replayed in {replay_s:.0f} s")
    for goal in GOALS:
        rescored(goal)
        optimum = quality(goal, list(TABLE.values()))
        print(f"\n{goal}: exhaustive {optimum:.6g}")
        print("budget  search (% of optimum)  random (% of optimum)")
        for fraction in FRACTIONS:
            row = {}
            for sampler in ("auto", "random"):
                values = [
                    searched(goal, sampler, fraction, seed, len(samples), branches)
                    for seed in range(1, args.seeds + 1)
                ]
                row[sampler] = 100.0 * statistics.mean(values) / optimum
            print(f"{fraction:>5.0%}   {row['auto']:>20.1f}  {row['random']:>20.1f}")
            summary[f"{goal}_{int(fraction * 100)}pct"] = {k: round(v, 2) for k, v in row.items()}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
