"""The unrolled sample: keys, their order, what is absent, and the KV-load fields."""

import pytest

from aisimulate.planner import PRESETS
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape
from aisimulate.spica.sample import kv_load_fields, unroll_sample

CONFIG = SmartSearchConfig.from_mapping(
    {
        "search_space": {
            "model_name": "meta-llama/Llama-3.1-70B",
            "hardware_sku": "h200_sxm",
            "gpu_budget": 8,
            "context_length": 8192,
            "router_queue_threshold": 2.0,
        },
        "workload": {"isl": 2048, "osl": 256, "concurrency": 16, "num_request_ratio": 4},
        "goal": {"target": "goodput", "sla": {"ttft_ms": 2000, "itl_ms": 40}},
    }
)
SPACE = CONFIG.search_space
AGG = ReplicaConfig(WorkerShape(tp=4), 2)
DISAGG = DisaggConfig(ReplicaConfig(WorkerShape(tp=2), 1), ReplicaConfig(WorkerShape(tp=4), 1))
AGG_SELECTION = {
    "deployment_mode": "agg",
    "backend": "vllm",
    "router_mode": "round_robin",
    "planner_scaling_policy": "disabled",
    "agg_max_num_batched_tokens": 8192,
    "agg_max_num_seqs": 256,
}
DISAGG_SELECTION = {
    "deployment_mode": "disagg",
    "backend": "sglang",
    "router_mode": "kv_router",
    "overlap_score_credit": 0.5,
    "router_temperature": 0.2,
    "planner_scaling_policy": "hybrid_180_5",
    "planner_fpm_sampling": "small",
    "planner_load_sensitivity": "aggressive",
    "prefill_max_num_batched_tokens": 16384,
    "prefill_max_num_seqs": 8,
    "decode_max_num_batched_tokens": 8192,
    "decode_max_num_seqs": 512,
}


def test_agg_sample_keys_in_order_and_nothing_that_does_not_apply():
    sample = unroll_sample(SPACE, AGG_SELECTION, AGG, PRESETS["kalman_default_raw"])
    assert list(sample)[:2] == ["deployment_mode", "backend"]
    parallel = ["tp", "pp", "attention_dp", "moe_tp", "moe_ep", "strategy", "replicas", "used_gpus"]
    start = list(sample).index("tp")
    assert list(sample)[start : start + 8] == parallel
    assert (sample["tp"], sample["replicas"], sample["used_gpus"], sample["strategy"]) == (4, 2, 8, "tp")
    assert sample["agg_block_size"] == 64 and sample["agg_max_num_seqs"] == 256
    assert not any(key.startswith(("prefill_", "decode_")) for key in sample)
    # round_robin: no router sub-knobs or admission fields; no scaling: no planner details.
    for absent in ("overlap_score_credit", "router_queue_threshold", "max_num_fpm_samples", "load_predictor"):
        assert absent not in sample
    assert (sample["enable_throughput_scaling"], sample["enable_load_scaling"]) == (False, False)


def test_disagg_sample_with_kv_router_and_planner():
    sample = unroll_sample(SPACE, DISAGG_SELECTION, DISAGG, PRESETS["kalman_reactive_log1p"])
    assert (sample["prefill_tp"], sample["decode_tp"], sample["used_gpus"]) == (2, 4, 6)
    assert sample["overlap_score_credit"] == 0.5 and "prefill_load_scale" not in sample  # not selected
    assert sample["router_queue_threshold"] == 2.0 and sample["router_queue_policy"] == "fcfs"
    assert (sample["max_num_fpm_samples"], sample["fpm_sample_bucket_size"]) == (32, 4)
    assert (sample["load_scaling_down_sensitivity"], sample["load_min_observations"]) == (70, 3)
    assert sample["throughput_adjustment_interval_seconds"] == 180
    assert sample["load_predictor"] == "kalman" and sample["kalman_min_points"] == 3
    assert "prophet_window_size" not in sample


def test_a_load_only_policy_carries_no_forecaster_and_dict_entries_stay_dicts():
    policy = {
        "enable_throughput_scaling": False,
        "enable_load_scaling": True,
        "throughput_adjustment_interval_seconds": None,
        "load_adjustment_interval_seconds": 10,
    }
    space = SmartSearchConfig.from_mapping(
        {
            **CONFIG.model_dump(exclude_defaults=True),
            "search_space": {**SPACE.model_dump(), "planner_scaling_policy": [policy]},
        }
    ).search_space
    selection = {**DISAGG_SELECTION, "planner_scaling_policy": space.planner_scaling_policy[0]}
    sample = unroll_sample(space, selection, DISAGG, PRESETS["constant_last"])
    assert sample["planner_scaling_policy"] == policy and sample["load_adjustment_interval_seconds"] == 10
    assert "load_predictor" not in sample


def test_mode_and_layout_must_agree_and_missing_knobs_fail():
    with pytest.raises(TypeError, match="a disagg sample needs a DisaggConfig"):
        unroll_sample(SPACE, DISAGG_SELECTION, AGG)
    with pytest.raises(KeyError):
        unroll_sample(SPACE, {k: v for k, v in AGG_SELECTION.items() if k != "agg_max_num_seqs"}, AGG)


def test_kv_load_fields_follow_the_candidates_batching():
    model, system = SPACE.resolve_model(), SPACE.resolve_system()
    small = unroll_sample(SPACE, AGG_SELECTION, AGG)
    big = unroll_sample(SPACE, {**AGG_SELECTION, "agg_max_num_batched_tokens": 65536}, AGG)
    a = kv_load_fields(small, 0.5, model, system, isl=2048, osl=256)
    b = kv_load_fields(big, 0.5, model, system, isl=2048, osl=256)
    assert a["kv_load_capacity_tokens"] == a["agg_kv_capacity_tokens"]
    assert b["agg_kv_capacity_tokens"] < a["agg_kv_capacity_tokens"]  # activations take KV memory
    assert a["kv_load_concurrency_capacity"] == a["agg_kv_capacity_tokens"] // (2048 + 128)
    assert a["concurrency"] == a["kv_load_concurrency_capacity"] // 2
    disagg = kv_load_fields(
        unroll_sample(SPACE, DISAGG_SELECTION, DISAGG), 1.0, model, system, isl=2048, osl=256
    )
    assert disagg["kv_load_capacity_tokens"] == disagg["decode_kv_capacity_tokens"]
    assert disagg["prefill_kv_capacity_tokens"] < disagg["decode_kv_capacity_tokens"]  # tp 2 vs tp 4
