"""Measured kernel tables: GEMM tables (interpolation between nodes, their use by the analytic
model) and the catalog MoE shapes' curves, behind the `kernel_tables` switch."""

import math

import numpy as np
import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.kernel_tables import (
    GemmTable,
    alltoall_tables_for,
    gemm_tables_for,
    table_from,
    token_nodes,
)
from aisimulate.perf.kernels import Collective, MeasuredCurve
from aisimulate.perf.memory import attention_params_per_rank
from aisimulate.perf.points import DATABASE_SYSTEMS
from aisimulate.perf.shape import ParallelShape

M = (1.0, 2.0, 4.0)
NK = (256.0, 1024.0, 4096.0)


def _table(missing: bool = False) -> GemmTable:
    # latency = 1e-6 * m^0.5 * n * k: log-linear in log n and log k, as the interpolation assumes.
    values = np.array([[[1e-6 * m**0.5 * n * k for k in NK] for n in NK] for m in M])
    if missing:
        values[:, 2, 2] = np.nan
    return GemmTable(M, NK, values)


def test_nodes_are_exact_and_between_them_log_bilinear():
    table = _table()
    assert table.curve_ms(1024, 4096) == pytest.approx([1e-6 * m**0.5 * 1024 * 4096 for m in M])
    # n halfway between 256 and 1024 in log: 512, and the product form is reproduced exactly.
    assert table.curve_ms(512, 2048) == pytest.approx([1e-6 * m**0.5 * 512 * 2048 for m in M])


def test_beyond_the_widest_node_latency_scales_with_the_dimension_below_the_narrowest_it_holds():
    table = _table()
    assert table.curve_ms(16384, 256) == pytest.approx(4 * table.curve_ms(4096, 256))
    assert table.curve_ms(64, 256) == pytest.approx(table.curve_ms(256, 256))


def test_a_shape_next_to_an_unmeasured_node_has_no_table_latency():
    table = _table(missing=True)
    assert table.curve_ms(2048, 2048) is None
    assert table.curve_ms(512, 512) is not None


def test_table_from_reads_nulls_as_unmeasured():
    flat = [None] + [1.0] * (len(M) * len(NK) ** 2 - 1)
    table = table_from({"m": M, "nk": NK}, flat)
    assert math.isnan(table.latency_ms[0, 0, 0]) and table.latency_ms[2, 2, 2] == 1.0


def test_every_database_system_has_bf16_and_fp8_tables_for_every_backend():
    for system in DATABASE_SYSTEMS:
        for backend in ("vllm", "trtllm", "sglang"):
            assert {"bf16", "fp8", "fp8_block"} <= set(gemm_tables_for(system, backend, backend))


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3"])
def test_attention_projections_add_up_to_the_layers_weights(name):
    model = get_model(name)
    perf = AnalyticPerfModel(model, get_system("h100_sxm"), ParallelShape(tp=8), kernel_tables=True)
    params = attention_params_per_rank(model, 8)
    shapes = perf._attention_gemm_shapes(params)
    assert len(shapes) == (5 if model.is_mla else 2)
    assert sum(n * k for n, k in shapes) == pytest.approx(params, rel=0.02)


def test_tables_are_off_by_default_and_the_fit_prices_as_before():
    model, system = get_model("meta-llama/Llama-3.1-8B"), get_system("h100_sxm")
    default = AnalyticPerfModel(model, system, ParallelShape(tp=1))
    off = AnalyticPerfModel(model, system, ParallelShape(tp=1), kernel_tables=False)
    args = (0, 0, 0.0, 0, 16, 16 * 2000, 1.0)
    assert default.time_ms(*args) == off.time_ms(*args)
    assert default.describe()["kernel_tables"] is False


def test_with_tables_a_dense_models_linear_layers_are_the_sum_of_its_shapes_tables():
    model, system = get_model("meta-llama/Llama-3.1-8B"), get_system("h100_sxm")
    perf = AnalyticPerfModel(model, system, ParallelShape(tp=2), backend="trtllm", kernel_tables=True)
    bf16 = gemm_tables_for("h100_sxm", "trtllm", "trtllm")["bf16"]
    h, tp = model.hidden_size, 2
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim / tp
    inter = model.intermediate_size / tp
    shapes = [(qkv, h), (h, model.num_heads * model.head_dim / tp), (2 * inter, h), (h, inter)]
    per_layer = sum(bf16.curve_ms(n, k) for n, k in shapes)
    i = bf16.m.index(64.0)
    assert perf._linear.scalar()(64.0) == pytest.approx(model.num_layers * per_layer[i])
    # Between nodes: linear in tokens.
    j = bf16.m.index(128.0)
    middle = model.num_layers * (per_layer[i] + per_layer[j]) / 2
    assert perf._linear.scalar()(96.0) == pytest.approx(middle)
    lm_head = bf16.curve_ms(model.vocab_size / tp, h)
    assert perf._lm_head.scalar()(1.0) == pytest.approx(lm_head[0])


def test_weight_only_formats_and_unmeasured_systems_keep_the_fit():
    model = get_model("meta-llama/Llama-3.1-8B")
    for system in ("h100_sxm", "a100_sxm"):
        on = AnalyticPerfModel(model, get_system(system), ParallelShape(tp=1), kernel_tables=True)
        if system == "a100_sxm":  # no table: the fitted roofline itself
            off = AnalyticPerfModel(model, get_system(system), ParallelShape(tp=1), kernel_tables=False)
            assert on.time_ms(0, 0, 0.0, 0, 8, 8000, 1.0) == off.time_ms(0, 0, 0.0, 0, 8, 8000, 1.0)
        else:
            assert on.time_ms(0, 0, 0.0, 0, 8, 8000, 1.0) > 0


def test_unmeasured_largest_token_counts_continue_the_last_segment():
    table = _table()
    table.latency_ms[2, 2, 2] = np.nan  # m = 4 only
    curve = table.curve_ms(4096, 4096)
    full = _table().curve_ms(4096, 4096)
    assert curve[:2] == pytest.approx(full[:2])
    assert curve[2] == pytest.approx(full[1] + 2 * (full[1] - full[0]))


def test_catalog_moe_curves_price_the_experts_only_with_kernel_tables_on():
    import csv
    from pathlib import Path

    from aisimulate.perf.model import BatchShape

    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration"
    with (data / "moe_curve_points.csv").open() as fh:
        (measured,) = [
            float(r["latency_ms"])
            for r in csv.DictReader(fh)
            if (r["system"], r["backend"], r["moe_dtype"], r["hidden"], r["num_experts"])
            == (
                "b300_sxm",
                "vllm",
                "fp8_block",
                "4096",
                "128",
            )
            and (r["moe_tp"], r["moe_ep"], r["num_tokens"]) == ("1", "8", "16")
        ]
    model = get_model("Qwen/Qwen3-235B-A22B-FP8")
    shape = ParallelShape(tp=8, moe_ep=8)
    decode = BatchShape(decode_requests=16, decode_context_tokens=16 * 1024)
    on = AnalyticPerfModel(model, get_system("b300_sxm"), shape, kernel_tables=True)
    off = AnalyticPerfModel(model, get_system("b300_sxm"), shape)
    # The table codes latencies in 0.35% steps.
    assert on.explain(decode).moe_ms == pytest.approx(model.num_moe_layers * measured, rel=0.004)
    assert off.explain(decode).moe_ms != pytest.approx(on.explain(decode).moe_ms, rel=1e-3)


def test_the_latency_cli_turns_kernel_tables_on_and_the_vectorised_prices_agree(capsys):
    import json

    from aisimulate.perf.cli import main
    from aisimulate.perf.model import BatchArrays

    argv = ["latency", "--model", "meta-llama/Llama-3.1-8B", "--system", "h100_sxm"]
    argv += ["--decode-batch", "8", "--decode-context", "2000", "--no-async-scheduling", "--json"]

    def total_ms(*extra):
        assert main([*argv, *extra]) == 0
        return json.loads(capsys.readouterr().out)["total_ms"]

    perf = AnalyticPerfModel(
        get_model("meta-llama/Llama-3.1-8B"), get_system("h100_sxm"), ParallelShape(tp=1), kernel_tables=True
    )
    tabled = perf.time_ms(0, 0, 0.0, 0, 8, 8 * 2000, 1.0)
    assert total_ms("--kernel-tables") == pytest.approx(tabled)
    assert total_ms() != pytest.approx(tabled, rel=1e-3)
    # The vectorised path prices passes with the same curves as the scalar one.
    d = np.array([1.0, 8.0, 100.0])
    batches = BatchArrays(decode_requests=d, decode_context_tokens=d * 2000)
    scalar = [perf.time_ms(0, 0, 0.0, 0, x, x * 2000, 1.0) for x in d]
    np.testing.assert_allclose(perf.pass_times_ms(batches), scalar, rtol=1e-12)


def test_an_all_reduce_table_interpolates_log_log_and_scales_beyond_its_largest_message():
    from aisimulate.perf.kernel_tables import CollectiveTable

    table = CollectiveTable((1e3, 1e5, 1e7), (0.01, 0.01, 1.0))
    assert table.time_ms(np.array([1e5]))[0] == pytest.approx(0.01)
    assert table.time_ms(np.array([1e6]))[0] == pytest.approx(0.1)  # halfway in log: geometric
    assert table.time_ms(np.array([10.0]))[0] == pytest.approx(0.01)  # below: the smallest's
    assert table.time_ms(np.array([4e7]))[0] == pytest.approx(4.0)  # beyond: in proportion


def test_with_kernel_tables_the_tensor_parallel_all_reduces_come_from_their_table():
    from aisimulate.perf.kernel_tables import allreduce_tables_for

    model, system = get_model("meta-llama/Llama-3.1-8B"), get_system("h100_sxm")
    perf = AnalyticPerfModel(model, system, ParallelShape(tp=4), backend="trtllm", kernel_tables=True)
    table = allreduce_tables_for("h100_sxm", "trtllm", "trtllm")[4]
    tokens = 64.0
    one = table.time_ms(np.array([tokens * model.hidden_size * 2.0]))[0]
    # Two all-reduces per layer (after attention and after the MLP), nothing else on one node.
    assert perf._comm.scalar()(tokens) == pytest.approx(2 * model.num_layers * one)
    # A single GPU has none.
    single = AnalyticPerfModel(model, system, ParallelShape(tp=1), kernel_tables=True)
    assert single._comm.scalar()(tokens) == 0.0


def test_with_tables_the_expert_all_to_all_is_nccls_measured_curve():
    model, system = get_model("deepseek-ai/DeepSeek-V3"), get_system("h100_sxm")
    shape = ParallelShape(tp=1, attention_dp=8, moe_ep=8)
    off = AnalyticPerfModel(model, system, shape, backend="vllm", kernel_tables=False)
    on = AnalyticPerfModel(model, system, shape, backend="vllm", kernel_tables=True)
    assert isinstance(off._group_comm, Collective) and isinstance(on._group_comm, MeasuredCurve)
    table = alltoall_tables_for("h100_sxm")[8]
    tokens = token_nodes()[6]
    send_bytes = tokens * model.hidden_size * 2.0 * model.experts_per_token / 8
    expected = 2 * model.num_moe_layers * table.time_ms(np.array([send_bytes]))[0]
    assert on._s_group_comm(tokens) == pytest.approx(expected)
    # A GPU count the database did not measure (NVL72's 8) keeps the fit.
    gb200 = AnalyticPerfModel(model, get_system("gb200"), shape, backend="vllm", kernel_tables=True)
    assert 8 not in alltoall_tables_for("gb200") and isinstance(gb200._group_comm, Collective)
