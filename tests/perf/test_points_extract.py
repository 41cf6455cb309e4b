"""The kernel-point and GEMM-table extraction, on a tiny database in AIConfigurator's layout and
columns (CSV tables instead of parquet, so neither AIConfigurator nor pandas is needed)."""

import csv
import json
import math
from pathlib import Path

import pytest

from aisimulate.perf.kernel_tables import table_from
from aisimulate.perf.points import calibrated_fit, load_database_points, predict
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DB = Path(__file__).resolve().parent / "data" / "aic_db"


@pytest.fixture(scope="module")
def script():
    return load_script("benchmarks/extract_kernel_points.py")


@pytest.fixture(scope="module")
def extracted(script):
    return script.extract(DB, ["h100_sxm", "b200_sxm"])  # b200_sxm has no tables here


def test_gemm_points_are_the_shapes_off_the_tables_nodes(extracted):
    files = extracted[0]
    gemm = files["gemm_points"]
    # Every fp8 shape is a table node; of bf16's, only m = 3 is off the grid.
    assert [(r["dtype"], r["m"], r["latency_ms"]) for r in gemm] == [("bf16", 3, 0.0211)]
    assert all(r["system"] == "h100_sxm" and r["backend"] == "vllm" for r in gemm)


def test_gemm_tables_keep_the_fastest_kernel_per_node_of_the_most_measured_version(script, extracted):
    tables = extracted[1]["gemm"]
    assert set(tables["h100_sxm/vllm"]) == {"bf16", "fp8"}  # int8_wo has no catalog format
    grid = {"m": script.TABLE_M, "nk": script.TABLE_NK}
    i_n = script.TABLE_NK.index(4096)
    fp8 = table_from(grid, tables["h100_sxm/vllm"]["fp8"]).latency_ms
    assert fp8[0, i_n, i_n] == 0.0142  # Cutlass beats the other kernel at m = 1 ...
    assert fp8[script.TABLE_M.index(4096), i_n, i_n] == 0.1  # ... and loses at 4,096
    bf16 = table_from(grid, tables["h100_sxm/vllm"]["bf16"]).latency_ms
    assert bf16[0, i_n, i_n] == 0.0203  # 0.24.0 (not 0.19.0's 0.021), the faster repeat
    assert bf16[0, i_n, script.TABLE_NK.index(1024)] == 0.0101
    assert math.isnan(bf16[1, i_n, i_n])  # m = 2 was not measured
    assert not tables["h100_sxm/trtllm"] and not tables["h100_sxm/sglang"]


def test_written_tables_carry_attribution_and_grid(script, extracted, tmp_path):
    path = tmp_path / "kernel_tables.json"
    script.write_kernel_tables(extracted[1], path)
    data = json.loads(path.read_text())
    assert "AIConfigurator" in data["attribution"]
    assert data["m"] == list(script.TABLE_M) and data["nk"] == list(script.TABLE_NK)
    table = table_from(data, data["latency_ms"]["h100_sxm/vllm"]["bf16"])
    assert table.latency_ms.shape == (16, 9, 9)
    # The custom all-reduce by GPU count, by message size.
    assert data["allreduce"]["h100_sxm/vllm"] == {
        "2": {"message_bytes": [131072], "latency_ms": [0.0061]},
        "8": {"message_bytes": [131072], "latency_ms": [0.0102]},
    }


def test_attention_keeps_full_bf16_attention_with_either_kv_format(extracted):
    files = extracted[0]
    context = files["context_attention_points"]
    assert sorted((r["kv_dtype"], r["latency_ms"]) for r in context) == [("bf16", 0.4012), ("fp8", 0.4101)]
    (decode,) = files["generation_attention_points"]
    assert decode["kv_len"] == 4096 and decode["batch"] == 64  # isl + generated steps


def test_moe_keeps_power_law_gated_kernels_and_marks_catalog_shapes_as_curves(extracted):
    moe = extracted[0]["moe_points"]
    assert {r["_kernel"] for r in moe} == {"moe_torch_flow", "moe_torch_flow_cutlass"}  # no nongated
    # TRT-LLM's W4A8 MXFP4 kernel is kept as the format it runs gpt-oss's experts in on Blackwell.
    assert {r["moe_dtype"] for r in moe} == {"mxfp4", "mxfp4_mxfp8", "fp8"}
    (w4a8,) = [r for r in moe if r["moe_dtype"] == "mxfp4_mxfp8"]
    assert (w4a8["num_tokens"], w4a8["latency_ms"]) == (64, 0.0312)
    mxfp4 = [r for r in moe if r["moe_dtype"] == "mxfp4"]
    assert len(mxfp4) == 9  # the skewed routing only
    assert sorted(r["num_tokens"] for r in mxfp4 if r["curve"]) == [1, 4, 16, 64, 256, 1024, 4096, 16384]


def test_written_points_load_as_held_out_points(script, extracted, tmp_path):
    script.write(extracted[0], tmp_path)
    points = load_database_points(tmp_path, ("h100_sxm",))
    assert {p.family for p in points} == {"gemm", "context_attention", "generation_attention", "moe"} | {
        "generation_mla",
        "allreduce",
        "alltoall",
    }
    (mla,) = [p for p in points if p.family == "generation_mla"]  # its bf16-KV row
    assert mla.backend == "trtllm" and predict(mla, calibrated_fit(mla)) > 0
    # fp8-KV attention runs kernels of its own: not judged against the bf16 fits.
    assert [p.measured_ms for p in points if p.family == "context_attention"] == [0.4012]
    # NCCL's all-to-all is every backend's.
    assert {p.backend for p in points if p.family == "alltoall"} == {"vllm", "trtllm", "sglang"}
    with (tmp_path / "kernel_sources.csv").open() as fh:
        sources = {(r["file"], r["backend"], r["dtype"], r["kernel_source"]) for r in csv.DictReader(fh)}
    assert ("nccl_points", "nccl", "alltoall", "NCCL") in sources


def test_moe_curves_keep_catalog_shapes_at_powers_of_two_skewed_and_gated(script):
    rows = script.moe_curve_points(DB, "h100_sxm", "trtllm", script.catalog_moe_shapes())
    # gpt-oss-120b's experts (tp 8): every power of two measured, the balanced runs left out.
    assert [(r["num_tokens"], r["latency_ms"]) for r in rows if r["moe_dtype"] == "mxfp4"] == [
        (1, 0.02004),
        (2, 0.0201),
        (4, 0.02016),
        (16, 0.02063),
        (64, 0.0225),
        (256, 0.03),
        (1024, 0.06),
        (4096, 0.18),
        (16384, 0.66),
    ]
    # fp8 (4096, 1536, top-8 of 128) is no catalog checkpoint's format here; non-gated kernels
    # never count; TRT-LLM's W4A8 kernel of gpt-oss's experts is a format of its own.
    assert {r["moe_dtype"] for r in rows} == {"mxfp4", "mxfp4_mxfp8"}
    assert [(r["num_tokens"], r["latency_ms"]) for r in rows if r["moe_dtype"] == "mxfp4_mxfp8"] == [
        (64, 0.0312)
    ]
    assert script.moe_curve_points(DB, "h100_sxm", "sglang", script.catalog_moe_shapes()) == []


def test_rewritten_curve_points_keep_the_deepep_rows_of_the_file(script, tmp_path):
    path = tmp_path / "moe_curve_points.csv"
    fields = ["system", "backend", "kernel_source", "moe_dtype", "num_tokens", "distribution", "latency_ms"]
    path.write_text(
        ",".join(fields)
        + "\ngb200,sglang,deepepmoe_low_latency,fp8_block,8,power_law_1.2,0.05"
        + "\ngb200,trtllm,old_kernel,nvfp4,8,power_law_1.2,0.09\n"
    )
    new = [dict(zip(fields, ["gb200", "trtllm", "k", "nvfp4", 8, "power_law_1.01", 0.07], strict=True))]
    script.write_curves(path, new)
    text = path.read_bytes()
    assert b"\r\n" not in text
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    # The extracted curves replace the file's own; extract_moe_points.py's DeepEP rows stay.
    assert [(r["kernel_source"], r["distribution"]) for r in rows] == [
        ("k", "power_law_1.01"),
        ("deepepmoe_low_latency", "power_law_1.2"),
    ]


def test_deepseek_expert_curves_are_taken_at_deepseeks_routing_skew(script, tmp_path):
    DEEPSEEK_MOE_ROUTING = "power_law_1.01"  # AIConfigurator's DeepSeek model

    columns = (
        "framework,version,device,op_name,kernel_source,moe_dtype,num_tokens,hidden_size,inter_size,"
        "topk,num_experts,moe_tp_size,moe_ep_size,distribution,latency"
    )
    lines = [columns]
    for tokens in (1, 2):
        for alpha, ms in (("power_law_1.2", 0.09), (DEEPSEEK_MOE_ROUTING, 0.07), ("balanced", 0.05)):
            lines.append(
                f"TRTLLM,1.3.0rc20,gb200,moe,moe_torch_flow,nvfp4,{tokens},7168,2048,8,256,1,32,{alpha},{ms}"
            )
    table = tmp_path / "gb200" / "moe" / "trtllm" / "1.3.0rc20"
    table.mkdir(parents=True)
    (table / "moe_perf.csv").write_text("\n".join(lines) + "\n")
    rows = script.moe_curve_points(tmp_path, "gb200", "trtllm", script.catalog_moe_shapes())
    assert [(r["num_tokens"], r["distribution"], r["latency_ms"]) for r in rows] == [
        (1, DEEPSEEK_MOE_ROUTING, 0.07),
        (2, DEEPSEEK_MOE_ROUTING, 0.07),
    ]
