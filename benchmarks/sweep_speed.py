"""Wall time and replays per minute of whole searches, and the coordinator's peak memory.

    python benchmarks/sweep_speed.py [--workers 2] [--pareto-rounds 20]

Runs the quick start and the disagg Pareto example (Qwen3-30B-A3B on B200, kv_load_ratio in
[0, 1]) with ``parallel_evals = --workers``, in a temporary output directory (so the journal and
the SQLite study are part of the cost). Peak memory is this process's maximum resident set, the
workers excluded. Prints a table and one JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import warnings
from pathlib import Path

import optuna

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.experimental import ExperimentalWarning
from aisimulate.spica.search import run_smart_search

CONFIGS = Path(__file__).parents[1] / "examples/aisimulate/spica/configs"


def timed(name: str, workers: int, rounds: int | None, root: Path) -> dict[str, float]:
    data = json.loads(
        SmartSearchConfig.from_yaml(CONFIGS / f"{name}.yaml").model_dump_json(exclude_defaults=True)
    )
    data["sweep"] = {**data.get("sweep", {}), "parallel_evals": workers}
    if rounds is not None:
        data["sweep"]["max_rounds"] = rounds
    config = SmartSearchConfig.from_mapping(data)
    started = time.perf_counter()
    result = run_smart_search(config, output_dir=root / name)
    wall_s = time.perf_counter() - started
    replays = sum(count for status, count in result.tallies.items() if status in ("feasible", "failed"))
    return {
        "wall_s": round(wall_s, 1),
        "replays": replays,
        "replays_per_min": round(60 * replays / wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pareto-rounds", type=int, default=20)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        summary["quickstart"] = timed("quickstart", args.workers, None, Path(tmp))
        summary["disagg_pareto"] = timed(
            "disagg_pareto_moe_b200", args.workers, args.pareto_rounds, Path(tmp)
        )
    summary["coordinator_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    for name in ("quickstart", "disagg_pareto"):
        row = summary[name]
        print(
            f"{name:<14} {row['wall_s']:>7.1f} s  {row['replays']:>4} replays"
            f"  {row['replays_per_min']:>6.1f}/min"
        )
    print(f"coordinator peak RSS {summary['coordinator_peak_rss_mib']} MiB")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
