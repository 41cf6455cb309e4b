import re
from datetime import date
from pathlib import Path

import pytest

from aisimulate.errors import ConfigError
from aisimulate.fidelity import read_measured

SMALL = Path(__file__).parent / "data" / "measured_small.csv"
HEADER = "system,backend,model,isl,osl,concurrency,tp,moe_tp,ttft_ms,tpot_ms\n"


def test_reads_rows_with_their_line_numbers_and_the_zero_means_one_quirk():
    rows = read_measured(SMALL)
    assert [r.id for r in rows][:2] == ["llama8b_instruct_c4", "llama8b_nvidia_fp8_c4"]
    assert [r.line for r in rows] == [2, 3, 4, 5, 6]
    nvidia = rows[1]
    assert (nvidia.moe_tp, nvidia.moe_ep, nvidia.precision) == (1, 1, "")
    gptoss = rows[3]
    assert (gptoss.precision, gptoss.gemm_quant, gptoss.moe_tp, gptoss.moe_ep) == ("fp4", "nvfp4", 2, 1)
    assert (gptoss.measured_ttft_ms, gptoss.measured_tpot_ms) == (40.0, 5.0)
    assert [r.measured_on for r in rows] == [None, date(2025, 10, 29), None, date(2026, 3, 27), None]


def test_plain_latency_column_names_and_missing_ids(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text(HEADER + "h100_sxm,vllm,meta-llama/Llama-3.1-8B,128,16,2,1,,30,4\n")
    (row,) = read_measured(path)
    assert (row.id, row.pp, row.attn_dp, row.moe_tp) == ("line2", 1, 1, 1)
    assert (row.measured_ttft_ms, row.measured_tpot_ms) == (30.0, 4.0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("h100_sxm,vllm,m,128,16,two,1,1,30,4\n", ":2: concurrency]"),
        ("h100_sxm,vllm,m,128,16,2,1,1,30,-4\n", ":2: tpot_ms]"),
        ("h100_sxm,vllm,,128,16,2,1,1,30,4\n", ":2: model]"),
        ("h100_sxm,vllm,m,128,16,2,0,1,30,4\n", ":2: tp]"),
        ("h100_sxm,vllm,m,128,16,2,1,1,30,4,last tuesday\n", ":2: measured]"),
    ],
)
def test_a_bad_cell_names_file_line_and_field(tmp_path, body, message):
    path = tmp_path / "bad.csv"
    path.write_text(HEADER.replace("\n", ",measured\n") + body)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        read_measured(path)
    assert str(path) in str(err.value)


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("system,backend,model,isl,osl,concurrency,tp,ttft_ms\nh100_sxm,vllm,m,1,1,1,1,3\n")
    with pytest.raises(ConfigError, match="missing column measured_tpot_ms or tpot_ms"):
        read_measured(path)
    path.write_text("system,model\n")
    with pytest.raises(ConfigError, match=r"missing column\(s\) backend, isl, osl, concurrency, tp"):
        read_measured(path)


SILICON = Path(__file__).parent / "data" / "silicon_small.csv"


@pytest.fixture(scope="module")
def silicon():
    return {r.id: r for r in read_measured(SILICON)}


def test_aiconfigurator_rows_read_with_the_clients_concurrency(silicon):
    row = silicon["qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1"]
    assert (row.mode, row.system, row.model, row.concurrency, row.tp, row.workers) == (
        "agg",
        "h100_sxm",
        "Qwen/Qwen3-32B",
        8,
        1,
        1,
    )
    assert (row.precision, row.gemm_quant, row.backend_version) == ("fp8", "fp8", "1.0.0rc3")
    assert row.source.startswith("source_file=/Users/")
    assert row.measured_ttft_ms == pytest.approx(272.0, abs=0.1)


def test_a_concurrency_over_several_batches_ran_on_that_many_replicas(silicon):
    row = silicon["qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c8_tp2_epnone_4"]
    # batch 4 per worker, 8 users: two aggregated workers; the export's 0 means "not split".
    assert (row.concurrency, row.workers, row.attn_dp, row.moe_tp, row.moe_ep) == (8, 2, 1, 1, 1)
    assert row.measured_on == date(2026, 3, 23)


def test_disaggregated_rows_carry_both_roles_and_their_worker_counts(silicon):
    row = silicon["dsr1_gb300_trtllm_fp8_disagg_1024x1024_c4_cfg392"]
    assert row.mode == "disagg" and row.problem == ""
    p, d = row.prefill, row.decode
    assert (p.tp, p.attn_dp, p.moe_ep, p.workers) == (1, 4, 4, 1)
    assert (d.tp, d.attn_dp, d.moe_ep, d.workers) == (8, 1, 8, 4)
    assert row.concurrency == 4 and row.backend_version == "0.8.1.post2"


def test_unrecorded_worker_counts_come_from_the_inferencex_entry_the_row_ran(silicon):
    row = silicon["2026_03_25_gpt_oss_120b_gb200_trtllm_fp4_disagg_8192x1024_c384_tp1_0_ep1_0_1263"]
    # InferenceX's gptoss-fp4-gb200-dynamo-trt runs 256 and 384 users at 8k/1k on 2 TP1 prefill
    # workers and 1 TP2 decode worker.
    assert row.problem == ""
    assert (row.prefill.workers, row.prefill.tp, row.decode.workers, row.decode.tp) == (2, 1, 1, 2)
    assert (row.nextn, row.workers_from) == (0, "InferenceX gptoss-fp4-gb200-dynamo-trt@0004cf5f")
    assert len(silicon) == 7


def test_a_row_missing_what_a_replay_needs_keeps_its_place_with_the_reason(tmp_path):
    lines = SILICON.read_text().splitlines()
    # The same row at a concurrency InferenceX's config does not run on that deployment.
    unmatched = next(line for line in lines if "_c384_" in line).replace(
        "silicon_concurrency=384", "silicon_concurrency=385"
    )
    path = tmp_path / "unmatched.csv"
    path.write_text(f"{lines[0]}\n{unmatched}\n")
    (row,) = read_measured(path)
    assert (
        "disaggregated worker counts not recorded; no InferenceX entry at the row's concurrency"
        in row.problem
    )
    assert row.mode == "disagg"  # counted with its mode's rows
    assert f"{path}:2: num_workers" in row.problem


def test_a_silicon_file_without_a_needed_column_is_one_error(tmp_path):
    path = tmp_path / "cut.csv"
    path.write_text("id,silicon_data_source,backend,model_path,system,mode,isl,osl,silicon_ttft_ms\n")
    with pytest.raises(ConfigError, match=re.escape(f"missing column(s) silicon_tpot_ms [{path}:1]")):
        read_measured(path)


def test_the_installed_silicon_file_is_found_without_importing_aiconfigurator(tmp_path, monkeypatch):
    import importlib.machinery
    import importlib.util

    from aisimulate.fidelity.measured import aic_silicon_path

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="AIConfigurator is not installed"):
        aic_silicon_path()
    (tmp_path / "systems").mkdir()
    (tmp_path / "systems" / "silicon_sample.csv").write_text("id\n")
    spec = importlib.machinery.ModuleSpec("aiconfigurator_core", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    assert aic_silicon_path() == tmp_path / "systems" / "silicon_sample.csv"


# Rows of AIConfigurator 0.12's silicon_sample.csv (InferenceX's 2026-04-06 export), as written.
MINIMAX_TP4_EP4 = (
    "2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_1024x1024_c8_tp4_ep4_1344,source_file=2026-04-06.csv; "
    "model=MiniMax-M2.5; silicon_concurrency=8; measured=2026-03-28T00:00:00.000Z; wip=False; "
    "image=vllm/vllm-openai:v0.18.0,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,1024,1024,fp8,fp8,"
    "2,4,1,4,1,16,,,,,,,,,,,,,,,94.16010008426383,12.545327827518559"
)
SGLANG_NO_IMAGE = (
    "2026_04_06_deepseek_r1_gb200_sglang_fp8_disagg_1024x1024_c1024_tp72_ep1_1092,"
    "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=1024; "
    "measured=2025-12-05T00:00:00.000Z; wip=False,sglang,,deepseek-ai/DeepSeek-R1,gb200,fp8,disagg,"
    "1024,1024,fp8,fp8_block,,,,,,,,,72,1,1,72,1,,,72,1,1,72,1,13548.655281829315,19.93211831152052"
)

# A multi-node disaggregated run of November 2025 the 2026-04-06 export labelled agg, its 64 GPUs
# (8 DEP4 prefill + 1 DEP32 decode workers) written as tp and moe_tp.
TRT_AGG_LABELLED = (
    "2026_04_06_deepseek_r1_gb200_trtllm_fp4_agg_8192x1024_c538_tp64_ep1_113,source_file=2026-04-06.csv; "
    "model=DeepSeek-R1; silicon_concurrency=538; measured=2025-11-17T00:00:00.000Z; wip=False,trtllm,,"
    "deepseek-ai/DeepSeek-R1,gb200,fp4,agg,8192,1024,nvfp4,nvfp4,538,64,1,1,64,1,,,,,,,,,,,,,,,"
    "1388.6989351230752,10.07123420407203"
)


# InferenceX's results database (AIConfigurator 0.12's silicon_sample.csv, as written): SGLang runs
# of dsr1_fp4_b300.sh (TP4 EP4 on one node) and qwen3.5_fp4_b300.sh (TP2 EP2).
SGLANG_DB_TP4_EP4 = (
    "dsr1_b300_sglang_fp4_agg_1024x1024_c4_cfg717,db-dump/2026-04-27; config_id=717; "
    "silicon_concurrency=4; measured=2026-04-17T00:00:00.000Z; workflow_run_id=748; "
    "lmsysorg/sglang:v0.5.10.post1-cu130,sglang,"
    "0.5.10.post1,deepseek-ai/DeepSeek-V3,b300_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,4,16,1,1,4,4,"
    ",,,,,,,,,,,,,,,182.9310850262118,8.450839589206453"
)
SGLANG_DB_TP2_EP2 = (
    "qwen3_5_b300_sglang_fp4_agg_1024x1024_c4_cfg736,db-dump/2026-04-27; config_id=736; "
    "silicon_concurrency=4; measured=2026-04-18T00:00:00.000Z; workflow_run_id=765; "
    "lmsysorg/sglang:v0.5.10.post1-cu130,sglang,"
    "0.5.10.post1,Qwen/Qwen3.5-397B-A17B,b300_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,4,4,1,1,2,2,"
    ",,,,,,,,,,,,,,,162.1589773996675,7.291581421572572"
)


def _silicon_file(tmp_path, *lines):
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([SILICON.read_text().splitlines()[0], *lines]) + "\n")
    return read_measured(path)


def test_a_vllm_tensor_parallel_expert_parallel_row_runs_on_its_tp_gpus(tmp_path):
    # InferenceX's minimaxm2.5_fp8_h100.sh: --tensor-parallel-size 4 --enable-expert-parallel on
    # 4 GPUs; the export writes EP_SIZE as attention DP and 4 x 4 as the expert split.
    (row,) = _silicon_file(tmp_path, MINIMAX_TP4_EP4)
    assert row.problem == ""
    assert (row.tp, row.attn_dp, row.moe_tp, row.moe_ep, row.workers, row.concurrency) == (4, 1, 1, 4, 1, 8)
    # A TRT-LLM row written the same way is read as written (its attention DP is real).
    (trt,) = _silicon_file(tmp_path, MINIMAX_TP4_EP4.replace(",vllm,0.18.0,", ",trtllm,1.2.0,"))
    assert (trt.tp, trt.attn_dp, trt.moe_ep, trt.workers) == (4, 4, 16, 1)


def test_a_row_without_an_image_written_with_the_deployments_gpus_gets_the_agreeing_versions_workers(
    tmp_path,
):
    # 3 DEP8 prefill + 1 DEP48 decode workers (72 GPUs) at 1,024 users: all three bundled versions
    # of dsr1-fp8-gb200-dynamo-sglang run that deployment there.
    (row,) = _silicon_file(tmp_path, SGLANG_NO_IMAGE)
    assert row.problem == ""
    p, d = row.prefill, row.decode
    assert (p.workers, p.tp, p.attn_dp, p.moe_ep) == (3, 1, 8, 8)
    assert (d.workers, d.tp, d.attn_dp, d.moe_ep) == (1, 1, 48, 48)
    assert row.workers_from.count("InferenceX dsr1-fp8-gb200-dynamo-sglang@") == 3


def test_a_disaggregated_run_exported_as_aggregated_is_read_as_the_inferencex_entry_it_ran(tmp_path):
    (row,) = _silicon_file(tmp_path, TRT_AGG_LABELLED)
    assert (row.problem, row.mode, row.concurrency, row.nextn) == ("", "disagg", 538, 3)
    p, d = row.prefill, row.decode
    assert (p.workers, p.tp, p.attn_dp, p.moe_ep) == (8, 1, 4, 4)
    assert (d.workers, d.tp, d.attn_dp, d.moe_ep) == (1, 1, 32, 32)
    assert row.workers_from.startswith("InferenceX dsr1-fp4-gb200-dynamo-trt@")


def test_an_aggregated_label_stays_where_no_disaggregated_deployment_has_its_gpus(tmp_path):
    # No InferenceX disaggregated deployment of DeepSeek-R1 FP4 at 8k/1k has 16 GPUs, so a tp16
    # row is the aggregated worker it says; nor is a row of another source or one with attention DP.
    tp16 = TRT_AGG_LABELLED.replace(",538,64,1,1,64,1,", ",538,16,1,1,16,1,")
    other = TRT_AGG_LABELLED.replace("source_file=2026-04-06.csv", "source_file=/runs/dsr1.csv")
    dp = TRT_AGG_LABELLED.replace(",538,64,1,1,64,1,", ",538,64,1,2,64,1,")
    rows = _silicon_file(tmp_path, tp16, other, dp)
    assert [(r.mode, r.tp, r.prefill) for r in rows] == [
        ("agg", 16, None),
        ("agg", 64, None),
        ("agg", 64, None),
    ]


def test_an_exported_as_aggregated_run_no_single_entry_explains_is_skipped_with_why(tmp_path):
    # 3 TEP8 decode workers at 12 users, with MTP and without: two entries of December 2025.
    ambiguous = (
        TRT_AGG_LABELLED.replace("c538_tp64", "c12_tp28")
        .replace("silicon_concurrency=538", "silicon_concurrency=12")
        .replace(",538,64,1,1,64,1,", ",12,28,1,1,28,1,")
    )
    (row,) = _silicon_file(tmp_path, ambiguous)
    assert row.mode == "disagg"
    assert row.problem.startswith("labelled agg, 28 GPUs as tp: disaggregated worker counts not recorded;")
    assert "ambiguous: 2 InferenceX entries match" in row.problem


# Two rows of one benchmark task (one Dynamo deployment's concurrency sweep) of AIConfigurator
# 0.12's silicon_sample.csv, as written: 41.9 ms at 2 users, 27.6 ms at 8.
_SWEEP_SOURCE = (
    "source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/gb200/trtllm/1.3.0rc1/Qwen_Qwen3-32B.csv; "
    "gtl_task_id=dynamo_trtllm_agg-20260323-001201-060256; silicon_concurrency={c}; measured=2026-03-23; "
    "image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.9.0; dynamo_version=0.9.0"
)
SWEEP_C2 = (
    "qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c2_tp2_epnone_3,"
    + _SWEEP_SOURCE.format(c=2)
    + ",trtllm,1.3.0rc1,Qwen/Qwen3-32B,gb200,,agg,2000,500,,,1,2,1,0,0,0,,,,,,,,,,,,,,,"
    "225.734943525,41.9178922495992"
)
SWEEP_C8 = (
    "qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c8_tp2_epnone_4,"
    + _SWEEP_SOURCE.format(c=8)
    + ",trtllm,1.3.0rc1,Qwen/Qwen3-32B,gb200,,agg,2000,500,,,4,2,1,0,0,0,,,,,,,,,,,,,,,"
    "533.97033451875,27.639192036335167"
)


def test_a_sweep_whose_tpot_falls_as_its_users_grow_is_skipped_with_the_fall(tmp_path):
    rows = _silicon_file(tmp_path, SWEEP_C2, SWEEP_C8)
    for row in rows:
        assert row.problem.startswith(
            "its deployment's sweep (dynamo_trtllm_agg-20260323-001201-060256) contradicts itself: "
            "mean TPOT 41.9 ms at 2 users, 27.6 ms at 8 (34% less with more users)"
        )


def test_rows_of_different_tasks_or_a_rising_tpot_are_no_contradiction(tmp_path):
    other_task = SWEEP_C8.replace("-060256;", "-999999;")
    assert [r.problem for r in _silicon_file(tmp_path, SWEEP_C2, other_task)] == ["", ""]
    # The same two users' counts with the TPOTs the other way round, or a fall within a fifth.
    rising = SWEEP_C2.replace(",41.9178922495992", ",27.6"), SWEEP_C8.replace(",27.639192036335167", ",41.9")
    assert [r.problem for r in _silicon_file(tmp_path, *rising)] == ["", ""]
    small_fall = SWEEP_C2.replace(",41.9178922495992", ",34.0")  # 27.6 is 19% less
    assert [r.problem for r in _silicon_file(tmp_path, small_fall, SWEEP_C8)] == ["", ""]


def test_an_inferencex_database_sglang_row_runs_on_its_tensor_parallel_gpus(tmp_path):
    # The database writes `--tensor-parallel-size TP --ep-size EP` as moe_tp TP, moe_ep EP and
    # tp TP x EP: 16 and 4 GPUs as written, 4 and 2 as launched (one 8-GPU node).
    deepseek, qwen = _silicon_file(tmp_path, SGLANG_DB_TP4_EP4, SGLANG_DB_TP2_EP2)
    assert deepseek.problem == qwen.problem == ""

    def split(r):
        return (r.tp, r.attn_dp, r.moe_tp, r.moe_ep, r.workers)

    assert (split(deepseek), split(qwen)) == ((4, 1, 1, 4, 1), (2, 1, 1, 2, 1))
    # Another backend's row, a row of another source, and a split whose experts outnumber the
    # TP ranks (SGLang cannot launch EP 4 on 1 rank) are read as written.
    (trt,) = _silicon_file(tmp_path, SGLANG_DB_TP4_EP4.replace(",sglang,0.5.10.post1,", ",trtllm,1.2.0,"))
    assert (trt.tp, trt.moe_tp, trt.moe_ep) == (16, 4, 4)
    dated_export = SGLANG_DB_TP4_EP4.replace(",db-dump/2026-04-27;", ",source_file=2026-04-06.csv;")
    (dated,) = _silicon_file(tmp_path, dated_export)
    assert (dated.tp, dated.moe_tp, dated.moe_ep) == (16, 4, 4)
    (wide,) = _silicon_file(tmp_path, SGLANG_DB_TP2_EP2.replace(",4,4,1,1,2,2,", ",4,4,1,1,1,4,"))
    assert (wide.tp, wide.moe_tp, wide.moe_ep) == (4, 1, 4)


def test_a_row_without_an_image_runs_the_version_its_days_sweep_and_the_configs_images_allow(tmp_path):
    def row(isl: int, users: int, gpus: int, day: str, source: str = "source_file=2026-04-06.csv") -> str:
        shape = f"{gpus},1,1,{gpus},1" if gpus else "1,1,1,1,1"
        return (
            f"r_{isl}_{users}_{gpus}_{day},{source}; model=DeepSeek-R1; silicon_concurrency={users}; "
            f"measured={day}T00:00:00.000Z; wip=False,sglang,,deepseek-ai/DeepSeek-R1,gb200,fp8,disagg,"
            f"{isl},1024,fp8,fp8_block,,,,,,,,,{shape},,,{shape},100.0,20.0"
        )

    # 8k/1k at 512 users on 72 GPUs: three versions list it, in three deployments; its day also
    # ran 128 users there, which only InferenceMAX's November version lists.
    read = {r.id: r for r in _silicon_file(tmp_path, row(8192, 512, 72, "2025-12-05"))}
    assert "3 versions run different deployments" in read["r_8192_512_72_2025-12-05"].problem
    lines = [row(8192, 512, 72, "2025-12-05"), row(8192, 128, 72, "2025-12-05")]
    read = {r.id: r for r in _silicon_file(tmp_path, *lines)}
    ran = read["r_8192_512_72_2025-12-05"]
    assert ran.problem == "" and ran.workers_from == "InferenceX dsr1-fp8-gb200-dynamo-sglang@00e77d0b"
    assert (ran.prefill.workers, ran.prefill.attn_dp, ran.decode.attn_dp) == (6, 8, 24)
    # 1k/1k at 8 users on 20 GPUs: the November (DEP4) and December (TP4 script) versions both
    # list it; rows recording the November image on 2025-12-15 and the December one from
    # 2025-12-19 leave the November version for a row of 2025-12-05.
    old = "source_file=2026-04-06.csv; image=nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.5.1-rc0.pre1"
    new = "source_file=2026-04-06.csv; image=lmsysorg/sglang:v0.5.5.post2"
    alone = {r.id: r for r in _silicon_file(tmp_path, row(1024, 8, 20, "2025-12-05"))}
    assert "2 versions run different deployments" in alone["r_1024_8_20_2025-12-05"].problem
    lines = [
        row(1024, 8, 20, "2025-12-05"),
        row(8192, 384, 0, "2025-12-15", old),
        row(8192, 64, 0, "2025-12-19", new),
    ]
    dated = {r.id: r for r in _silicon_file(tmp_path, *lines)}["r_1024_8_20_2025-12-05"]
    assert (
        dated.problem == ""
        and dated.workers_from == "InferenceX dsr1-fp8-gb200-dynamo-sglang@00e77d0b 1p_4d.sh"
    )
    assert (dated.decode.workers, dated.decode.tp, dated.decode.attn_dp) == (4, 1, 4)
