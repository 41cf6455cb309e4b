"""Every example search config loads and dry-runs, and every example config and tool says it is
experimental. The configs are globbed, so a config added to the folder is covered at once."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aisimulate.spica.cli import main
from aisimulate.spica.config import SmartSearchConfig

EXAMPLES = Path(__file__).parents[2] / "examples" / "aisimulate" / "spica"
CONFIGS = sorted((EXAMPLES / "configs").glob("*.yaml"))
TOOLS = sorted((EXAMPLES / "tools").glob("*.py"))


def test_the_folders_hold_the_examples():
    names = {path.name for path in CONFIGS}
    assert {"quickstart.yaml", "smart_sweep.yaml"} <= names and len(TOOLS) >= 2


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_an_example_config_loads_and_dry_runs(path, capsys, monkeypatch):
    monkeypatch.chdir(path.parents[4])  # the repository root, where the examples say to run them
    assert main(["--config", str(path), "--dry-run", "--json"]) == 0
    branches = json.loads(capsys.readouterr().out)["branches"]
    assert branches and all(b["pool_size"] > 0 for b in branches)


@pytest.mark.parametrize("path", CONFIGS + TOOLS, ids=lambda p: p.name)
def test_an_example_is_marked_experimental(path):
    head = path.read_text(encoding="utf-8").splitlines()[0]
    assert "EXPERIMENTAL" in head


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: p.name)
def test_a_tools_help_is_marked_experimental(path):
    shown = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, check=True)
    assert "[EXPERIMENTAL]" in shown.stdout


def test_the_reference_example_keeps_the_reference_keys():
    """The reference sweeper's smart_sweep.yaml, with a bundled trace in place of its own path."""
    config = SmartSearchConfig.from_yaml(EXAMPLES / "configs" / "smart_sweep.yaml")
    space, workload = config.search_space, config.workload
    assert space.model_name == "deepseek-ai/DeepSeek-V3"
    assert (space.hardware_sku, space.gpu_budget) == ("h200_sxm", 32)
    assert space.deployment_mode == ("disagg", "agg") and space.backend == ("vllm",)
    assert space.planner_scaling_policy == ("disabled", "throughput_180_5", "hybrid_180_5")
    assert workload.trace_format == "mooncake" and workload.trace_path.is_file()
    goal, sweep = config.goal, config.sweep
    assert (goal.target, goal.sla.ttft_ms, goal.sla.itl_ms) == ("goodput_per_gpu", 2000, 30)
    assert (sweep.max_rounds, sweep.parallel_evals, sweep.candidates_per_round) == (40, 16, 16)
