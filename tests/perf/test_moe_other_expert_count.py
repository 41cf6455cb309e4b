"""A format with no MoE fit of its own whose kernel was measured for the same experts at another
expert count is priced by that curve (Kimi-K2.5's 384 NVFP4 experts by TRT-LLM's low-latency
kernel, measured at DeepSeek's 256), not by the bf16 fit at 4-bit bytes."""

import csv
import itertools
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


def _measured_ms(kernel: str, num_experts: int, tokens: int, moe_ep: int = 8) -> float:
    with CURVES.open(newline="") as fh:
        (row,) = (
            r
            for r in csv.DictReader(fh)
            if (r["system"], r["backend"], r["moe_dtype"], r["kernel_source"])
            == ("gb200", "trtllm", "nvfp4", kernel)
            and (r["hidden"], r["inter"], r["topk"], r["num_experts"])
            == ("7168", "2048", "8", str(num_experts))
            and (r["moe_tp"], r["moe_ep"], r["num_tokens"], r["distribution"])
            == ("1", str(moe_ep), str(tokens), curve_routing(("nvfp4", 7168, 2048, 8, num_experts)))
        )
    return float(row["latency_ms"])


def _moe_ms(tokens: int, shape: ParallelShape = TEP8, **kw) -> float:
    model = AnalyticPerfModel(KIMI, get_system("gb200"), shape, backend="trtllm", **kw)
    return model.explain(BatchShape(decode_requests=tokens, decode_context_tokens=tokens * 1024)).moe_ms


@pytest.mark.parametrize("tokens", [8, 48])
def test_kimi_experts_take_the_low_latency_kernel_measured_at_256_experts(tokens):
    assert KIMI.num_experts == 384 and KIMI.linear_dtype(expert=True) == "nvfp4"
    expected = KIMI.num_moe_layers * _measured_ms("moe_torch_flow_min_latency", 256, tokens)
    assert _moe_ms(tokens) == pytest.approx(expected)


def test_a_borrowed_split_is_capped_by_the_narrower_splits_of_its_kernel():
    # The borrowed DeepSeek measurement is 0.036 ms a layer at one token under EP8, 0.021 under
    # EP4: EP8 takes EP4's price there (it has no more experts a GPU to read).
    assert _measured_ms("moe_torch_flow_min_latency", 256, 1) > 1.5 * _measured_ms(
        "moe_torch_flow_min_latency", 256, 1, moe_ep=4
    )
    expected = KIMI.num_moe_layers * _measured_ms("moe_torch_flow_min_latency", 256, 1, moe_ep=4)
    assert _moe_ms(1) == pytest.approx(expected)


@pytest.mark.parametrize("tokens", [1, 2, 4, 8, 64])
def test_kimi_expert_price_never_rises_with_the_expert_split(tokens):
    prices = [_moe_ms(tokens, ParallelShape(tp=n, moe_ep=n)) for n in (1, 2, 4, 8, 16, 32)]
    assert all(wider <= narrower * (1 + 1e-9) for narrower, wider in itertools.pairwise(prices))


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


def test_a_borrowed_curve_is_capped_pointwise_by_the_narrower_expert_splits():
    def key(ep):
        return moe_curve_key("nvfp4", 7168, 2048, 8, 256, 1, ep)

    curves = {
        key(8): ((1.0, 4.0, 16.0), (0.04, 0.05, 0.10)),
        key(4): ((1.0, 16.0), (0.02, 0.20)),  # interpolated at 4 tokens: 0.056
        key(16): ((1.0, 16.0), (0.01, 0.01)),  # a wider split never caps
    }
    tokens, per_layer_ms = _other_expert_count(curves, "nvfp4", (7168, 2048, 8, 384), 1, 8)
    assert tokens == (1.0, 4.0, 16.0)
    assert per_layer_ms == pytest.approx((0.02, 0.05, 0.10))
