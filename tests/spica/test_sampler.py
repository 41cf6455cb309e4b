"""The Optuna adapter: define-by-run knobs, injected constants, projection, constraints, seeding."""

import json
import math

import optuna
import pytest

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.sampler import FEASIBLE_CONSTRAINT, PROJECTION_ATTR, BranchSampler, directions
from aisimulate.spica.search_space import enumerate_branches

SPACE = {
    "model_name": "meta-llama/Llama-3.1-70B",
    "hardware_sku": "h200_sxm",
    "gpu_budget": 8,
    "context_length": 8192,
    "deployment_mode": ["agg"],
    "backend": ["vllm", "sglang"],
    "router_mode": ["kv_router", "round_robin"],
    "planner_scaling_policy": ["disabled", "load_180_5"],
    "agg_max_num_batched_tokens": [8192],
}
WORKLOAD = {"isl": 2048, "osl": 256, "concurrency": 16, "num_request_ratio": 4}


def branch_sampler(space=None, goal=None, seed=1, kind="auto", workload=None):
    config = SmartSearchConfig.from_mapping(
        {
            "search_space": {**SPACE, **(space or {})},
            "workload": workload or WORKLOAD,
            "goal": goal or {"target": "throughput"},
        }
    )
    branch = enumerate_branches(config).branches[0]
    study = optuna.create_study(directions=directions(config.goal))
    return BranchSampler(study, branch, kind=kind, seed=seed, batch_size=4)


def test_inactive_knobs_are_never_sampled():
    sampler = branch_sampler()
    for suggestion in sampler.ask(24):
        params = sampler.study.trials[suggestion.trial_number].params
        kv_router = suggestion.selection["router_mode"] == "kv_router"
        assert (
            ("router_temperature_index" in params)
            == kv_router
            == ("router_temperature" in suggestion.selection)
        )
        scales = suggestion.selection["planner_scaling_policy"] != "disabled"
        assert (
            ("planner_fpm_sampling" in params) == scales == ("planner_fpm_sampling" in suggestion.selection)
        )
        # host/disk hit weights are not even branch knobs without host offload
        assert not any(name.startswith(("host_cache", "disk_cache")) for name in params)


def test_single_choices_are_injected_and_menus_keep_their_native_values():
    sampler = branch_sampler()
    (suggestion,) = sampler.ask(1)
    params = sampler.study.trials[0].params
    assert "agg_max_num_batched_tokens" not in params and "agg_max_num_batched_tokens_index" not in params
    assert suggestion.selection["agg_max_num_batched_tokens"] == 8192
    assert suggestion.selection["agg_max_num_seqs"] in (256, 512, 1024)
    assert 0 <= params["agg_max_num_seqs_index"] <= 2  # ordered menus are sampled by index
    assert suggestion.selection["deployment_mode"] == "agg"


def test_suggestions_are_projected_onto_layouts_the_backend_can_run():
    sampler = branch_sampler()
    pool = {entry.config: entry.backends for entry in sampler.branch.pool}
    for suggestion in sampler.ask(8):
        assert suggestion.selection["backend"] in pool[suggestion.config]
        attrs = sampler.study.trials[suggestion.trial_number].user_attrs[PROJECTION_ATTR]
        assert attrs["actual_parallel_config"]["replicas"] == suggestion.config.replicas
        assert "used_gpu_ratio" in attrs["requested_features"]


def test_a_single_layout_branch_has_no_parallel_parameters():
    sampler = branch_sampler({"parallel_configs": [{"tp": 4, "replicas": 2}]})
    (suggestion,) = sampler.ask(1)
    assert suggestion.projection is None and suggestion.config.total_gpus == 8
    assert not any("gpu" in name for name in sampler.study.trials[0].params)


def test_infeasible_trials_are_constraint_violations_with_the_worst_value():
    sampler = branch_sampler()
    first, second = sampler.ask(2)
    sampler.tell(first.trial_number, [5.0])
    sampler.tell_infeasible(second.trial_number, "over gpu_budget")
    good, bad = sampler.study.trials
    assert good.constraints == {FEASIBLE_CONSTRAINT: 0.0} and bad.constraints == {FEASIBLE_CONSTRAINT: 1.0}
    assert bad.values == [-math.inf] and bad.user_attrs["spica_reason"] == "over gpu_budget"
    assert sampler.study.best_trial.number == first.trial_number


def test_pareto_studies_have_one_direction_per_objective():
    goal = {"target": "pareto", "pareto_objectives": ["throughput_per_gpu", "e2e_latency"]}
    workload = {"isl": 2048, "osl": 256, "kv_load_ratio": [0.0, 1.0], "num_request_ratio": 4}
    for kind in ("auto", "nsgaii"):
        sampler = branch_sampler(goal=goal, kind=kind, workload=workload)
        assert [d.name for d in sampler.study.directions] == ["MAXIMIZE", "MINIMIZE"]
        for round_no in range(3):
            for s in sampler.ask(4):
                assert 0.0 <= s.selection["kv_load_ratio"] <= 1.0
                sampler.tell(s.trial_number, [s.selection["kv_load_ratio"], 10.0 * round_no])
        assert sampler.study.best_trials


@pytest.mark.parametrize("kind", ["auto", "random", "nsgaii"])
def test_the_seed_decides_the_suggestions(kind):
    def selections(seed):
        sampler = branch_sampler(seed=seed, kind=kind)
        out = []
        for _ in range(3):
            batch = sampler.ask(4)
            for s in batch:
                sampler.tell(s.trial_number, [float(s.selection["agg_max_num_seqs"])])
            out += [json.dumps(s.selection, sort_keys=True, default=str) + str(s.config) for s in batch]
        return out

    assert selections(7) == selections(7)
    assert selections(7) != selections(8)
