"""The smart-search config: defaults, every load-time rule, numeric ranges, presets, YAML loading."""

import os
import pickle
import re
import shutil
from importlib import resources
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from aisimulate.catalog import get_system
from aisimulate.errors import ConfigError, UnknownNameError
from aisimulate.spica.config import (
    DEFAULT_PARETO_OBJECTIVES,
    Objective,
    SmartSearchConfig,
    SweepConfig,
    Target,
)
from aisimulate.spica.knobs import (
    FPM_SAMPLING_PRESETS,
    LOAD_PREDICTOR_PRESETS,
    LOAD_SENSITIVITY_PRESETS,
    SCALING_POLICY_PRESETS,
    SEARCH_CHOICES,
    LoadPredictor,
    NumericRange,
    ScalingPolicy,
    expand,
)
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape
from aisimulate.spica.score import OBJECTIVE_DIRECTIONS

DATA = Path(__file__).parent / "data"
SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"}
SYNTHETIC = {"isl": 1024, "osl": 256, "concurrency": 8, "num_request_ratio": 10}
TRACE = {"trace_path": "trace.jsonl"}
KV_LOAD = {"concurrency": None, "kv_load_ratio": [0.0, 1.0]}
SLA = {"ttft_ms": 500, "itl_ms": 20}
FPM_DICT = {"max_num_fpm_samples": 96, "fpm_sample_bucket_size": 16}
SCALING_DICT = {
    "enable_throughput_scaling": True,
    "enable_load_scaling": False,
    "throughput_adjustment_interval_seconds": 240,
    "load_adjustment_interval_seconds": 5,
}


def build(search_space=None, workload=None, goal=None, sweep=None, *, trace=False):
    data = {
        "search_space": {**SPACE, **(search_space or {})},
        "workload": {**(TRACE if trace else SYNTHETIC), **(workload or {})},
    }
    if goal is not None:
        data["goal"] = goal
    if sweep is not None:
        data["sweep"] = sweep
    return SmartSearchConfig.from_mapping(data)


def rejected(field, match="", **blocks):
    """The ConfigError for ``blocks``; its message must start with the field path."""
    with pytest.raises(ConfigError) as info:
        build(**blocks)
    message = str(info.value)
    assert message.startswith(f"{field}:"), message
    assert re.search(match, message), message
    return message


def write(tmp_path, text, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the example and the defaults ----------------------------------------------------------------


def test_example_loads_with_its_trace_beside_it(tmp_path):
    shutil.copy(DATA / "smart_sweep.yaml", tmp_path)
    (tmp_path / "mooncake_tiny.jsonl").write_text("")
    config = SmartSearchConfig.from_yaml(tmp_path / "smart_sweep.yaml")
    space = config.search_space
    assert space.resolve_model().name == "deepseek-ai/DeepSeek-V3"
    assert space.deployment_mode == ("disagg", "agg")
    assert "disabled" in space.planner_scaling_policy
    assert space.planner_scaling_policy[2] == ScalingPolicy(**{**SCALING_DICT, "enable_load_scaling": True})
    assert space.prefill_max_num_seqs == NumericRange[int](low=1, high=256, log=True)
    assert config.workload.is_trace
    assert config.workload.trace_path == tmp_path / "mooncake_tiny.jsonl"
    assert config.goal.target == "goodput_per_gpu"
    assert config.sweep.max_rounds == 40


def test_defaults():
    config = build()
    space, sweep = config.search_space, config.sweep
    assert space.gpu_budget == 32
    assert space.prefill_block_size == 64
    assert space.prefill_max_num_seqs == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert space.backend == ("vllm",)
    assert space.deployment_mode == ("disagg", "agg")
    assert len(space.load_predictor_candidates) == 11
    assert space.num_g2_blocks == 0 and space.nextn == 0
    assert (space.prefill_enable_prefix_caching, space.decode_enable_prefix_caching) == (True, False)
    assert config.goal.target == "throughput" and config.goal.sla is None
    assert config.workload.arrival == "constant"
    assert (sweep.max_rounds, sweep.random_seed, sweep.max_eval_seconds) == (20, 1, 600.0)
    assert (sweep.sampler, sweep.executor, sweep.perf) == ("auto", "local", "analytic")
    assert sweep.parallel_evals == os.cpu_count()
    assert sweep.candidates_per_round == 16  # the reference's round size, whatever the machine


@pytest.mark.parametrize(("cpus", "expected"), [(3, 3), (None, 1)])
def test_parallel_evals_default_is_the_cpu_count(monkeypatch, cpus, expected):
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert SweepConfig().parallel_evals == expected
    assert SweepConfig().candidates_per_round == 16


def test_every_knob_defaults_to_its_menu_except_backend():
    space = build().search_space
    for knob, menu in SEARCH_CHOICES.items():
        assert getattr(space, knob) == (("vllm",) if knob == "backend" else menu), knob
    assert SEARCH_CHOICES["backend"] == ("vllm", "sglang", "trtllm")


def test_config_is_frozen_and_survives_pickle_and_json():
    config = build(
        search_space={
            "deployment_mode": ["disagg"],
            "parallel_configs": [{"prefill": {"tp": 2}, "decode": {"tp": 4, "replicas": 2}}],
            "agg_max_num_seqs": {"low": 8, "high": 512, "log": True},
            "planner_scaling_policy": ["disabled", SCALING_DICT],
            "load_predictor_candidates": ["arima_raw", {"load_predictor": "kalman", "kalman_r": 3}],
        },
        workload=KV_LOAD,
        goal={"target": "pareto"},
    )
    with pytest.raises(ValidationError):
        config.search_space.gpu_budget = 8
    assert pickle.loads(pickle.dumps(config)) == config
    assert SmartSearchConfig.model_validate_json(config.model_dump_json()) == config
    assert SmartSearchConfig.from_mapping(config.model_dump(mode="json")) == config


# --- unknown keys and scalar ranges -------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "blocks"),
    [
        ("search_space.gpu_budgett", {"search_space": {"gpu_budgett": 8}}),
        ("workload.islx", {"workload": {"islx": 8}}),
        ("goal.targett", {"goal": {"targett": "throughput"}}),
        ("goal.sla.ttft", {"goal": {"target": "goodput", "sla": {"e2e_ms": 1, "ttft": 1}}}),
        ("sweep.rounds", {"sweep": {"rounds": 3}}),
        (
            "search_space.agg_max_num_seqs.step",
            {"search_space": {"agg_max_num_seqs": {"low": 1, "high": 8, "step": 2}}},
        ),
        (
            "search_space.planner_fpm_sampling.0.samples",
            {"search_space": {"planner_fpm_sampling": [{**FPM_DICT, "samples": 1}]}},
        ),
        (
            "search_space.parallel_configs.0.dp",
            {"search_space": {"deployment_mode": ["agg"], "parallel_configs": [{"tp": 1, "dp": 2}]}},
        ),
    ],
)
def test_unknown_keys_are_rejected_at_every_level(field, blocks):
    rejected(field, "unknown key", **blocks)


def test_unknown_top_level_key_is_rejected():
    with pytest.raises(ConfigError, match=r"^search: unknown key"):
        SmartSearchConfig.from_mapping({"search_space": SPACE, "workload": SYNTHETIC, "search": {}})


@pytest.mark.parametrize(
    ("block", "field", "value"),
    [
        ("search_space", "gpu_budget", 0),
        ("search_space", "gpu_budget", -8),
        ("search_space", "gpu_budget", True),
        ("search_space", "prefill_block_size", 0),
        ("search_space", "decode_block_size", -64),
        ("search_space", "agg_gpu_memory_utilization", 0.0),
        ("search_space", "agg_gpu_memory_utilization", 1.01),
        ("search_space", "num_g2_blocks", -1),
        ("search_space", "kv_bytes_per_token", 0),
        ("search_space", "kv_bytes_per_token", -1),
        ("search_space", "nextn", 6),
        ("search_space", "min_endpoint", 0),
        ("search_space", "context_length", 0),
        ("search_space", "startup_time", -1.0),
        ("search_space", "router_queue_threshold", -1.0),
        ("search_space", "router_queue_policy", "priority"),
        ("search_space", "kv_event_lag_ms", float("inf")),
        ("search_space", "router_ttl_secs", 0.0),
        ("search_space", "active_decode_blocks_threshold", 0),
        ("search_space", "model_name", ""),
        ("workload", "shared_prefix_ratio", 1.5),
        ("workload", "turns_per_session", 0),
        ("workload", "inter_turn_delay_ms", -1.0),
        ("workload", "num_prefix_groups", -1),
        ("workload", "isl", 0),
        ("workload", "num_request_ratio", 0),
        ("workload", "request_rate", float("nan")),
        ("sweep", "max_rounds", 0),
        ("sweep", "parallel_evals", -1),
        ("sweep", "candidates_per_round", 0),
        ("sweep", "random_seed", -1),
        ("sweep", "max_eval_seconds", 0),
        ("sweep", "sampler", "cmaes"),
        ("sweep", "executor", "dask"),
        ("sweep", "perf", "table"),
    ],
)
def test_numeric_and_enum_fields_are_range_checked(block, field, value):
    rejected(f"{block}.{field}", **{block: {field: value}})


def test_boundaries_that_are_allowed():
    config = build(search_space={"agg_gpu_memory_utilization": 1.0, "min_gpu_budget": 8, "gpu_budget": 8})
    assert config.search_space.min_gpu_budget == 8


@pytest.mark.parametrize(("minimum", "match"), [(33, "min_gpu_budget <= gpu_budget"), (0, "greater than")])
def test_min_gpu_budget_is_within_the_budget(minimum, match):
    rejected("search_space.min_gpu_budget", match, search_space={"min_gpu_budget": minimum})


# --- searched knobs: choices, numeric entries and ranges ----------------------------------------


def test_subsets_keep_order_and_drop_duplicates():
    space = build(
        search_space={
            "router_mode": ["kv_router"],
            "backend": ["sglang", "vllm"],
            "deployment_mode": ["agg"] * 2,
        }
    ).search_space
    assert space.router_mode == ("kv_router",)
    assert space.backend == ("sglang", "vllm")
    assert space.deployment_mode == ("agg",)


@pytest.mark.parametrize(
    ("knob", "entry"),
    [
        ("router_mode", "bogus"),
        ("deployment_mode", "both"),
        ("backend", "tensorrt"),
        ("planner_scaling_policy", "made_up"),
        ("load_predictor_candidates", "lstm"),
        ("router_mode", {"mode": "kv_router"}),  # a dict on a non-composite knob
    ],
)
def test_categorical_entries_must_be_choices(knob, entry):
    rejected(f"search_space.{knob}.0", search_space={knob: [entry]})


@pytest.mark.parametrize(
    "knob", ["deployment_mode", "router_mode", "prefill_max_num_seqs", "planner_fpm_sampling"]
)
def test_an_empty_choice_list_is_rejected(knob):
    rejected(f"search_space.{knob}", "must list at least one choice", search_space={knob: []})


@pytest.mark.parametrize(
    ("knob", "entries"),
    [("prefill_max_num_seqs", [999]), ("prefill_load_scale", [64.0]), ("overlap_score_credit", [0.25])],
)
def test_numeric_entries_are_not_restricted_to_the_menus(knob, entries):
    assert getattr(build(search_space={knob: entries}).search_space, knob) == tuple(entries)


@pytest.mark.parametrize(
    ("knob", "entries"),
    [
        ("prefill_max_num_seqs", [8, 0]),
        ("agg_max_num_batched_tokens", [1.5]),
        ("decode_max_num_seqs", [True]),
        ("overlap_score_credit", [1.5]),
        ("host_cache_hit_weight", [-0.1]),
        ("router_temperature", [float("inf")]),
    ],
)
def test_numeric_entries_are_range_checked(knob, entries):
    rejected(f"search_space.{knob}.{len(entries) - 1}", search_space={knob: entries})


@pytest.mark.parametrize(
    ("knob", "span", "expected"),
    [
        (
            "agg_max_num_seqs",
            {"low": 8, "high": 512, "log": True},
            NumericRange[int](low=8, high=512, log=True),
        ),
        ("prefill_load_scale", {"low": 0, "high": 64}, NumericRange[float](low=0.0, high=64.0)),
        ("overlap_score_credit", {"low": 0.5, "high": 0.5}, NumericRange[float](low=0.5, high=0.5)),
    ],
)
def test_numeric_knobs_accept_ranges(knob, span, expected):
    assert getattr(build(search_space={knob: span}).search_space, knob) == expected


@pytest.mark.parametrize(
    ("knob", "span", "field", "match"),
    [
        ("agg_max_num_seqs", {"low": 512, "high": 8}, "", "low <= high"),
        ("router_temperature", {"low": 0.0, "high": 1.0, "log": True}, "", "low > 0"),
        ("agg_max_num_seqs", {"low": 0, "high": 8}, ".low", "greater than or equal to 1"),
        ("overlap_score_credit", {"low": 0.5, "high": 2.0}, ".high", "less than or equal to 1"),
        ("decode_max_num_seqs", {"low": 1.5, "high": 8}, ".low", "integer"),
        ("decode_max_num_seqs", {"low": 1}, ".high", "Field required"),
    ],
)
def test_invalid_ranges_are_rejected(knob, span, field, match):
    rejected(f"search_space.{knob}{field}", match, search_space={knob: span})


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 10**6), st.booleans())
def test_an_int_range_is_valid_exactly_when_ordered(low, high, log):
    span = {"low": low, "high": high, "log": log}
    if low <= high:
        assert (
            build(search_space={"prefill_max_num_seqs": span}).search_space.prefill_max_num_seqs.high == high
        )
    else:
        rejected(
            "search_space.prefill_max_num_seqs", "low <= high", search_space={"prefill_max_num_seqs": span}
        )


# --- composite knobs and their presets ----------------------------------------------------------


def test_composite_dicts_are_kept_as_typed_entries():
    space = build(
        search_space={
            "planner_scaling_policy": ["disabled", SCALING_DICT],
            "planner_fpm_sampling": [FPM_DICT],
            "planner_load_sensitivity": [{"load_scaling_down_sensitivity": 75, "load_min_observations": 4}],
            "load_predictor_candidates": [
                {"load_predictor": "prophet", "prophet_window_size": 20},
                {"load_predictor": "kalman", "kalman_r": 3},
            ],
        }
    ).search_space
    policy = space.planner_scaling_policy[1]
    assert expand(policy, SCALING_POLICY_PRESETS) is policy
    assert policy.throughput_adjustment_interval_seconds == 240 and not policy.enable_load_scaling
    assert space.planner_fpm_sampling[0].max_num_fpm_samples == 96
    assert space.planner_load_sensitivity[0].load_scaling_down_sensitivity == 75
    prophet, kalman = space.load_predictor_candidates
    assert prophet.fields() == {
        "load_predictor": "prophet",
        "load_predictor_log1p": False,
        "prophet_window_size": 20,
    }
    assert (kalman.kalman_r, kalman.kalman_min_points) == (
        3.0,
        5,
    ) and "prophet_window_size" not in kalman.fields()


@pytest.mark.parametrize(
    ("knob", "entry", "field", "match"),
    [
        ("planner_scaling_policy", {**SCALING_DICT, "extra": 1}, ".extra", "unknown key"),
        (
            "planner_scaling_policy",
            {"enable_throughput_scaling": True},
            ".enable_load_scaling",
            "Field required",
        ),
        ("planner_scaling_policy", {}, ".enable_throughput_scaling", "Field required"),
        (
            "planner_scaling_policy",
            {**SCALING_DICT, "throughput_adjustment_interval_seconds": None},
            "",
            "needs throughput_adjustment_interval_seconds",
        ),
        (
            "planner_scaling_policy",
            {**SCALING_DICT, "load_adjustment_interval_seconds": 0},
            ".load_adjustment_interval_seconds",
            "",
        ),
        (
            "planner_fpm_sampling",
            {"max_num_fpm_samples": 64, "fpm_sample_bucket_size": 8},
            "",
            "perfect square",
        ),
        (
            "planner_load_sensitivity",
            {"load_scaling_down_sensitivity": 101, "load_min_observations": 5},
            ".load_scaling_down_sensitivity",
            "",
        ),
        ("load_predictor_candidates", {"prophet_window_size": 20}, ".load_predictor", "Field required"),
        ("load_predictor_candidates", {"load_predictor": "lstm"}, ".load_predictor", "'kalman'"),
        (
            "load_predictor_candidates",
            {"load_predictor": "kalman", "prophet_window_size": 20},
            "",
            "only load_predictor 'prophet'",
        ),
    ],
)
def test_invalid_composite_dicts_are_rejected(knob, entry, field, match):
    rejected(f"search_space.{knob}.0{field}", match, search_space={knob: [entry]})


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("disabled", (False, False, None, None)),
        ("throughput_180_5", (True, False, 180, 5)),
        ("throughput_600_5", (True, False, 600, 5)),
        ("load_180_5", (False, True, 180, 5)),
        ("load_180_10", (False, True, 180, 10)),
        ("hybrid_180_5", (True, True, 180, 5)),
        ("hybrid_600_5", (True, True, 600, 5)),
    ],
)
def test_scaling_policy_presets(name, expected):
    assert tuple(SCALING_POLICY_PRESETS[name].model_dump().values()) == expected
    assert SCALING_POLICY_PRESETS[name].enabled == any(expected[:2])


def test_fpm_and_sensitivity_presets():
    fpm = {k: tuple(v.model_dump().values()) for k, v in FPM_SAMPLING_PRESETS.items()}
    assert fpm == {"small": (32, 4), "default": (64, 16), "large": (128, 16), "fine": (128, 64)}
    sensitivity = {k: tuple(v.model_dump().values()) for k, v in LOAD_SENSITIVITY_PRESETS.items()}
    assert sensitivity == {"aggressive": (70, 3), "default": (80, 5), "conservative": (90, 8)}


KALMAN_DEFAULT = {"kalman_q_level": 1.0, "kalman_q_trend": 0.1, "kalman_r": 10.0, "kalman_min_points": 5}
KALMAN_REACTIVE = {"kalman_q_level": 10.0, "kalman_q_trend": 1.0, "kalman_r": 5.0, "kalman_min_points": 3}


@pytest.mark.parametrize(
    ("name", "family", "log1p", "params"),
    [
        ("constant_last", "constant", False, {}),
        ("arima_raw", "arima", False, {}),
        ("arima_log1p", "arima", True, {}),
        ("prophet_w20_raw", "prophet", False, {"prophet_window_size": 20}),
        ("prophet_w20_log1p", "prophet", True, {"prophet_window_size": 20}),
        ("prophet_w50_raw", "prophet", False, {"prophet_window_size": 50}),
        ("prophet_w50_log1p", "prophet", True, {"prophet_window_size": 50}),
        ("kalman_default_raw", "kalman", False, KALMAN_DEFAULT),
        ("kalman_default_log1p", "kalman", True, KALMAN_DEFAULT),
        ("kalman_reactive_raw", "kalman", False, KALMAN_REACTIVE),
        ("kalman_reactive_log1p", "kalman", True, KALMAN_REACTIVE),
    ],
)
def test_load_predictor_presets(name, family, log1p, params):
    preset = LOAD_PREDICTOR_PRESETS[name]
    assert preset.fields() == {
        "load_predictor": family,
        "load_predictor_log1p": log1p,
        **params,
    }
    assert name in SEARCH_CHOICES["load_predictor_candidates"]


def test_a_predictor_dict_gets_its_familys_defaults():
    assert LoadPredictor(load_predictor="kalman") == LOAD_PREDICTOR_PRESETS["kalman_default_raw"]
    assert LoadPredictor(load_predictor="prophet") == LOAD_PREDICTOR_PRESETS["prophet_w50_raw"]


# --- pinned parallel layouts --------------------------------------------------------------------


def test_pinned_layouts_are_accepted_and_convert_to_enumeration_configs():
    agg = build(search_space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 4, "replicas": 2}]})
    assert agg.search_space.parallel_configs[0].config == ReplicaConfig(WorkerShape(tp=4), 2)
    pair = {"prefill": {"tp": 2}, "decode": {"attention_dp": 4, "moe_ep": 4, "tp": 1}}
    disagg = build(search_space={"deployment_mode": ["disagg"], "parallel_configs": [pair]})
    assert disagg.search_space.parallel_configs[0].config == DisaggConfig(
        ReplicaConfig(WorkerShape(tp=2), 1), ReplicaConfig(WorkerShape(attention_dp=4, moe_ep=4), 1)
    )


@pytest.mark.parametrize(
    ("mode", "pin", "field", "match"),
    [
        (["disagg", "agg"], {"tp": 4}, "", "exactly one mode"),
        (["agg"], {"replicas": 2}, ".0.tp", "Field required"),
        (["agg"], {"tp": 4, "pp": 2}, ".0.pp", ""),
        (["disagg"], {"tp": 4}, ".0.prefill", "Field required"),
        (["disagg"], {"prefill": 4, "decode": {"tp": 4}}, ".0.prefill", "dictionary"),
        (["disagg"], {"prefill": {"tp": 4}, "decode": {"replicas": 2}}, ".0.decode.tp", "Field required"),
    ],
)
def test_invalid_pins_are_rejected(mode, pin, field, match):
    rejected(
        f"search_space.parallel_configs{field}",
        match,
        search_space={"deployment_mode": mode, "parallel_configs": [pin]},
    )


# --- cross-field search-space rules -------------------------------------------------------------


def test_host_offload_needs_kv_bytes_per_token():
    rejected(
        "search_space.kv_bytes_per_token",
        "kv_bytes_per_token is required",
        search_space={"num_g2_blocks": 100},
    )
    assert (
        build(search_space={"num_g2_blocks": 100, "kv_bytes_per_token": 4096}).search_space.num_g2_blocks
        == 100
    )


@pytest.mark.parametrize(("mode", "role"), [("agg", "agg"), ("disagg", "prefill")])
def test_host_offload_needs_prefix_caching_on_the_offloading_role(mode, role):
    offload = {"num_g2_blocks": 100, "kv_bytes_per_token": 4096, "deployment_mode": [mode]}
    rejected(
        f"search_space.{role}_enable_prefix_caching",
        search_space={**offload, f"{role}_enable_prefix_caching": False},
    )


def test_disagg_needs_one_block_size():
    sizes = {"prefill_block_size": 32, "decode_block_size": 64}
    rejected("search_space.decode_block_size", "prefill_block_size == decode_block_size", search_space=sizes)
    assert build(search_space={**sizes, "deployment_mode": ["agg"]}).search_space.prefill_block_size == 32


@pytest.mark.parametrize(
    "pin",
    [
        {"active_decode_blocks_threshold": 0.9},
        {"active_prefill_tokens_threshold": 10000},
        {"active_prefill_tokens_threshold_frac": 2.0},
        {"router_queue_threshold": 0.0, "router_queue_policy": "lcfs"},
        {"kv_event_lag_ms": 5.0},
        {"use_kv_events": False, "router_ttl_secs": 30.0},
        {"no_admission_control": True},
    ],
)
def test_admission_control_pins_are_accepted_under_kv_router(pin):
    space = build(search_space={"router_mode": ["kv_router"], **pin}).search_space
    assert all(getattr(space, key) == value for key, value in pin.items())


def test_no_admission_control_contradicts_a_threshold():
    pins = {"no_admission_control": True, "active_prefill_tokens_threshold": 10000}
    rejected("search_space.active_prefill_tokens_threshold", "contradicts", search_space=pins)


def test_an_event_lag_needs_kv_events():
    pins = {"use_kv_events": False, "kv_event_lag_ms": 5.0}
    rejected("search_space.kv_event_lag_ms", "use_kv_events is false", search_space=pins)


# --- workload -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "match"), [(1.9, "fractional"), (0, "greater than"), (True, "boolean"), ([4], "integer")]
)
def test_concurrency_is_a_positive_integer(value, match):
    rejected("workload.concurrency", match, workload={"concurrency": value})


def test_integral_floats_count_as_integers():
    workload = build(workload={"concurrency": 4.0}).workload
    assert workload.max_num_inflight() == 4 and isinstance(workload.max_num_inflight(), int)


@pytest.mark.parametrize(
    ("workload", "override", "expected"),
    [
        ({"concurrency": 256}, None, 2560),
        ({"concurrency": 256}, 8, 80),
        ({"concurrency": None, "request_rate": 25.0, "num_request_ratio": 4}, None, 100),
        ({"concurrency": None, "kv_load_ratio": 0.5, "num_request_ratio": 0.01}, 10, 1),
    ],
)
def test_request_count_is_the_ratio_times_the_load(workload, override, expected):
    assert build(workload=workload).workload.num_requests(override) == expected


def test_a_kv_load_workload_needs_its_resolved_concurrency():
    with pytest.raises(ValueError, match="resolved concurrency"):
        build(workload={"concurrency": None, "kv_load_ratio": 0.5}).workload.num_requests()


def test_in_flight_cap():
    assert build(workload={"concurrency": 8}).workload.max_num_inflight(16) == 16
    assert build(workload={"concurrency": None, "request_rate": 2.0}).workload.max_num_inflight() is None
    trace = build(trace=True, workload={"replay_concurrency": 32}).workload
    assert trace.max_num_inflight(16) == 32


def test_request_rate_means_fixed_gaps_unless_poisson():
    constant = build(workload={"concurrency": None, "request_rate": 20.0}).workload
    assert (constant.arrival, constant.arrival_interval_ms) == ("constant", 50.0)
    assert (
        build(workload={"concurrency": None, "request_rate": 20.0, "arrival": "poisson"}).workload.arrival
        == "poisson"
    )
    assert build().workload.arrival_interval_ms is None
    rejected("workload.arrival", "needs request_rate", workload={"arrival": "poisson"})


@pytest.mark.parametrize(
    ("workload", "field", "match"),
    [
        ({"concurrency": None}, "workload", "exactly one of request_rate, concurrency, or kv_load_ratio"),
        ({"request_rate": 2.0}, "workload.concurrency", "exactly one of"),
        ({"num_request_ratio": None}, "workload.num_request_ratio", "needs num_request_ratio"),
        ({"isl": None, "osl": None}, "workload.isl", "needs isl, osl"),
        ({"replay_concurrency": 4}, "workload.replay_concurrency", "for trace workloads"),
        ({"arrival_speedup_ratio": 2.0}, "workload.arrival_speedup_ratio", "for trace workloads"),
    ],
)
def test_synthetic_workload_rules(workload, field, match):
    rejected(field, match, workload=workload)


@pytest.mark.parametrize(
    ("workload", "field", "match"),
    [
        (
            {"isl": 128, "request_rate": 1.0},
            "workload.isl",
            "must not set synthetic fields: isl, request_rate",
        ),
        ({"arrival": "poisson"}, "workload.arrival", "synthetic fields"),
        ({"replay_concurrency": 0}, "workload.replay_concurrency", "greater than"),
        ({"trace_format": "sharegpt"}, "workload.trace_format", "mooncake"),
        ({"arrival_speedup_ratio": 0}, "workload.arrival_speedup_ratio", "greater than"),
    ],
)
def test_trace_workload_rules(workload, field, match):
    rejected(field, match, workload=workload, trace=True)


def test_a_trace_workload_may_restate_synthetic_defaults():
    assert build(trace=True, workload={"shared_prefix_ratio": 0.0, "isl": None}).workload.is_trace


# --- kv_load_ratio and the Pareto goal -----------------------------------------------------------


def test_a_ranged_kv_load_ratio_needs_a_pareto_goal():
    rejected("workload.kv_load_ratio", "ranged workload.kv_load_ratio", workload=KV_LOAD)
    workload = build(workload=KV_LOAD, goal={"target": "pareto"}).workload
    assert workload.kv_load_ratio_range == (0.0, 1.0)


def test_a_scalar_kv_load_ratio_suits_any_goal_and_may_oversubscribe():
    workload = build(workload={"concurrency": None, "kv_load_ratio": 1.5}).workload
    assert (workload.kv_load_ratio, workload.kv_load_ratio_range) == (1.5, None)


def test_a_pareto_goal_with_no_load_sweeps_kv_load_from_0_to_1():
    workload = build(workload={"concurrency": None}, goal={"target": "pareto"}).workload
    assert workload.kv_load_ratio_range == (0.0, 1.0)
    assert build(goal={"target": "pareto"}).workload.kv_load_ratio is None  # a load was given
    rejected("workload", "exactly one of", workload={"concurrency": None})  # not pareto: no default


@pytest.mark.parametrize(
    ("ratio", "match"),
    [
        ([], r"\[min, max\]"),
        ([0.0], r"\[min, max\]"),
        ([0.0, 0.5, 1.0], r"\[min, max\]"),
        ([-0.1, 1.0], "greater than or equal to 0"),
        ([0.5, 0.5], "min < max"),
        ([0.0, float("inf")], "finite"),
        (float("inf"), "finite"),
        ("half", "valid number"),
    ],
)
def test_invalid_kv_load_ratios_are_rejected(ratio, match):
    rejected(
        "workload.kv_load_ratio",
        match,
        workload={"concurrency": None, "kv_load_ratio": ratio},
        goal={"target": "pareto"},
    )


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 4), st.floats(0, 4))
def test_a_kv_load_range_is_valid_exactly_when_increasing(low, high):
    blocks = {"workload": {"concurrency": None, "kv_load_ratio": [low, high]}, "goal": {"target": "pareto"}}
    if low < high:
        assert build(**blocks).workload.kv_load_ratio_range == (low, high)
    else:
        rejected("workload.kv_load_ratio", "min < max", **blocks)


# --- goals --------------------------------------------------------------------------------------


def test_targets_are_the_scored_objectives_plus_pareto():
    assert set(get_args(Objective)) == set(OBJECTIVE_DIRECTIONS)
    assert set(get_args(Target)) == set(OBJECTIVE_DIRECTIONS) | {"pareto"}


@pytest.mark.parametrize(
    ("target", "planner"),
    [
        ("throughput", "throughput"),
        ("throughput_per_gpu", "throughput"),
        ("throughput_per_user", "throughput"),
        ("cost_per_million_tokens", "throughput"),
        ("e2e_latency", "latency"),
        ("goodput", "sla"),
        ("goodput_per_gpu", "sla"),
        ("pareto", "throughput"),
    ],
)
def test_planner_target_per_goal(target, planner):
    assert build(goal={"target": target, "sla": SLA}).goal.planner_target == planner


@pytest.mark.parametrize(
    ("sla", "accepted"),
    [
        (None, False),
        ({"ttft_ms": 500}, False),
        ({"itl_ms": 20}, False),
        (SLA, True),
        ({"e2e_ms": 3000}, True),
    ],
)
@pytest.mark.parametrize("target", ["goodput", "goodput_per_gpu"])
def test_goodput_needs_an_sla_it_can_judge_a_request_by(target, sla, accepted):
    goal = {"target": target, "sla": sla}
    if accepted:
        assert build(goal=goal).goal.sla is not None
    else:
        rejected("goal.sla", "require an SLA target", goal=goal)


@pytest.mark.parametrize("target", ["throughput_per_gpu", "e2e_latency", "cost_per_million_tokens"])
def test_other_targets_need_no_sla(target):
    assert build(goal={"target": target}).goal.objectives == (target,)


@pytest.mark.parametrize(
    ("sla", "field"), [({"ttft_ms": 0, "itl_ms": 20}, ".ttft_ms"), ({"e2e_ms": -1}, ".e2e_ms"), ({}, "")]
)
def test_sla_values_are_positive_and_present(sla, field):
    rejected(f"goal.sla{field}", goal={"target": "goodput", "sla": sla})


def test_pareto_objectives_default_and_custom():
    assert build(goal={"target": "pareto"}).goal.objectives == DEFAULT_PARETO_OBJECTIVES
    custom = build(
        goal={"target": "pareto", "pareto_objectives": ["goodput_per_gpu", "e2e_latency"], "sla": SLA}
    )
    assert custom.goal.objectives == ("goodput_per_gpu", "e2e_latency")
    assert custom.goal.planner_target == "sla"


@pytest.mark.parametrize(
    ("goal", "field", "match"),
    [
        (
            {"target": "throughput", "pareto_objectives": ["throughput", "e2e_latency"]},
            "goal.pareto_objectives",
            "only valid when target is 'pareto'",
        ),
        ({"target": "pareto", "pareto_objectives": ["goodput", "throughput"]}, "goal.sla", "require an SLA"),
        (
            {"target": "pareto", "pareto_objectives": ["throughput", "throughput"]},
            "goal.pareto_objectives",
            "distinct",
        ),
        ({"target": "pareto", "pareto_objectives": []}, "goal.pareto_objectives", "at least 2 objectives"),
        (
            {"target": "pareto", "pareto_objectives": ["throughput"]},
            "goal.pareto_objectives",
            "at least 2 objectives",
        ),
        ({"target": "pareto", "pareto_objectives": ["pareto", "throughput"]}, "goal.pareto_objectives.0", ""),
        ({"target": "fastest"}, "goal.target", ""),
    ],
)
def test_invalid_goals_are_rejected(goal, field, match):
    rejected(field, match, goal=goal)


@pytest.mark.parametrize("target", ["throughput_per_gpu", "pareto"])
def test_a_list_concurrency_is_rejected_under_any_goal(target):
    rejected("workload.concurrency", goal={"target": target}, workload={"concurrency": [4, 8]})


def test_cost_per_million_tokens_as_target_and_pareto_objective():
    scalar = build(goal={"target": "cost_per_million_tokens", "price_per_gpu_hour_usd": 2.5})
    assert scalar.goal.objectives == ("cost_per_million_tokens",)
    assert scalar.price_per_gpu_hour_usd() == 2.5
    pareto = build(
        goal={"target": "pareto", "pareto_objectives": ["cost_per_million_tokens", "throughput_per_user"]}
    )
    assert pareto.goal.objectives == ("cost_per_million_tokens", "throughput_per_user")
    assert get_system("h200_sxm").price_per_gpu_hour_usd is None
    with pytest.raises(ConfigError, match="cost_per_million_tokens needs a price") as info:
        pareto.price_per_gpu_hour_usd()
    assert info.value.where == "goal.price_per_gpu_hour_usd"


def test_cost_uses_the_system_files_price(tmp_path):
    catalog = resources.files("aisimulate.catalog") / "systems" / "h200_sxm.yaml"
    text = catalog.read_text().replace("price_per_gpu_hour_usd: null", "price_per_gpu_hour_usd: 3.0")
    system = write(tmp_path, text, "priced.yaml")
    config = build(search_space={"hardware_sku": str(system)}, goal={"target": "cost_per_million_tokens"})
    assert config.price_per_gpu_hour_usd() == 3.0
    assert build().price_per_gpu_hour_usd() is None  # no cost objective: no price needed


# --- sweep --------------------------------------------------------------------------------------


def test_sweep_options():
    sweep = build(
        sweep={
            "sampler": "nsgaii",
            "executor": "ray",
            "ray_address": "ray://head:10001",
            "storage": "sqlite:///s.db",
        }
    ).sweep
    assert (sweep.sampler, sweep.executor, sweep.ray_address) == ("nsgaii", "ray", "ray://head:10001")
    assert build(sweep={"parallel_evals": 4, "candidates_per_round": 12}).sweep.candidates_per_round == 12


@pytest.mark.parametrize(
    ("sweep", "field", "match"),
    [
        ({"ray_address": "ray://head:10001"}, "sweep.ray_address", "needs executor: ray"),
        ({"storage": "study.db"}, "sweep.storage", "database URL"),
    ],
)
def test_invalid_sweep_options(sweep, field, match):
    rejected(field, match, sweep=sweep)


# --- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "method"), [("model_name", "resolve_model"), ("hardware_sku", "resolve_system")]
)
def test_names_resolve_lazily(field, method):
    space = build(search_space={field: "no-such-thing"}).search_space
    with pytest.raises(UnknownNameError) as info:
        getattr(space, method)()
    assert info.value.where == f"search_space.{field}"


# --- YAML loading -------------------------------------------------------------------------------

YAML = """\
search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  router_mode:
    - kv_router
    - {bad}
workload:
  trace_path: {trace}
"""


def test_a_relative_trace_path_resolves_against_the_yaml_folder(tmp_path, monkeypatch):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.jsonl").write_text("")
    path = write(tmp_path, YAML.format(bad="round_robin", trace="traces/t.jsonl"))
    monkeypatch.chdir(Path(__file__).parent)
    assert SmartSearchConfig.from_yaml(path).workload.trace_path == tmp_path / "traces" / "t.jsonl"
    absolute = write(
        tmp_path, YAML.format(bad="round_robin", trace=tmp_path / "traces" / "t.jsonl"), "abs.yaml"
    )
    assert SmartSearchConfig.from_yaml(absolute).workload.trace_path == tmp_path / "traces" / "t.jsonl"


def test_a_relative_trace_path_falls_back_to_the_working_directory(tmp_path, monkeypatch):
    """A config written for the reference sweeper names its trace relative to where it runs."""
    (tmp_path / "run" / "traces").mkdir(parents=True)
    (tmp_path / "run" / "traces" / "t.jsonl").write_text("")
    (tmp_path / "configs").mkdir()
    path = write(tmp_path / "configs", YAML.format(bad="round_robin", trace="traces/t.jsonl"))
    monkeypatch.chdir(tmp_path / "run")
    assert SmartSearchConfig.from_yaml(path).workload.trace_path == tmp_path / "run" / "traces" / "t.jsonl"
    (tmp_path / "configs" / "traces").mkdir()
    (tmp_path / "configs" / "traces" / "t.jsonl").write_text("")  # next to the YAML wins
    beside = tmp_path / "configs" / "traces" / "t.jsonl"
    assert SmartSearchConfig.from_yaml(path).workload.trace_path == beside


def test_a_missing_trace_is_reported_at_load_naming_every_place(tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).parent)
    path = write(tmp_path, YAML.format(bad="round_robin", trace="gone.jsonl"))
    beside = re.escape(str(tmp_path / "gone.jsonl"))
    cwd = re.escape(str(Path(__file__).parent / "gone.jsonl"))
    with pytest.raises(
        ConfigError,
        match=rf"^workload.trace_path: no such file: gone.jsonl \(looked for {beside} and {cwd}\) "
        rf"\[{re.escape(str(path))}:8\]$",
    ):
        SmartSearchConfig.from_yaml(path)
    absolute = write(tmp_path, YAML.format(bad="round_robin", trace=tmp_path / "gone.jsonl"), "abs.yaml")
    with pytest.raises(ConfigError, match=rf"^workload.trace_path: no such file: {beside} \["):
        SmartSearchConfig.from_yaml(absolute)


def test_the_references_aic_nextn_is_nextn():
    assert build(search_space={"aic_nextn": 3}).search_space.nextn == 3
    rejected("search_space.aic_nextn", "set one of them", search_space={"aic_nextn": 3, "nextn": 3})
    rejected("search_space.nextn", "less than or equal to 5", search_space={"aic_nextn": 6})


def test_trace_format_mooncake_is_accepted(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    text = YAML.format(bad="round_robin", trace="t.jsonl") + "  trace_format: mooncake\n"
    assert SmartSearchConfig.from_yaml(write(tmp_path, text)).workload.trace_format == "mooncake"


def test_an_invalid_field_names_file_field_and_line(tmp_path):
    path = write(tmp_path, YAML.format(bad="bogus", trace="t.jsonl"))
    with pytest.raises(ConfigError) as info:
        SmartSearchConfig.from_yaml(path)
    message = str(info.value)
    assert message.startswith("search_space.router_mode.1: Input should be 'kv_router' or 'round_robin'")
    assert message.endswith(f"[{path}:6]") and "\n" not in message


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("search_space: [unclosed\n", r"^invalid YAML .*:\d+\]$"),
        ("- a list\n", "must be a YAML mapping"),
        ("search_space:\n  model_name: m\n", "^search_space.hardware_sku: Field required"),
    ],
)
def test_a_bad_file_gives_one_line_naming_it(tmp_path, text, match):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=match) as info:
        SmartSearchConfig.from_yaml(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        SmartSearchConfig.from_yaml(tmp_path / "absent.yaml")
