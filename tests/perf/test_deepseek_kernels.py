"""DeepSeek-class kernels priced from their own measurements (block-scaled FP8 GEMMs, the routed
experts at every TP/EP split, the collectives of tensor-parallel attention with expert-split MoE)."""

import csv
import statistics
from pathlib import Path

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_for, moe_curve_key
from aisimulate.perf.model import BatchShape
from aisimulate.perf.points import calibrated_fit, load_points, predict
from aisimulate.perf.shape import ParallelShape

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration"
DSV3 = "deepseek-ai/DeepSeek-V3"


def _moe_point(system: str, backend: str, dtype: str, moe_tp: int, moe_ep: int, tokens: int) -> float:
    with (DATA / "moe_curve_points.csv").open() as fh:
        for r in csv.DictReader(fh):
            key = (r["system"], r["backend"], r["moe_dtype"], r["moe_tp"], r["moe_ep"], r["num_tokens"])
            deepseek = (r["hidden"], r["inter"], r["num_experts"]) == ("7168", "2048", "256")
            if deepseek and key == (system, backend, dtype, str(moe_tp), str(moe_ep), str(tokens)):
                return float(r["latency_ms"])
    raise AssertionError("point not bundled")


@pytest.mark.parametrize(
    ("model", "system", "backend", "shape", "dtype", "split"),
    [
        # gb200 borrows B200's kernel fits but interpolates its own measured experts.
        (DSV3, "gb200", "trtllm", ParallelShape(tp=8, moe_ep=8), "fp8_block", (1, 8)),
        # TRT-LLM's own MoE backend runs the tensor split on Blackwell: the expert split's price.
        (DSV3, "gb200", "trtllm", ParallelShape(tp=8, moe_tp=8), "fp8_block", (1, 8)),
        (DSV3, "b300_sxm", "sglang", ParallelShape(tp=8, moe_tp=8), "fp8_block", (8, 1)),
        (DSV3, "h100_sxm", "trtllm", ParallelShape(tp=1, attention_dp=8, moe_ep=8), "fp8_block", (1, 8)),
        ("nvidia/DeepSeek-V3-0324-FP4", "gb200", "trtllm", ParallelShape(tp=8, moe_ep=8), "nvfp4", (1, 8)),
    ],
)
def test_deepseek_decode_moe_is_its_measured_kernel(model, system, backend, shape, dtype, split):
    """A decode pass of 8 sequences per rank prices its experts at the measured latency of that
    very kernel, split and token count (the MoE sees every attention-DP rank's tokens)."""
    ds = get_model(model)
    perf = AnalyticPerfModel(ds, get_system(system), shape, backend=backend)
    decode = BatchShape(decode_requests=8, decode_context_tokens=8 * 2048)
    tokens = 8 * shape.attention_dp
    measured = _moe_point(system, backend, dtype, *split, tokens)
    assert perf.explain(decode).moe_ms == pytest.approx(ds.num_moe_layers * measured, rel=1e-9)


def test_deepseek_moe_between_measured_counts_is_interpolated():
    ds = get_model(DSV3)
    perf = AnalyticPerfModel(ds, get_system("gb200"), ParallelShape(tp=8, moe_ep=8), backend="trtllm")
    low, high = (_moe_point("gb200", "trtllm", "fp8_block", 1, 8, t) for t in (16, 32))
    moe = perf.explain(BatchShape(decode_requests=24, decode_context_tokens=24 * 1024)).moe_ms
    assert moe == pytest.approx(ds.num_moe_layers * (low + high) / 2, rel=1e-9)


def test_a_system_without_measured_experts_keeps_the_fit():
    cal = calibration_for(get_system("a100_sxm"), "trtllm")
    assert "stand-in" in cal.source and not cal.moe_curves
    gb200 = calibration_for(get_system("gb200"), "trtllm")
    assert "stand-in" in gb200.source
    assert moe_curve_key("fp8_block", 7168, 2048, 8, 256, 1, 8) in gb200.moe_curves


def test_sglang_prices_experts_with_its_own_measurements():
    b300 = get_system("b300_sxm")
    key = moe_curve_key("fp8_block", 7168, 2048, 8, 256, 8, 1)
    sglang, vllm = calibration_for(b300, "sglang"), calibration_for(b300, "vllm")
    assert sglang.moe_curves[key] != vllm.moe_curves[key]
    assert sglang.gemm == vllm.gemm  # kernel fits stay vLLM's
    # Shapes SGLang did not measure keep vLLM's measurements (gpt-oss's MXFP4 experts on H100).
    h100 = get_system("h100_sxm")
    gptoss = moe_curve_key("mxfp4", 2880, 2880, 4, 128, 8, 1)
    assert (
        calibration_for(h100, "sglang").moe_curves[gptoss] == calibration_for(h100, "vllm").moe_curves[gptoss]
    )


def test_block_scaled_fp8_gemms_have_their_own_fit():
    """DeepGEMM's launch cost is a fraction of per-tensor FP8's: the fit of its own points prices
    a decode-sized DeepSeek GEMM within 15 %, where the per-tensor fit is about twice too slow."""
    points = [p for p in load_points(DATA) if p.family == "gemm" and p.dtype == "fp8_block"]
    assert {p.system for p in points} == {"h100_sxm", "h200_sxm", "b200_sxm"}
    for system in ("h100_sxm", "h200_sxm", "b200_sxm"):
        mine = [p for p in points if p.system == system and p.backend == "trtllm"]
        errors = [abs(predict(p, calibrated_fit(p)) / p.measured_ms - 1) for p in mine]
        assert statistics.median(errors) <= 0.10, system
    q_b = next(
        p
        for p in points
        if (p.system, p.backend) == ("b200_sxm", "trtllm") and (p.row["m"], p.row["n"]) == ("8", "3072")
    )
    own = predict(q_b, calibrated_fit(q_b))
    per_tensor = predict(q_b, calibration_for(get_system("b200_sxm"), "trtllm").gemm["fp8"])
    assert own == pytest.approx(q_b.measured_ms, rel=0.15)
    assert per_tensor > 1.8 * q_b.measured_ms


def test_expert_split_without_attention_dp_all_reduces_like_tensor_parallel():
    """TP attention with experts split over the same GPUs: every GPU holds every token, so the
    experts' outputs are summed by the all-reduce a tensor-split MoE uses (no all-to-all)."""
    ds, gb200 = get_model(DSV3), get_system("gb200")
    decode = BatchShape(decode_requests=4, decode_context_tokens=4 * 4096)

    def comm(shape: ParallelShape) -> float:
        return AnalyticPerfModel(ds, gb200, shape, backend="trtllm").explain(decode).comm_ms

    assert comm(ParallelShape(tp=8, moe_ep=8)) == comm(ParallelShape(tp=8, moe_tp=8))
    # With attention DP the ranks hold different tokens: dispatch and combine move them.
    assert comm(ParallelShape(tp=1, attention_dp=8, moe_ep=8)) > comm(ParallelShape(tp=8, moe_ep=8))


def test_attention_dp_with_tensor_split_experts_all_reduces_gathered_tokens():
    """Attention DP 4 with the experts tensor-split 4 ways dispatches nothing: every layer gathers
    the group's tokens and reduces the MLP's output, two collectives a layer priced with the
    all-reduce fit, not the all-to-all's (SGLang's DeepSeek decode workers of 4 GB200s)."""
    ds, gb200 = get_model(DSV3), get_system("gb200")
    cal = calibration_for(gb200, "sglang")
    decode = BatchShape(decode_requests=1, decode_context_tokens=1500)
    shape = ParallelShape(tp=1, attention_dp=4, moe_tp=4, moe_ep=1)
    comm_ms = AnalyticPerfModel(ds, gb200, shape, backend="sglang").explain(decode).comm_ms
    # One decode token per rank: latency-bound, so the fixed cost of 2 x 61 collectives dominates.
    latency_only = 2 * ds.num_layers * cal.allreduce.latency(4)
    assert latency_only < comm_ms < 1.05 * latency_only
    assert comm_ms < 2 * ds.num_moe_layers * cal.alltoall.latency(4)
