"""Branches, knob gating, planner policy filtering and the dry-run command."""

import json
import re

import pytest
import yaml

from aisimulate.errors import ConfigError
from aisimulate.spica.cli import main
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.parallel import disagg_pairs
from aisimulate.spica.search_space import enumerate_branches

BASE = {
    "search_space": {
        "model_name": "meta-llama/Llama-3.1-70B",
        "hardware_sku": "h200_sxm",
        "deployment_mode": ["agg", "disagg"],
        "backend": ["vllm", "sglang"],
        "gpu_budget": 8,
        "context_length": 8192,
        "router_mode": ["round_robin"],
        "planner_scaling_policy": ["disabled"],
    },
    "workload": {"isl": 1024, "osl": 128, "concurrency": 32, "num_request_ratio": 4},
    "goal": {"target": "throughput_per_gpu"},
}


def config(**overrides):
    data = json.loads(json.dumps(BASE))
    for block, values in overrides.items():
        data[block].update(values)
    return SmartSearchConfig.from_mapping(data)


def test_branches_pools_and_the_kv_filter():
    plan = enumerate_branches(config())
    agg, disagg = plan.branches
    assert (agg.deployment_mode, agg.pool_size_before_kv, len(agg.pool)) == ("agg", 15, 7)
    assert all(e.config.shape.tp >= 2 for e in agg.pool)  # 70B BF16 needs two H200s
    assert disagg.pool_size_before_kv == len(disagg_pairs(moe=False, gpu_budget=8)) == 71
    assert 0 < len(disagg.pool) < 71
    assert agg.backends == ("vllm", "sglang") and all(e.backends == {"vllm", "sglang"} for e in agg.pool)
    assert list(agg.knobs) == [
        "router_mode",
        "planner_scaling_policy",
        "agg_max_num_batched_tokens",
        "agg_max_num_seqs",
        "backend",
    ]
    assert [k for k in disagg.knobs if k.startswith(("prefill", "decode"))] == [
        "prefill_max_num_batched_tokens",
        "prefill_max_num_seqs",
        "decode_max_num_batched_tokens",
        "decode_max_num_seqs",
    ]


def test_router_and_planner_knobs_are_gated():
    plain = enumerate_branches(config()).branches[0].knobs
    assert "overlap_score_credit" not in plain and "planner_fpm_sampling" not in plain
    kv = (
        enumerate_branches(
            config(
                search_space={
                    "router_mode": ["round_robin", "kv_router"],
                    "planner_scaling_policy": ["load_180_5"],
                }
            )
        )
        .branches[0]
        .knobs
    )
    assert {"overlap_score_credit", "prefill_load_scale", "router_temperature"} <= set(kv)
    assert "host_cache_hit_weight" not in kv  # no host offload
    assert {"planner_fpm_sampling", "planner_load_sensitivity"} <= set(kv)
    offload = (
        enumerate_branches(
            config(
                search_space={
                    "router_mode": ["kv_router"],
                    "num_g2_blocks": 1000,
                    "kv_bytes_per_token": 327680,
                }
            )
        )
        .branches[0]
        .knobs
    )
    assert {"host_cache_hit_weight", "disk_cache_hit_weight"} <= set(offload)


def test_throughput_scaling_is_dropped_unless_the_goal_targets_the_sla():
    policies = {"planner_scaling_policy": ["disabled", "throughput_180_5", "load_180_5"]}
    plan = enumerate_branches(config(search_space=policies))
    assert plan.dropped_policies == ("throughput_180_5",)
    sla_goal = {"target": "goodput", "sla": {"ttft_ms": 2000, "itl_ms": 50}}
    assert enumerate_branches(config(search_space=policies, goal=sla_goal)).dropped_policies == ()
    e2e_goal = {"target": "goodput", "sla": {"e2e_ms": 9000}}
    assert enumerate_branches(config(search_space=policies, goal=e2e_goal)).dropped_policies == (
        "throughput_180_5",
        "load_180_5",
    )
    with pytest.raises(ConfigError, match="every planner_scaling_policy enables throughput scaling"):
        enumerate_branches(config(search_space={"planner_scaling_policy": ["throughput_180_5"]}))


def test_a_mode_nothing_can_run_is_skipped_and_no_mode_is_an_error():
    tiny = config(search_space={"gpu_budget": 1, "deployment_mode": ["agg"]})
    with pytest.raises(ConfigError, match="no deployment_mode has a viable parallel config"):
        enumerate_branches(tiny)
    plan = enumerate_branches(config(search_space={"gpu_budget": 3}))  # disagg needs 2 + 2 GPUs
    assert [b.deployment_mode for b in plan.branches] == ["agg"]
    assert plan.warnings and "deployment_mode='disagg' skipped" in plan.warnings[0]


def test_pinned_layouts_must_be_viable():
    pinned = {"deployment_mode": ["agg"], "parallel_configs": [{"tp": 1, "replicas": 2}]}
    with pytest.raises(ConfigError, match="legal/KV-feasible for no configured backend"):
        enumerate_branches(config(search_space=pinned))
    ok = {"deployment_mode": ["agg"], "parallel_configs": [{"tp": 4, "replicas": 2}]}
    (branch,) = enumerate_branches(config(search_space=ok)).branches
    assert [e.config.total_gpus for e in branch.pool] == [8]


def test_kv_load_ratio_becomes_a_range_or_a_constant():
    ranged = config(workload={"concurrency": None, "kv_load_ratio": [0.2, 0.9]}, goal={"target": "pareto"})
    knob = enumerate_branches(ranged).branches[0].knobs["kv_load_ratio"]
    assert (knob.low, knob.high) == (0.2, 0.9)
    fixed = config(workload={"concurrency": None, "kv_load_ratio": 0.5})
    assert enumerate_branches(fixed).branches[0].knobs["kv_load_ratio"] == (0.5,)


def write(tmp_path, data):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_dry_run_json(tmp_path, capsys):
    data = json.loads(json.dumps(BASE))
    data["search_space"]["planner_scaling_policy"] = [
        "disabled",
        {
            "enable_throughput_scaling": True,
            "enable_load_scaling": False,
            "throughput_adjustment_interval_seconds": 240,
            "load_adjustment_interval_seconds": 5,
        },
    ]
    data["search_space"]["agg_max_num_seqs"] = {"low": 8, "high": 512, "log": True}
    assert main(["--config", write(tmp_path, data), "--dry-run", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [b["deployment_mode"] for b in summary["branches"]] == ["agg", "disagg"]
    agg = summary["branches"][0]
    assert (agg["pool_size_before_kv"], agg["pool_size"], agg["backends"]) == (15, 7, ["vllm", "sglang"])
    assert agg["knobs"]["agg_max_num_seqs"] == {"low": 8, "high": 512, "log": True}
    assert agg["knobs"]["router_mode"] == {"choices": ["round_robin"]}
    assert summary["dropped_policies"] == [
        {
            "enable_throughput_scaling": True,
            "enable_load_scaling": False,
            "throughput_adjustment_interval_seconds": 240,
            "load_adjustment_interval_seconds": 5,
        }
    ]


def test_dry_run_text_and_errors(tmp_path, capsys):
    assert main(["--config", write(tmp_path, BASE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "agg: 7 of 15 layouts pass the KV filter; backends vllm, sglang" in out
    bad = json.loads(json.dumps(BASE))
    bad["search_space"]["gpu_budget"] = 0
    assert main(["--config", write(tmp_path, bad), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: search_space.gpu_budget") and "sweep.yaml:" in err and "\n" not in err
    unknown = json.loads(json.dumps(BASE))
    unknown["search_space"]["model_name"] = "meta-llama/Llama-9-70B"
    assert main(["--config", write(tmp_path, unknown), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown model 'meta-llama/Llama-9-70B'" in err and "\n" not in err
    assert re.search(r"\[search_space\.model_name, .*sweep\.yaml:\d+\]", err)
    unknown["search_space"]["model_name"] = BASE["search_space"]["model_name"]
    unknown["search_space"]["hardware_sku"] = "h999_sxm"
    assert main(["--config", write(tmp_path, unknown), "--dry-run"]) == 2
    assert re.search(
        r"unknown system 'h999_sxm'.*\[search_space\.hardware_sku, .*sweep\.yaml:\d+\]",
        capsys.readouterr().err,
    )


def test_the_bundled_example_dry_runs(capsys):
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples/aisimulate/spica/configs/llama70b_h200.yaml"
    assert main(["--config", str(example), "--dry-run"]) == 0
    assert "disagg: 11 of 71 layouts pass the KV filter" in capsys.readouterr().out
