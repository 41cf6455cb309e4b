"""The load forecaster a throughput-scaling planner runs, chosen once per search."""

from pathlib import Path

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.forecasters import choose_forecasters, throughput_intervals_s
from aisimulate.spica.knobs import ScalingPolicy
from aisimulate.spica.parallel import ReplicaConfig, WorkerShape
from aisimulate.spica.sample import unroll_sample

TRACE = Path(__file__).parents[2] / "examples/aisimulate/replay/conversation_400.jsonl"
POLICIES = ["disabled", "load_180_5", "throughput_180_5", "hybrid_600_5"]


def config(workload):
    return SmartSearchConfig.from_mapping(
        {
            "search_space": {
                "model_name": "meta-llama/Llama-3.1-8B",
                "hardware_sku": "h200_sxm",
                "planner_scaling_policy": POLICIES,
                "load_predictor_candidates": ["constant_last", "kalman_default_raw"],
            },
            "workload": workload,
            "goal": {"target": "goodput", "sla": {"ttft_ms": 1000, "itl_ms": 30}},
        }
    )


def test_intervals_come_from_throughput_scaling_policies_only():
    assert throughput_intervals_s(POLICIES) == [180, 600]
    custom = ScalingPolicy(
        enable_throughput_scaling=True,
        enable_load_scaling=False,
        throughput_adjustment_interval_seconds=240,
        load_adjustment_interval_seconds=None,
    )
    assert throughput_intervals_s(["load_180_5", custom]) == [240]


def test_a_trace_is_swept_per_interval_and_the_winner_reaches_the_sample():
    search = config({"trace_path": str(TRACE)})
    space = search.search_space
    chosen = choose_forecasters(
        search.workload, space.planner_scaling_policy, space.load_predictor_candidates
    )
    assert chosen.reason.startswith("swept") and set(chosen.by_interval_s) == {180, 600}
    assert set(chosen.losses[180]) == {"constant_last", "kalman_default_raw"}
    assert chosen.for_policy("load_180_5") is None
    selection = {
        "deployment_mode": "agg",
        "backend": "vllm",
        "router_mode": "round_robin",
        "planner_scaling_policy": "throughput_180_5",
        "planner_fpm_sampling": "default",
        "planner_load_sensitivity": "default",
        "agg_max_num_batched_tokens": 8192,
        "agg_max_num_seqs": 256,
    }
    forecaster = chosen.for_policy("throughput_180_5")
    sample = unroll_sample(space, selection, ReplicaConfig(WorkerShape(tp=1), 1), forecaster)
    assert sample["load_predictor"] == forecaster.load_predictor


def test_synthetic_traffic_keeps_the_last_value_and_no_scaling_sweeps_nothing():
    synthetic = config({"isl": 100, "osl": 10, "request_rate": 2, "num_request_ratio": 5})
    chosen = choose_forecasters(synthetic.workload, POLICIES, ["kalman_default_raw"])
    assert chosen.reason == "static_workload_constant"
    assert {spec.load_predictor for spec in chosen.by_interval_s.values()} == {"constant"}
    assert choose_forecasters(synthetic.workload, ["disabled"], []).by_interval_s == {}
