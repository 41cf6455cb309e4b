"""The GLM-5 flagship example keeps the original's name and keys, and its search space builds."""

from pathlib import Path

import yaml

from aisimulate.spica.cli import main

EXAMPLE = Path(__file__).parents[2] / "examples/aisimulate/spica/configs/glm5-disagg-pareto-frontier.yaml"


def test_the_flagship_config_is_the_originals():
    assert yaml.safe_load(EXAMPLE.read_text()) == {
        "search_space": {
            "deployment_mode": ["disagg"],
            "backend": ["sglang"],
            "parallel_configs": [],
            "model_name": "zai-org/GLM-5-FP8",
            "hardware_sku": "b200_sxm",
            "gpu_budget": 72,
            "context_length": 2048,
            "router_mode": ["round_robin"],
            "planner_scaling_policy": ["disabled"],
        },
        "workload": {"isl": 1024, "osl": 1024, "kv_load_ratio": [0.0, 1.0], "num_request_ratio": 10},
        "goal": {"target": "pareto", "pareto_objectives": ["throughput_per_gpu", "throughput_per_user"]},
        "sweep": {"max_rounds": 80, "parallel_evals": 8, "candidates_per_round": 8, "max_eval_seconds": 600},
    }


def test_the_flagship_search_space_dry_runs(capsys):
    assert main(["--config", str(EXAMPLE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "disagg: 1184 of 33488 layouts pass the KV filter; backends sglang" in out
