"""A format with no MoE fit of its own whose kernel was measured for the same experts at another
expert count is priced by that curve (Kimi-K2.5's 384 NVFP4 experts by TRT-LLM's low-latency
kernel, measured at DeepSeek's 256), not by the bf16 fit at 4-bit bytes."""

import csv
from pathlib import Path

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel, _other_expert_count
from aisimulate.perf.calibration import calibration_for, moe_curve_key
from aisimulate.perf.model import BatchShape
from aisimulate.perf.points import curve_routing
from aisimulate.perf.shape import ParallelShape

CURVES = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration" / "moe_curve_points.csv"
KIMI = get_model("nvidia/Kimi-K2.5-NVFP4")
TEP8 = ParallelShape(tp=8, moe_ep=8)


def _measured_ms(kernel: str, num_experts: int, tokens: int) -> float:
    with CURVES.open(newline="") as fh:
        (row,) = (
            r
            for r in csv.DictReader(fh)
            if (r["system"], r["backend"], r["moe_dtype"], r["kernel_source"])
            == ("gb200", "trtllm", "nvfp4", kernel)
            and (r["hidden"], r["inter"], r["topk"], r["num_experts"])
            == ("7168", "2048", "8", str(num_experts))
            and (r["moe_tp"], r["moe_ep"], r["num_tokens"], r["distribution"])
            == ("1", "8", str(tokens), curve_routing(("nvfp4", 7168, 2048, 8, num_experts)))
        )
    return float(row["latency_ms"])


def _moe_ms(tokens: int, **kw) -> float:
    model = AnalyticPerfModel(KIMI, get_system("gb200"), TEP8, backend="trtllm", **kw)
    return model.explain(BatchShape(decode_requests=tokens, decode_context_tokens=tokens * 1024)).moe_ms


@pytest.mark.parametrize("tokens", [1, 8, 48])
def test_kimi_experts_take_the_low_latency_kernel_measured_at_256_experts(tokens):
    assert KIMI.num_experts == 384 and KIMI.linear_dtype(expert=True) == "nvfp4"
    expected = KIMI.num_moe_layers * _measured_ms("moe_torch_flow_min_latency", 256, tokens)
    assert _moe_ms(tokens) == pytest.approx(expected)


def test_the_borrowed_curve_is_well_below_the_bf16_fit_at_a_decode_batch():
    # What priced them before: the bf16 fit at 4-bit bytes, with its power-law routing skew.
    cal = calibration_for(get_system("gb200"), "trtllm")
    assert "nvfp4" not in cal.moe
    assert _moe_ms(48) < 0.6 * 12.0  # the fit: 12.2 ms at 48 tokens a pass


def test_measured_kernel_tables_keep_the_shapes_own_curve():
    # With the kernel-tables switch the exact shape's measurement (CUTLASS at 384) wins.
    expected = KIMI.num_moe_layers * _measured_ms("moe_torch_flow_cutlass", 384, 8)
    assert _moe_ms(8, kernel_tables=True) == pytest.approx(expected, rel=0.004)  # the table's coding


def test_the_nearest_expert_count_by_ratio_is_borrowed():
    curve = ((1.0, 2.0), (0.1, 0.2))

    def curves(*counts):
        return {moe_curve_key("nvfp4", 7168, 2048, 8, n, 1, 8): (curve[0], (n, n)) for n in counts}

    geometry = (7168, 2048, 8, 384)
    assert _other_expert_count(curves(128, 512), "nvfp4", geometry, 1, 8)[1] == (512, 512)
    assert _other_expert_count(curves(192, 768), "nvfp4", geometry, 1, 8)[1] == (
        768,
        768,
    )  # a tie: the larger
    assert _other_expert_count(curves(256), "nvfp4", geometry, 1, 4) is None  # another split
    assert _other_expert_count(curves(256), "fp8_block", geometry, 1, 8) is None  # another format
    assert _other_expert_count(curves(384), "nvfp4", geometry, 1, 8) is None  # only its own count
