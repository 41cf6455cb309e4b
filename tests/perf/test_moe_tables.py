"""Measured MoE tables: their extraction from a tiny database in AIConfigurator's layout, the file's
coding, and their use by the analytic model and the accuracy benchmark behind ``kernel_tables``."""

import csv
import gzip
import json
from pathlib import Path

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_for, moe_curve_key
from aisimulate.perf.moe_tables import decode, moe_curves, moe_tables_for
from aisimulate.perf.points import Point
from aisimulate.perf.shape import ParallelShape
from tests.scripts import load_script

COLUMNS = (
    "kernel_source",
    "moe_dtype",
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "distribution",
    "latency",
)
QWEN3_235B = (4096, 1536, 8, 128)  # a catalog shape (routing skew 1.2)
DEEPSEEK = (7168, 2048, 8, 256)  # a catalog shape routed at 1.01
OTHER = (1024, 512, 4, 64)  # no catalog model has it


@pytest.fixture(scope="module")
def script():
    return load_script("benchmarks/extract_moe_tables.py")


def _write(db: Path, system: str, backend: str, version: str, rows: list[tuple]) -> None:
    folder = db / system / "moe" / backend / version
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "moe_perf.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def _row(kernel, dtype, tokens, shape, tp, ep, routing, latency):
    return (kernel, dtype, tokens, *shape, tp, ep, routing, latency)


@pytest.fixture
def db(tmp_path):
    rows = []
    for n, ms in ((1, 0.02), (4, 0.03), (16, 0.05)):
        rows.append(_row("cutlass", "fp8_block", n, QWEN3_235B, 1, 4, "power_law_1.2", ms))
        triton_ms = ms * (0.5 if n == 1 else 2)
        rows.append(_row("triton", "fp8_block", n, QWEN3_235B, 1, 4, "power_law_1.2", triton_ms))
        rows.append(_row("cutlass", "fp8_block", n, QWEN3_235B, 1, 4, "balanced", ms / 4))  # not its routing
        rows.append(_row("cutlass_nongated", "fp8_block", n, QWEN3_235B, 1, 4, "power_law_1.2", ms / 4))
        rows.append(_row("cutlass", "fp8_block", n, DEEPSEEK, 2, 2, "power_law_1.01", ms))
        # Not DeepSeek's routing:
        rows.append(_row("cutlass", "fp8_block", n, DEEPSEEK, 2, 2, "power_law_1.2", ms / 4))
        rows.append(_row("cutlass", "bfloat16", n, OTHER, 8, 16, "power_law_1.2", ms))  # 128 GPUs: too wide
        rows.append(_row("cutlass", "bfloat16", n, OTHER, 2, 4, "power_law_1.2", ms))
    rows.append(_row("cutlass", "bfloat16", 4, OTHER, 2, 4, "power_law_1.2", 0.05))  # a repeat: the median
    rows.append(_row("cutlass", "bfloat16", 64, OTHER, 1, 1, "power_law_1.2", 0.1))  # one token count only
    _write(tmp_path, "h100_sxm", "trtllm", "1.3.0rc20", rows)
    # An older version measured the Qwen shape too: the backend's reference version wins.
    older = [_row("cutlass", "fp8_block", 1, QWEN3_235B, 1, 4, "power_law_1.2", 9.0)]
    _write(tmp_path, "h100_sxm", "trtllm", "1.0.0", older)
    return tmp_path


def test_the_tables_keep_the_fastest_gated_kernel_at_the_shapes_routing_and_split(script, db):
    runs = script.runs(db, "h100_sxm", "trtllm")
    tables = script.coded_tables(runs, [1, 4, 16, 64])
    qwen = moe_curve_key("fp8_block", *QWEN3_235B, 1, 4)
    tokens, ms = decode([1, 4, 16, 64], tables[qwen])
    assert tokens == (1.0, 4.0, 16.0)
    # triton at 1 token (0.01), cutlass beyond; neither the balanced nor the non-gated kernel.
    assert ms == pytest.approx((0.01, 0.03, 0.05), rel=0.004)
    deepseek = decode([1, 4, 16, 64], tables[moe_curve_key("fp8_block", *DEEPSEEK, 2, 2)])[1]
    assert deepseek == pytest.approx((0.02, 0.03, 0.05), rel=0.004)  # at 1.01, not 1.2
    other = decode([1, 4, 16, 64], tables[moe_curve_key("bf16", *OTHER, 2, 4)])[1]
    assert other[1] == pytest.approx(0.04, rel=0.004)  # median of 0.03 and 0.05
    assert moe_curve_key("bf16", *OTHER, 8, 16) not in tables
    assert moe_curve_key("bf16", *OTHER, 1, 1) not in tables  # one token count is no curve


def test_the_written_file_carries_attribution_and_decodes(script, db, tmp_path, monkeypatch):
    monkeypatch.setattr(script, "SYSTEMS", ("h100_sxm",))
    payload = script.extract(db)
    assert "AIConfigurator" in payload["attribution"]
    assert payload["tokens"] == [1, 4, 16, 64]
    entry = payload["log2_ns_x100_deltas"]["h100_sxm/trtllm"]
    assert set(entry) == {
        moe_curve_key("fp8_block", *QWEN3_235B, 1, 4),
        moe_curve_key("fp8_block", *DEEPSEEK, 2, 2),
        moe_curve_key("bf16", *OTHER, 2, 4),
    }
    json.loads(gzip.decompress(gzip.compress(json.dumps(payload).encode())))  # JSON-clean


def test_decode_skips_unmeasured_nodes_and_accumulates_the_deltas(script):
    codes = [script.encode(ms) for ms in (0.01, 0.02, 0.08)]
    deltas = script.deltas([codes[0], None, codes[1], codes[2]])
    assert deltas[1] is None and deltas[2] == codes[1] - codes[0]
    tokens, ms = decode([1, 2, 4, 8], deltas)
    assert tokens == (1.0, 4.0, 8.0)
    assert ms == pytest.approx((0.01, 0.02, 0.08), rel=0.004)


def test_the_bundled_tables_hold_each_backends_own_kernels_and_mixed_splits():
    # SGLang's own measurements (not vLLM's) of Qwen3.5-397B's experts under TP2 x EP2 on B300.
    key = moe_curve_key("fp8_block", 4096, 1024, 10, 512, 2, 2)
    tokens, ms = moe_tables_for("b300_sxm", "sglang")[key]
    assert tokens[0] == 1.0 and tokens[-1] == 16384.0 and len(tokens) >= 20
    assert all(0.005 < v < 10 for v in ms)
    assert key not in moe_tables_for("b300_sxm", "vllm")  # vLLM measured pure splits only
    assert moe_tables_for("no_such_system", "sglang") == {}


def test_with_kernel_tables_the_experts_are_priced_from_their_own_table():
    model = get_model("Qwen/Qwen3.5-397B-A17B")
    system = get_system("b300_sxm")
    shape = ParallelShape(tp=4, moe_tp=2, moe_ep=2)
    on = AnalyticPerfModel(model, system, shape, backend="sglang", kernel_tables=True)
    off = AnalyticPerfModel(model, system, shape, backend="sglang", kernel_tables=False)
    key = moe_curve_key("bf16", 4096, 1024, 10, 512, 2, 2)
    tokens, ms = moe_tables_for("b300_sxm", "sglang")[key]
    i = tokens.index(256.0)
    assert on._moe.time_ms(256.0) == pytest.approx(model.num_moe_layers * ms[i])
    assert off._moe.time_ms(256.0) != pytest.approx(on._moe.time_ms(256.0), rel=0.01)


def test_the_curves_priced_by_default_win_over_the_tables():
    system = get_system("b300_sxm")
    cal = calibration_for(system, "sglang")
    curves = moe_curves(cal, "b300_sxm", "sglang", True)
    for key, curve in cal.moe_curves.items():
        assert curves[key] == curve
    assert moe_curves(cal, "b300_sxm", "sglang", False) is cal.moe_curves
    assert len(curves) > len(cal.moe_curves) + len(cal.catalog_moe_curves)


def _moe_point(system, backend, dtype, shape, tp, ep, tokens, ms, curve="0"):
    row = dict(zip(("hidden", "inter", "topk", "num_experts"), map(str, shape), strict=True))
    row |= {"moe_tp": str(tp), "moe_ep": str(ep), "num_tokens": str(tokens), "curve": curve}
    return Point("moe", system, backend, dtype, ms, row)


def test_the_accuracy_benchmark_scores_a_shape_by_its_own_table_without_the_point():
    accuracy = load_script("benchmarks/perf_accuracy.py")
    key = moe_curve_key("bf16", 4096, 1024, 10, 512, 1, 4)
    tokens, ms = moe_tables_for("h100_sxm", "sglang")[key]
    i = tokens.index(64.0)
    point = _moe_point("h100_sxm", "sglang", "bf16", (4096, 1024, 10, 512), 1, 4, 64, ms[i])
    held_out = accuracy.moe_left_out(point, True)
    # Linear between the neighbouring nodes, not the node itself.
    x0, x1 = tokens[i - 1], tokens[i + 1]
    expected = ms[i - 1] + (ms[i + 1] - ms[i - 1]) * (64.0 - x0) / (x1 - x0)
    assert held_out == pytest.approx(expected)
    assert accuracy.families_of(point) == ("moe/other", "moe/bf16 ep")
    mixed = _moe_point("gb200", "trtllm", "nvfp4", (7168, 2048, 8, 256), 2, 4, 8, 1.0, curve="1")
    assert accuracy.families_of(mixed) == ("moe/catalog", "moe/nvfp4 tpxep")
