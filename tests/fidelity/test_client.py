from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from aisimulate.fidelity import ReplayCase, build_case, read_measured
from aisimulate.fidelity.client import (
    FIXED_LENGTHS,
    INFERENCEX,
    client_of,
    sglang_recv_interval,
    trtllm_agg_launch,
    vllm_max_num_batched_tokens,
)
from aisimulate.fidelity.measured import RecordedWorkers
from aisimulate.fidelity.sglang_recipes import sglang_single_node_recipe

SILICON = Path(__file__).parent / "data" / "silicon_small.csv"


@pytest.fixture(scope="module")
def silicon():
    return {r.id: r for r in read_measured(SILICON)}


@pytest.mark.parametrize(
    ("source", "client"),
    [
        ("db-dump/2026-04-27; config_id=486; silicon_concurrency=4", INFERENCEX),
        ("source_file=2026-03-25.csv; model=GLM-5; silicon_concurrency=5", INFERENCEX),
        ("2026-04-06.csv", INFERENCEX),  # our own format's source_file column
        (
            "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/Qwen_Qwen3-32B.csv",
            FIXED_LENGTHS,
        ),
        ("Qwen_Qwen3-32B.csv", FIXED_LENGTHS),
        ("", FIXED_LENGTHS),
    ],
)
def test_the_client_is_told_by_the_rows_source(silicon, source, client):
    row = next(iter(silicon.values()))
    assert client_of(replace(row, source=source)) is client


def test_an_inferencex_row_draws_its_lengths_and_counts_ten_prompts_per_user(silicon):
    case = build_case(silicon["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"])
    assert isinstance(case, ReplayCase)
    w = case.workload
    for length in (w.isl, w.osl):
        assert (length.dist, length.min, length.max) == ("uniform", 819, 1024)  # int(0.8 x 1024)
    assert (w.num_requests, w.concurrency) == (40, 4)  # 10 x concurrency, no floor
    assert case.plan.prefill.max_model_len == 1024 + 1024
    # The drawn lengths desynchronise the loop; no fitted spread is added on top.
    assert (
        build_case(silicon["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"], osl_spread=0.5).workload == w
    )


def test_a_fixed_length_client_keeps_the_fitted_spread_and_the_request_floor(silicon):
    row = silicon["qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1"]
    w = build_case(row, osl_spread=0.02).workload
    assert w.isl == 1024 and w.osl.dist == "normal" and w.osl.mean == 128
    assert w.num_requests == 100
    assert FIXED_LENGTHS.length(1000) == 1000 and INFERENCEX.length(1) == 1


def test_inferencex_sglang_rows_poll_for_requests_as_their_recipes_launch_them(silicon):
    row = silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"]
    fp4 = "nvidia/DeepSeek-V3-0324-FP4"
    assert sglang_recv_interval(row, fp4) == 30  # 16 users and more
    assert sglang_recv_interval(replace(row, concurrency=8), fp4) == 10
    case = build_case(replace(row, concurrency=8))
    assert isinstance(case, ReplayCase) and case.model == fp4
    assert case.plan.agg.sglang.scheduler_recv_interval == 10
    # Disaggregated runs poll as the checkpoint's recipe does from 16 users on (below: every
    # pass), on both roles; a recipe that sets none (GLM-5), other backends and other clients
    # keep SGLang's default.
    disagg = silicon["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"]
    assert sglang_recv_interval(disagg, fp4) == 1
    plan = build_case(replace(disagg, concurrency=32)).plan
    assert plan.prefill.sglang.scheduler_recv_interval == plan.decode.sglang.scheduler_recv_interval == 30
    assert sglang_recv_interval(row, "zai-org/GLM-5-FP8") == 1
    vllm = silicon["minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734"]
    assert sglang_recv_interval(vllm, "MiniMaxAI/MiniMax-M2.5") == 1
    assert sglang_recv_interval(replace(row, source="Qwen_Qwen3-32B.csv"), fp4) == 1


def test_deepseek_r1_and_v3_names_of_one_inferencex_run_poll_alike(silicon):
    # The results database writes InferenceX's DeepSeek-R1-0528 runs under both names; the
    # same run must replay with the same interval whichever name it carries.
    disagg = replace(silicon["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"], concurrency=32)
    for name in (
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-R1",
        "nvidia/DeepSeek-V3-0324-FP4",
        "nvidia/DeepSeek-R1-0528-FP4",
    ):
        assert sglang_recv_interval(disagg, name) == 30
    case = build_case(replace(disagg, model="deepseek-ai/DeepSeek-R1"))
    assert isinstance(case, ReplayCase) and "R1" in case.model
    assert case.plan.decode.sglang.scheduler_recv_interval == 30


def test_inferencex_vllm_rows_batch_the_tokens_their_recipes_launch_with(silicon):
    row = silicon["minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734"]
    fp8 = "MiniMaxAI/MiniMax-M2.5"
    assert vllm_max_num_batched_tokens(row, fp8) == 2048  # the MiniMax B300 recipes: 2 x ISL
    assert vllm_max_num_batched_tokens(replace(row, isl=8192), "nvidia/MiniMax-M2.5-NVFP4") == 16384
    case = build_case(row)
    assert isinstance(case, ReplayCase) and case.model == fp8
    assert case.plan.agg.max_num_batched_tokens == 2048
    # Other systems' recipes, other checkpoints, other clients and other backends: the default.
    assert vllm_max_num_batched_tokens(replace(row, system="h100_sxm"), fp8) is None
    assert vllm_max_num_batched_tokens(replace(row, source="Qwen_Qwen3-32B.csv"), fp8) is None
    sglang = silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"]
    assert vllm_max_num_batched_tokens(sglang, fp8) is None
    default = build_case(replace(row, system="h100_sxm"))
    assert isinstance(default, ReplayCase)
    assert default.plan.agg.max_num_batched_tokens == 8192


def test_inferencex_b300_deepseek_rows_run_their_recipes_budgets_and_its_release_graphs_prompts(silicon):
    row = silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"]  # SGLang 0.5.10.post1, TP4 EP4
    agg = build_case(row).plan.agg
    assert (agg.kv_cache_dtype, agg.gpu_memory_utilization) == ("fp8", 0.85)
    opts = agg.sglang
    assert (opts.chunked_prefill_size, opts.max_prefill_tokens) == (16384, 16384)
    assert opts.piecewise_cuda_graph_max_tokens == 16384  # up to the chunked-prefill size
    # The FP8 recipe's budgets depend on its TP size.
    fp8 = "deepseek-ai/DeepSeek-V3"
    fields, options = sglang_single_node_recipe(row, fp8, RecordedWorkers(tp=4, moe_tp=4))
    assert fields["gpu_memory_utilization"] == 0.95 and options["chunked_prefill_size"] == 8192
    fields, options = sglang_single_node_recipe(row, fp8, RecordedWorkers(tp=8, moe_tp=8))
    assert fields["gpu_memory_utilization"] == 0.82 and options["max_prefill_tokens"] == 32768
    assert sglang_single_node_recipe(row, fp8, RecordedWorkers(tp=2, moe_tp=2)) == ({}, {})
    # Other backends, modes, clients and checkpoints keep the engine's defaults.
    assert sglang_single_node_recipe(row, "Qwen/Qwen3.5-397B-A17B", RecordedWorkers(tp=4)) == ({}, {})
    disagg = silicon["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"]
    shape = RecordedWorkers(tp=4, moe_tp=4)
    assert sglang_single_node_recipe(replace(disagg, system="b300_sxm"), fp8, shape) == ({}, {})
    fixed = replace(row, source="Qwen_Qwen3-32B.csv")
    assert sglang_single_node_recipe(fixed, fp8, RecordedWorkers(tp=4, moe_tp=4)) == ({}, {})


@pytest.mark.parametrize(
    ("version", "measured_on", "graphed"),
    [
        ("0.5.10.post1", date(2026, 4, 17), True),
        ("0.5.10", date(2026, 8, 1), True),  # an old image measured late still graphs them
        ("0.5.12", date(2026, 5, 1), True),  # a later release measured before the change
        ("0.5.12", date(2026, 6, 20), False),  # may hold the change: not assumed
        ("0.5.9", date(2026, 4, 17), False),  # the graph was opt-in
        ("", date(2026, 4, 17), False),  # no recorded release
        ("nightly-dev", date(2026, 4, 17), False),
    ],
)
def test_only_releases_that_graphed_extend_passes_by_default_replay_the_graph(
    silicon, version, measured_on, graphed
):
    row = replace(
        silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"],
        backend_version=version,
        measured_on=measured_on,
    )
    _, options = sglang_single_node_recipe(
        row, "nvidia/DeepSeek-V3-0324-FP4", RecordedWorkers(tp=4, moe_ep=4)
    )
    assert ("piecewise_cuda_graph_max_tokens" in options) is graphed
    assert options["chunked_prefill_size"] == 16384  # the recipe's budgets either way


def test_gap_analysis_trtllm_rows_launch_with_aiconfigurators_token_budget_and_no_chunking(silicon):
    """AIConfigurator's generator: max_num_tokens = max_batch_size + ISL + 1500, chunked prefill
    off, on the aggregated TensorRT-LLM workers of its gap-analysis runs; the batch is the users
    each worker holds."""
    row = silicon["qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1"]
    assert trtllm_agg_launch(row, 8) == {"enable_chunked_prefill": False, "max_num_batched_tokens": 2532}
    case = build_case(row)
    assert isinstance(case, ReplayCase)
    assert case.plan.agg.max_num_batched_tokens == 8 + 1024 + 1500
    assert case.plan.agg.enable_chunked_prefill is False
    two = silicon["qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c8_tp2_epnone_4"]
    assert two.workers == 2
    shared = build_case(two)
    assert isinstance(shared, ReplayCase)
    assert shared.plan.agg.max_num_batched_tokens == 4 + 2000 + 1500  # 8 users over 2 workers
    # Other sources, modes and backends keep the engine's defaults.
    assert trtllm_agg_launch(replace(row, source="Qwen_Qwen3-32B.csv"), 8) == {}
    assert trtllm_agg_launch(replace(row, backend="vllm"), 8) == {}
    assert trtllm_agg_launch(replace(row, mode="disagg"), 8) == {}
    other = build_case(replace(row, source="Qwen_Qwen3-32B.csv"))
    assert isinstance(other, ReplayCase)
    assert other.plan.agg.max_num_batched_tokens == 8192 and other.plan.agg.enable_chunked_prefill
