from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from aisimulate.catalog import get_model
from aisimulate.fidelity import ReplayCase, Skipped, build_case, read_measured
from aisimulate.fidelity.measured import RecordedWorkers
from aisimulate.perf.calibration import e2e_osl_spread
from aisimulate.replay.workers import resolve_engine

SMALL = Path(__file__).parent / "data" / "measured_small.csv"


@pytest.fixture(scope="module")
def rows():
    return {r.id: r for r in read_measured(SMALL)}


def test_instruct_ids_resolve_to_the_base_architecture(rows):
    case = build_case(rows["llama8b_instruct_c4"])
    assert isinstance(case, ReplayCase)
    assert case.model == "meta-llama/Llama-3.1-8B"
    assert (case.plan.backend, case.plan.agg.tp, case.plan.agg.moe_tp) == ("trtllm", 1, None)


def test_a_blank_precision_keeps_the_checkpoint_named_in_the_row(rows):
    case = build_case(rows["llama8b_nvidia_fp8_c4"])
    assert case.model == "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert get_model(case.model).weight_dtype == "fp8"


def test_a_precision_column_picks_the_catalog_variant_in_that_format(rows):
    case = build_case(rows["qwen32b_fp8_c2"])
    assert case.model == "nvidia/Qwen3-32B-FP8"  # plain per-tensor fp8 before the block-scaled one
    bf16 = build_case(replace(rows["qwen32b_fp8_c2"], precision="bf16", gemm_quant="", moe_quant=""))
    assert bf16.model == "Qwen/Qwen3-32B"


def test_gpt_oss_fp4_is_its_own_mxfp4_checkpoint_with_the_rows_expert_split(rows):
    case = build_case(rows["gptoss_fp4_c2"])
    assert case.model == "openai/gpt-oss-120b"
    assert get_model(case.model).weight_dtype == "mxfp4"
    assert (case.plan.agg.tp, case.plan.agg.moe_tp, case.plan.agg.moe_ep) == (2, 2, 1)


@pytest.mark.parametrize(
    ("model", "precision", "checkpoint"),
    [
        ("zhipuai/GLM-5", "fp8", "zai-org/GLM-5-FP8"),
        ("zhipuai/GLM-5", "fp4", "nvidia/GLM-5-NVFP4"),
        ("Qwen/Qwen3.5-397B-A17B", "fp8", "Qwen/Qwen3.5-397B-A17B-FP8"),
        ("Qwen/Qwen3.5-397B-A17B", "fp4", "nvidia/Qwen3.5-397B-A17B-NVFP4"),
        ("MiniMaxAI/MiniMax-M2.5", "fp4", "nvidia/MiniMax-M2.5-NVFP4"),
    ],
)
def test_frontier_rows_pick_their_checkpoint(rows, model, precision, checkpoint):
    row = replace(rows["gptoss_fp4_c2"], model=model, system="b200_sxm", tp=8, moe_tp=1, moe_ep=8)
    case = build_case(replace(row, precision=precision, gemm_quant="", moe_quant=""))
    assert case.model == checkpoint


def test_kimi_k25_rows_pick_the_native_int4_or_the_nvfp4_checkpoint(rows):
    kimi = dict(model="moonshotai/Kimi-K2.5", system="b200_sxm", tp=8, moe_tp=1, moe_ep=8)
    int4 = build_case(
        replace(rows["gptoss_fp4_c2"], precision="int4", gemm_quant="int4_wo", moe_quant="int4_wo", **kimi)
    )
    assert int4.model == "moonshotai/Kimi-K2.5" and get_model(int4.model).weight_dtype == "int4"
    fp4 = build_case(replace(rows["gptoss_fp4_c2"], **kimi))
    assert fp4.model == "nvidia/Kimi-K2.5-NVFP4"


def test_the_workload_is_the_closed_loop_benchmark(rows):
    case = build_case(rows["llama8b_instruct_c4"])
    w = case.workload
    assert (w.isl, w.concurrency, w.num_requests) == (1024, 4, 100)
    # TRT-LLM's measured loops split up: its calibrated spread, around the row's own length.
    assert (w.osl.mean, w.osl.std) == (128, round(e2e_osl_spread("trtllm") * 128)) and w.osl.std >= 1
    big = build_case(replace(rows["llama8b_instruct_c4"], concurrency=64))
    assert big.workload.num_requests == 640
    assert big.plan.agg.max_model_len == 1024 + 128 + 3 * w.osl.std  # the spread's longest output


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, "unknown model 'acme/NotAModel-7B'"),
        ({"model": "openai/gpt-oss-120b", "precision": "fp8"}, "no fp8 checkpoint of openai/gpt-oss-120b"),
        ({"model": "Qwen/Qwen3-32B", "precision": "int3"}, "unknown precision 'int3'"),
        ({"model": "Qwen/Qwen3-32B", "backend": "tgi"}, "unknown backend 'tgi'"),
        ({"model": "Qwen/Qwen3-32B", "system": "h900"}, "unknown system 'h900'"),
        ({"model": "Qwen/Qwen3-32B", "measured_tpot_ms": None}, "no measured TTFT or TPOT"),
        ({"model": "Qwen/Qwen3-32B", "osl": 1}, "osl 1 has no token gaps"),
        (
            {"model": "openai/gpt-oss-120b", "precision": "fp8", "moe_quant": "fp4"},
            "mixed precision fp8/fp4",
        ),
    ],
)
def test_rows_we_cannot_replay_are_skipped_with_a_reason(rows, change, reason):
    result = build_case(replace(rows["unknown_model"], **change))
    assert isinstance(result, Skipped)
    assert reason in result.reason


def test_a_spread_desynchronises_the_loop_around_the_same_mean_length(rows):
    row = replace(rows["llama8b_instruct_c4"], osl=1000)
    osl = build_case(row, osl_spread=0.02).workload.osl
    assert (osl.mean, osl.std, osl.min, osl.max) == (1000, 20, 940, 1060)
    assert build_case(row, osl_spread=0.02).plan.agg.max_model_len == 1024 + 1060
    assert build_case(row, osl_spread=0.0).workload.osl == 1000


@pytest.mark.parametrize(
    ("backend", "version", "day", "expected"),
    [
        ("vllm", "0.12.0", None, False),  # synchronous by default then
        ("vllm", "0.11.2", None, False),
        ("vllm", "0.18.0", None, True),
        ("vllm", "v0.14.1", None, True),
        ("vllm", "0.12.0", date(2026, 3, 1), False),  # an old release run later: its version decides
        ("vllm", "", date(2025, 10, 29), False),  # measured before 0.14 was out: synchronous
        ("vllm", "", date(2026, 1, 17), None),  # from that day on, unknown: the engine default
        ("vllm", "", None, None),  # not recorded at all: the engine default
        ("trtllm", "1.0.0", date(2025, 10, 29), None),  # vLLM's switch only
    ],
)
def test_a_vllm_row_schedules_as_its_release_did_by_default(rows, backend, version, day, expected):
    row = replace(rows["llama8b_nvidia_fp8_c4"], backend=backend, backend_version=version, measured_on=day)
    assert build_case(row).plan.agg.async_scheduling is expected


def test_an_unrecorded_version_reads_as_blank(rows):
    assert rows["llama8b_nvidia_fp8_c4"].backend_version == "0.10"
    assert all(r.backend_version != "nan" for r in rows.values())


@pytest.mark.parametrize("row_id", ["llama8b_nvidia_fp8_c4", "llama8b_instruct_c4"])
def test_a_case_gets_the_frontend_latency_of_a_plain_replay_unless_overridden(rows, row_id):
    from aisimulate.perf.calibration import e2e_frontend_latency_ms
    from aisimulate.replay import DeploymentPlan
    from aisimulate.replay.workers import resolve_frontend_latency_ms

    row = rows[row_id]
    case = build_case(row)
    plain = DeploymentPlan(model=case.model, system=row.system, backend=row.backend)
    # The case sets nothing the product lacks: the backend's default resolves it, as it does a
    # plain replay's.
    assert case.plan.frontend_latency_ms is None
    resolved = resolve_frontend_latency_ms(case.plan)
    assert resolved == resolve_frontend_latency_ms(plain) == e2e_frontend_latency_ms(row.backend) > 0
    assert resolve_frontend_latency_ms(build_case(row, frontend_latency_ms=0.0).plan) == 0.0


SILICON = Path(__file__).parent / "data" / "silicon_small.csv"


@pytest.fixture(scope="module")
def silicon():
    return {r.id: r for r in read_measured(SILICON)}


def test_a_disaggregated_row_replays_its_prefill_and_decode_pools(silicon):
    case = build_case(silicon["dsr1_gb300_trtllm_fp8_disagg_1024x1024_c4_cfg392"])
    plan = case.plan
    assert plan.mode == "disagg" and plan.agg is None
    p, d = plan.prefill, plan.decode
    assert (p.tp, p.attention_dp, p.moe_tp, p.moe_ep, p.replicas) == (1, 4, 1, 4, 1)
    assert (d.tp, d.attention_dp, d.moe_tp, d.moe_ep, d.replicas) == (8, 1, 1, 8, 4)
    assert plan.kv_transfer_bandwidth_gbps is None  # over the system's own links
    assert case.workload.concurrency == 4


def test_mtp_drafts_are_accepted_as_on_the_prompts_the_client_sent(silicon):
    # InferenceX sends random token ids: DeepSeek-R1's acceptance on random-token prompts; a client
    # of unrecorded prompts: the documented acceptance, measured on real ones.
    row = replace(
        silicon["dsr1_gb300_trtllm_fp8_disagg_1024x1024_c4_cfg392"], model="deepseek-ai/DeepSeek-R1", nextn=3
    )
    spec = get_model("deepseek-ai/DeepSeek-R1")
    random_tokens = build_case(row).plan
    assert random_tokens.decode.nextn_accept_rates == spec.mtp_accept_rates(3, random_prompts=True)
    assert random_tokens.prefill.nextn_accept_rates == spec.mtp_accept_rates(3, random_prompts=True)
    unrecorded = build_case(replace(row, source="")).plan
    assert unrecorded.decode.nextn_accept_rates == spec.mtp_accept_rates(3)
    assert random_tokens.decode.mean_tokens_per_step < unrecorded.decode.mean_tokens_per_step
    assert build_case(replace(row, nextn=0)).plan.decode.nextn_accept_rates is None


def test_aggregated_replicas_share_the_concurrency(silicon):
    case = build_case(silicon["qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c8_tp2_epnone_4"])
    assert (case.plan.agg.tp, case.plan.agg.replicas, case.workload.concurrency) == (2, 2, 8)


def test_a_worker_recorded_by_its_gpus_reads_attention_dp_inside_them(silicon):
    row = replace(
        silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"], tp=8, attn_dp=8, moe_tp=1, moe_ep=8
    )
    agg = build_case(row).plan.agg
    assert (agg.tp, agg.attention_dp, agg.moe_ep) == (1, 8, 8)  # 8 GPUs, one per attention-DP rank
    as_recorded = build_case(replace(row, tp=1)).plan.agg
    assert (as_recorded.tp, as_recorded.attention_dp) == (1, 8)


def test_a_vllm_worker_of_data_parallel_ranks_without_an_expert_split_runs_its_moe_tensor_parallel(silicon):
    # vLLM's default (no --enable-expert-parallel): the MoE layers span all DP x TP ranks.
    row = replace(
        silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"], tp=1, attn_dp=4, moe_tp=1, moe_ep=1
    )
    agg = build_case(replace(row, backend="vllm")).plan.agg
    assert (agg.tp, agg.attention_dp, agg.moe_tp, agg.moe_ep) == (1, 4, 4, 1)
    tp4 = build_case(replace(row, backend="vllm", tp=4, attn_dp=1)).plan.agg
    assert (tp4.tp, tp4.moe_tp, tp4.moe_ep) == (4, 4, 1)
    # Other backends' rows record their expert split: it stays as recorded.
    assert build_case(row).plan.agg.moe_tp == 1


def test_expert_parallel_ranks_that_do_not_divide_the_experts_run_redundant_slots(silicon):
    row = silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"]
    dep48 = build_case(replace(row, tp=1, attn_dp=48, moe_tp=1, moe_ep=48)).plan.agg
    assert (dep48.moe_ep, dep48.moe_expert_slots) == (48, 288)  # 256 experts + 32 copies, six a rank
    assert build_case(replace(row, tp=1, attn_dp=32, moe_tp=1, moe_ep=32)).plan.agg.moe_expert_slots is None


def test_a_row_that_could_not_be_read_is_skipped_with_that_reason(silicon):
    row = silicon["2026_03_25_gpt_oss_120b_gb200_trtllm_fp4_disagg_8192x1024_c384_tp1_0_ep1_0_1263"]
    result = build_case(replace(row, problem="disaggregated worker counts not recorded; ambiguous"))
    assert isinstance(result, Skipped)
    assert result.reason == "disaggregated worker counts not recorded; ambiguous"


def test_each_rank_has_a_sequence_slot_for_its_share_of_the_users(silicon):
    row = silicon["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717"]
    assert build_case(row).plan.agg.max_num_seqs == 256  # the engine default when it suffices
    big = build_case(replace(row, concurrency=2048, tp=8, attn_dp=2, moe_tp=1, moe_ep=16, workers=2)).plan.agg
    assert big.max_num_seqs == 512  # 2048 users over 2 workers x 2 attention-DP ranks
    uncapped = silicon["dsr1_gb300_trtllm_fp8_disagg_1024x1024_c4_cfg392"]
    # Its recipe caps a decode rank at 1 (ctx1_gen4_tep8_batch1); without a cap, the users' share.
    assert uncapped.decode.max_batch == 1
    uncapped = replace(uncapped, decode=replace(uncapped.decode, max_batch=None))
    disagg = build_case(replace(uncapped, concurrency=4096))
    assert (disagg.plan.prefill.max_num_seqs, disagg.plan.decode.max_num_seqs) == (1024, 1024)


def test_the_dep4_fp8_deepseek_deployments_that_ran_are_replayed_not_called_infeasible(silicon):
    # As InferenceX measured it (config 227, three development rows): DeepSeek FP8 under SGLang on
    # gb200, prefill and decode workers of 4 GPUs, attention DP 4, experts split 4 ways: 170 GiB
    # of weights per GPU, more than SGLang's default fraction holds.
    dep4 = {"tp": 1, "attn_dp": 4, "moe_tp": 4, "moe_ep": 1}
    row = replace(
        silicon["dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486"],
        precision="fp8",
        gemm_quant="fp8",
        moe_quant="fp8_block",
        backend_version="0.5.5.post2",
        concurrency=128,
        prefill=RecordedWorkers(**dep4, workers=1),
        decode=RecordedWorkers(**dep4, workers=4),
    )
    case = build_case(row)
    assert isinstance(case, ReplayCase) and case.model == "deepseek-ai/DeepSeek-V3"
    for spec in (case.plan.prefill, case.plan.decode):
        engine = resolve_engine(case.plan, spec, perf="analytic", perf_table=None, where="test")
        assert engine.num_gpu_blocks * spec.block_size >= row.isl + row.osl
