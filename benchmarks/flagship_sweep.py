"""Wall time, evaluation times and hypervolume progress of a whole search (GLM-5 flagship).

    python benchmarks/flagship_sweep.py [--config FILE] [--max-rounds N] [--parallel-evals N]
                                        [--output-dir DIR]

Runs the search of ``--config`` (default: the GLM-5-FP8 disaggregated Pareto example, 80 rounds
of 8 on 72 B200s) and prints one JSON summary line: wall time, evaluations, the time one
evaluation took (median, p90, max, and how many passed ``sweep.max_eval_seconds``), the front's
hypervolume after each round, and the round and time at which 99 % of the final hypervolume was
reached. ``--max-rounds`` caps a short run. With ``--output-dir`` the result files (front table,
``pareto.png``) are written there as the search CLI writes them; otherwise a temporary folder
holds the journal and the study.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.experimental import ExperimentalWarning
from aisimulate.spica.output import write_outputs
from aisimulate.spica.records import TrialRecord
from aisimulate.spica.search import run_smart_search

DEFAULT_CONFIG = (
    Path(__file__).parents[1] / "examples/aisimulate/spica/configs/glm5-disagg-pareto-frontier.yaml"
)
REACHED_SHARE = 0.99


def _config(
    path: Path, max_rounds: int | None, parallel_evals: int | None, output_dir: Path
) -> SmartSearchConfig:
    data = json.loads(SmartSearchConfig.from_yaml(path).model_dump_json(exclude_defaults=True))
    sweep = {**data.get("sweep", {}), "output_dir": str(output_dir)}
    if max_rounds is not None:
        sweep["max_rounds"] = max_rounds
    if parallel_evals is not None:
        sweep["parallel_evals"] = parallel_evals
    data["sweep"] = sweep
    return SmartSearchConfig.from_mapping(data)


def reached(progress: list[float], round_end_s: dict[int, float], share: float) -> dict[str, Any]:
    """The first round whose hypervolume is at least ``share`` of the final one, and when it ended."""
    final = progress[-1] if progress else math.nan
    if not progress or not math.isfinite(final) or final <= 0:
        return {"round": None, "elapsed_s": None}
    first = next(i for i, hv in enumerate(progress, start=1) if math.isfinite(hv) and hv >= share * final)
    return {"round": first, "elapsed_s": round(round_end_s.get(first, math.nan), 1)}


def summarise(
    config: SmartSearchConfig, records: list[TrialRecord], progress: list[float], wall_s: float, ends: dict
) -> dict[str, Any]:
    timed = [r.wall_s for r in records if r.status != "duplicate"]
    times = np.asarray(timed, dtype=np.float64) if timed else np.zeros(1)
    cap = config.sweep.max_eval_seconds
    return {
        "config": config.search_space.model_name,
        "rounds": config.sweep.max_rounds,
        "parallel_evals": config.sweep.parallel_evals,
        "wall_s": round(wall_s, 1),
        "evaluations": len(timed),
        "feasible": sum(r.status == "feasible" for r in records),
        "eval_s": {
            "median": round(float(np.median(times)), 2),
            "p90": round(float(np.percentile(times, 90)), 2),
            "max": round(float(times.max()), 2),
            "mean": round(float(times.mean()), 2),
        },
        "evals_over_cap": int(sum(t > cap for t in timed)) if cap else 0,
        "hypervolume_by_round": [round(hv, 1) if math.isfinite(hv) else None for hv in progress],
        "reached_99pct": reached(progress, ends, REACHED_SHARE),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--max-rounds", type=int, default=None, help="cap the rounds for a short run")
    parser.add_argument("--parallel-evals", type=int, default=None)
    parser.add_argument("--output-dir", type=Path, default=None, help="keep the result files here")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        output_dir = args.output_dir or Path(tmp) / "search"
        config = _config(args.config, args.max_rounds, args.parallel_evals, output_dir)
        round_end_s: dict[int, float] = {}
        started = time.perf_counter()

        def on_trial(record: TrialRecord) -> None:
            round_end_s[record.round] = time.perf_counter() - started

        result = run_smart_search(config, output_dir=output_dir, on_trial=on_trial)
        wall_s = time.perf_counter() - started
        if args.output_dir is not None:
            write_outputs(output_dir, result, config)
    summary = summarise(config, list(result.records), list(result.progress_by_round), wall_s, round_end_s)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
