"""The reference sweeper's public names import from ``aisimulate.spica`` and behave as its code
expects; the Python example in docs/spica/running.md runs as written."""

import re
from pathlib import Path

import pytest

import aisimulate.spica as spica
from aisimulate.replay.plan import SLA
from aisimulate.spica import (
    FPM_SAMPLING,
    LOAD_SENSITIVITY,
    SCALING_POLICIES,
    Candidate,
    OptimizationGoal,
    OptimizationTarget,
    ScalingPolicy,
    SearchSpace,
    SLATarget,
    SmartSearchConfig,
    SweepConfig,
    Workload,
    is_feasible,
    objective_value,
    rank,
    run_smart_search,
    throughput_intervals,
)
from aisimulate.spica.records import TrialRecord
from tests.spica import fakes

pytestmark = pytest.mark.filterwarnings("ignore::aisimulate.spica.experimental.ExperimentalWarning")

REFERENCE_NAMES = {
    "Candidate",
    "OptimizationGoal",
    "OptimizationTarget",
    "SearchSpace",
    "SLATarget",
    "SmartSearchConfig",
    "SweepConfig",
    "Workload",
    "run_smart_search",
    "ScalingPolicy",
    "SCALING_POLICIES",
    "FPM_SAMPLING",
    "LOAD_SENSITIVITY",
    "throughput_intervals",
    "unroll_sample",
    "enumerate_branches",
    "BranchSampler",
    "Suggestion",
    "DeploymentPlan",
    "objective_value",
    "is_feasible",
    "rank",
}


def test_the_reference_names_are_public():
    assert set(spica.__all__) >= REFERENCE_NAMES
    assert all(getattr(spica, name) is not None for name in spica.__all__)
    assert Candidate is TrialRecord and SLATarget is SLA
    assert isinstance(SCALING_POLICIES["disabled"], ScalingPolicy)
    assert SCALING_POLICIES["hybrid_180_5"].enable_load_scaling and "fine" in FPM_SAMPLING
    assert set(LOAD_SENSITIVITY) == {"aggressive", "default", "conservative"}
    assert throughput_intervals(["throughput_180_5", "hybrid_600_5", "load_180_5"]) == [180, 600]
    assert is_feasible(32, 32) and not is_feasible(64, 32)
    assert objective_value({"output_throughput_tok_s": 5000.0}, "throughput") == 5000.0
    assert rank([]) == []


def test_a_config_built_from_the_reference_types_searches_and_returns_candidates():
    config = SmartSearchConfig(
        search_space=SearchSpace(
            model_name="meta-llama/Llama-3.1-8B",
            hardware_sku="h200_sxm",
            gpu_budget=4,
            deployment_mode=["agg"],
            router_mode=["round_robin"],
            planner_scaling_policy=["disabled"],
            agg_max_num_seqs=[64, 128, 256],
            context_length=4096,
            aic_nextn=1,
        ),
        workload=Workload(isl=1024, osl=128, concurrency=16, num_request_ratio=2),
        goal=OptimizationGoal(target=OptimizationTarget.THROUGHPUT_PER_GPU),
        sweep=SweepConfig(max_rounds=2, candidates_per_round=3, parallel_evals=1),
    )
    assert config.search_space.nextn == 1 and config.goal.target == "throughput_per_gpu"
    result = run_smart_search(config, evaluator=fakes.fake)
    candidates = list(result)
    assert candidates == list(result.best) and len(result) == len(candidates) and result[0] is candidates[0]
    scores = [c.score for c in candidates]
    assert scores == sorted(scores, reverse=True)
    for candidate in candidates:
        assert candidate.config is candidate.sample and candidate.used_gpus == candidate.sample["used_gpus"]
        assert candidate.metrics["gpu_hours"] == candidate.summary["gpu_hours"]
    assert OptimizationTarget("pareto") is OptimizationTarget.PARETO
    assert [t.value for t in OptimizationTarget][-1] == "pareto"


def test_the_documented_python_example_runs(capsys):
    text = (Path(__file__).parents[2] / "docs" / "spica" / "running.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(example, "running.md", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("{'feasible': ") and len(printed) > 1
    _, gpus, backend, goodput = printed[1].split()
    assert backend == "vllm" and int(gpus) <= 2 and float(goodput) > 0
