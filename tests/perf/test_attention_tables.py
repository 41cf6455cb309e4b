"""Measured attention tables: interpolation over (width, length), the pass totals they are read
at, and their use by the analytic model behind the `kernel_tables` switch."""

import math

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.attention_tables import (
    AttentionTable,
    TableContextAttention,
    TableGenerationAttention,
    attention_table_for,
    equal_chunks,
    table_from,
)
from aisimulate.perf.kernels import ContextAttention, GenerationAttention
from aisimulate.perf.points import DATABASE_SYSTEMS
from aisimulate.perf.shape import ParallelShape

WIDTHS = [1.0, 2.0, 4.0, 8.0]
LENGTHS = [16.0, 64.0, 256.0]


def _law(width: float, length: float) -> float:
    # latency = 1e-3 * width^0.5 * length^1.5: log-linear in both logs, as the interpolation assumes.
    return 1e-3 * width**0.5 * length**1.5


def _table(power: float = 2.0) -> AttentionTable:
    return AttentionTable(
        tuple(math.log(w) for w in WIDTHS),
        tuple(math.log(s) for s in LENGTHS),
        tuple(tuple(math.log(_law(w, s)) for s in LENGTHS) for w in WIDTHS),
        power,
    )


def test_nodes_are_exact_and_between_them_log_bilinear():
    table = _table()
    assert table.time_ms(4, 64) == pytest.approx(_law(4, 64))
    assert table.time_ms(3, 100) == pytest.approx(_law(3, 100))


def test_beyond_the_table_width_scales_linearly_length_by_its_power_below_it_holds():
    table = _table(power=2.0)
    assert table.time_ms(32, 64) == pytest.approx(4 * _law(8, 64))
    assert table.time_ms(2, 1024) == pytest.approx(16 * _law(2, 256))
    assert _table(power=1.0).time_ms(2, 1024) == pytest.approx(4 * _law(2, 256))
    assert table.time_ms(0.5, 4) == pytest.approx(_law(1, 16))


def test_without_width_interpolates_across_the_gap():
    table = _table()
    held = table.without_width(4)
    assert len(held.log_width) == 3
    assert held.time_ms(4, 64) == pytest.approx(_law(4, 64))  # the law is log-linear
    assert table.without_width(3) is table


def test_table_from_decodes_and_fills_the_unmeasured_nodes():
    # Widths 2..16 stored; width 16 unmeasured at the longest length, width 2 at the shortest.
    code = [[0, round(100 * math.log2(2e3))], [round(100 * math.log2(1e3)), round(100 * math.log2(4e3))]]
    code += [[round(100 * math.log2(2e3)), round(100 * math.log2(8e3))], [round(100 * math.log2(4e3)), 0]]
    table = table_from([1, 2, 4, 8, 16], {"first_width": 2, "length": [10, 100], "log2_ns_x100": code}, 2.0)
    assert table is not None
    assert table.time_ms(4, 100) == pytest.approx(4e-3, rel=0.004)
    assert table.time_ms(16, 100) == pytest.approx(16e-3, rel=0.004)  # linear beyond the widest
    assert table.time_ms(2, 10) == pytest.approx(1e-3, rel=0.004)  # narrowest measured holds
    assert table.time_ms(1, 100) == pytest.approx(2e-3, rel=0.004)


def test_equal_chunks_recovers_equal_chunks_and_keeps_the_pairs():
    assert equal_chunks(3 * 100 * 101 / 2, 300) == pytest.approx((3, 100))
    chunks, length = equal_chunks(100 * 101 / 2 + 10 * 11 / 2, 110)
    assert chunks * length == pytest.approx(110)
    assert chunks * length * (length + 1) / 2 == pytest.approx(100 * 101 / 2 + 10 * 11 / 2)


def test_context_and_generation_read_the_table_at_the_pass_totals():
    table = _table()
    context = TableContextAttention(table, num_layers=10, heads=2).scalar()
    assert context(4 * 64 * 65 / 2, 4, 0, 4 * 64) == pytest.approx(10 * table.time_ms(8, 64))
    assert context(0, 0, 0, 0) == 0.0
    generation = TableGenerationAttention(table, num_layers=10, kv_heads=2)
    assert generation.scalar()(3, 3 * 100, 1) == pytest.approx(10 * table.time_ms(6, 100))
    assert generation.over_contexts(3, [300.0, 30.0], 1) == pytest.approx(
        [10 * table.time_ms(6, 100), 10 * table.time_ms(6, 10)]
    )


def test_sliding_layers_read_at_most_their_window():
    table = _table()
    context = TableContextAttention(table, num_layers=1, heads=1, num_sliding_layers=1, sliding_window=16)
    pairs = 256 * 257 / 2
    full, sliding = table.time_ms(1, 256), table.time_ms(256 / 16, 16)
    assert context.scalar()(pairs, 1, 0, 256) == pytest.approx(full + sliding)


def test_every_database_system_has_the_catalogs_head_sizes_and_trtllm_mla():
    for system in DATABASE_SYSTEMS:
        for backend in ("vllm", "trtllm", "sglang"):
            for phase in ("context", "generation"):
                for dim in (64, 128, 256):
                    assert attention_table_for(system, backend, backend, phase, f"{dim}/bf16") is not None
        for backend in ("trtllm", "sglang"):
            assert attention_table_for(system, backend, backend, "context_mla", "bf16") is not None
            for heads in (16, 32, 64, 128):
                assert attention_table_for(system, backend, backend, "generation_mla", f"{heads}/bf16")


def test_the_analytic_model_prices_attention_from_the_tables_when_asked():
    model, system = get_model("Qwen/Qwen3-32B"), get_system("h100_sxm")
    shape = ParallelShape(tp=4)
    off = AnalyticPerfModel(model, system, shape, backend="trtllm", kernel_tables=False)
    on = AnalyticPerfModel(model, system, shape, backend="trtllm", kernel_tables=True)
    assert isinstance(off._context, ContextAttention) and isinstance(off._generation, GenerationAttention)
    context = attention_table_for("h100_sxm", "trtllm", "trtllm", "context", "128/bf16")
    generation = attention_table_for("h100_sxm", "trtllm", "trtllm", "generation", "128/bf16")
    assert context is not None and generation is not None
    layers = model.num_full_attention_layers
    assert on._s_context(2 * 1024 * 1025 / 2, 2, 0, 2048) == pytest.approx(
        layers * context.time_ms(2 * 16, 1024)
    )
    assert on._s_generation(32, 32 * 2000, 1) == pytest.approx(layers * generation.time_ms(32 * 2, 2000))


def test_mla_of_the_measured_geometry_reads_the_mla_tables_sparse_attention_keeps_the_fits():
    system = get_system("b300_sxm")
    on = AnalyticPerfModel(
        get_model("deepseek-ai/DeepSeek-V3"),
        system,
        ParallelShape(tp=8),
        backend="trtllm",
        kernel_tables=True,
    )
    mla = attention_table_for("b300_sxm", "trtllm", "trtllm", "generation_mla", f"16/{on.kv_dtype}")
    assert mla is not None
    layers = on.model.num_full_attention_layers
    assert on._s_generation(8, 8 * 4000, 1) == pytest.approx(layers * mla.time_ms(8, 4000))
    sparse = AnalyticPerfModel(
        get_model("deepseek-ai/DeepSeek-V3.2"),
        system,
        ParallelShape(tp=8),
        backend="trtllm",
        kernel_tables=True,
    )
    assert not isinstance(sparse._generation, TableGenerationAttention)


def test_a_stretch_of_decode_passes_matches_pass_by_pass():
    table = _table(power=1.0)
    generation = TableGenerationAttention(
        table, num_layers=3, kv_heads=2, num_sliding_layers=1, sliding_window=40
    )
    contexts = [3.0, 30.0, 600.0, 2000.0]
    one = generation.scalar()
    assert generation.over_contexts(3, contexts, 1) == pytest.approx([one(3, c, 1) for c in contexts])
