"""NVFP4 linear layers priced with an NVFP4 GEMM fit of each system's own measurements, the layers
NVIDIA's DeepSeek FP4 checkpoints quantise, and TRT-LLM's min-latency NVFP4 experts on systems
whose database measured only CUTLASS."""

import csv
import statistics
from pathlib import Path

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.dtypes import WEIGHT_BYTES_PER_PARAM
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_for, gemm_fit_key
from aisimulate.perf.kernel_tables import gemm_tables_for
from aisimulate.perf.kernels import gemm_roofline
from aisimulate.perf.model import BatchShape
from aisimulate.perf.points import load_points, predict
from aisimulate.perf.shape import ParallelShape
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data" / "calibration"
FP4_SYSTEMS = ("b200_sxm", "b300_sxm", "gb200", "gb300")
KIMI_FP4 = "nvidia/Kimi-K2.5-NVFP4"  # DeepSeek-V3's geometry, attention in bf16


@pytest.fixture(scope="module")
def nvfp4_points():
    return [p for p in load_points(DATA) if p.family == "gemm" and p.dtype == "nvfp4"]


@pytest.mark.parametrize("system", FP4_SYSTEMS)
@pytest.mark.parametrize("backend", ["trtllm", "vllm"])
def test_each_system_prices_nvfp4_gemms_with_its_own_fit(nvfp4_points, system, backend):
    """The bundled constants reproduce the system's own measured NVFP4 GEMMs (DeepSeek-R1 FP4's
    quantised layers, 1-16,384 tokens) within 15 % (median), better than the FP8 fit NVFP4 borrowed
    before it had its own. (The measured tables price NVFP4 where a system has them: at decode
    sizes the latency depends on the weight shape beyond the roofline's terms.)"""
    cal = calibration_for(get_system(system), backend)
    own = cal.gemm_fit("fp4", "nvfp4")
    assert own is cal.gemm["nvfp4"]
    mine = [p for p in nvfp4_points if (p.system, p.backend) == (system, backend)]
    assert len(mine) >= 100
    own_errors = [abs(predict(p, own) / p.measured_ms - 1) for p in mine]
    borrowed_errors = [abs(predict(p, cal.gemm["fp8"]) / p.measured_ms - 1) for p in mine]
    assert statistics.median(own_errors) <= 0.15
    assert statistics.median(own_errors) < statistics.median(borrowed_errors)


def test_a_decode_sized_nvfp4_gemm_on_b300_is_its_measurement(nvfp4_points):
    """One DB point: the shared experts' gate-up projection (4,096 x 7,168) at 8 tokens on B300
    with TRT-LLM, an activation-quantise + FP4 GEMM pair slower than a bf16 GEMM of that size."""
    point = next(
        p
        for p in nvfp4_points
        if (p.system, p.backend) == ("b300_sxm", "trtllm")
        and (p.row["m"], p.row["n"], p.row["k"]) == ("8", "4096", "7168")
    )
    fit = calibration_for(get_system("b300_sxm"), "trtllm").gemm["nvfp4"]
    assert predict(point, fit) == pytest.approx(point.measured_ms, rel=0.15)


def test_b300_keeps_its_nvfp4_fit_and_borrows_the_rest():
    b300, b200 = (calibration_for(get_system(s), "trtllm") for s in ("b300_sxm", "b200_sxm"))
    assert b300.source == (
        "b200_sxm/trtllm (stand-in for b300_sxm; own gemm nvfp4, context_mla bf16, context_mla fp8: "
        "b300_sxm/trtllm)"
    )
    assert b300.gemm["nvfp4"] != b200.gemm["nvfp4"]
    assert b300.gemm["bf16"] == b200.gemm["bf16"] and b300.context_attention == b200.context_attention
    # SGLang reads vLLM's kernel fits, this one included.
    assert (
        calibration_for(get_system("b300_sxm"), "sglang").gemm
        == calibration_for(get_system("b300_sxm"), "vllm").gemm
    )


def test_hopper_runs_nvfp4_weight_only_with_the_bf16_fit():
    cal = calibration_for(get_system("h100_sxm"), "trtllm")
    assert gemm_fit_key("nvfp4", "bf16") == "bf16"
    assert cal.gemm_fit("bf16", "nvfp4") is cal.gemm["bf16"]
    # No MXFP4 GEMM was measured: it keeps the fit it borrowed before (FP8's, at the FP4 peak).
    b200 = calibration_for(get_system("b200_sxm"), "trtllm")
    assert b200.gemm_fit("fp4", "mxfp4") is b200.gemm["fp8"]


def test_mlp_scoped_nvfp4_checkpoints_quantise_the_mlps_not_attention():
    for name in (KIMI_FP4, "nvidia/DeepSeek-V3.2-NVFP4"):
        m = get_model(name)
        assert m.linear_dtype(expert=True) == "nvfp4"
        assert m.linear_dtype(expert=False) == "nvfp4"  # dense MLP, shared experts
        assert m.linear_dtype(expert=False, attention=True) == "bf16"


def _fp4_against_bf16_mlps(system_name: str):
    """(the FP4 checkpoint's GEMM ms - the same with bf16 MLPs) of a 16-sequence decode pass on an
    attention-DP rank, with what each MLP costs: (width, layers, bf16 roofline at 16 tokens)."""
    fp4 = get_model(KIMI_FP4)
    bf16_mlps = fp4.with_quantization(weight_dtype="nvfp4", quant_scope="experts")
    system, shape = get_system(system_name), ParallelShape(tp=1, attention_dp=8, moe_tp=1, moe_ep=8)
    decode = BatchShape(decode_requests=16, decode_context_tokens=16 * 2048)

    def gemm_ms(model):
        return AnalyticPerfModel(model, system, shape, backend="trtllm").explain(decode).gemm_ms

    parts = ((fp4.intermediate_size, fp4.num_dense_layers), (fp4.shared_expert_width, fp4.num_moe_layers))
    return gemm_ms(fp4) - gemm_ms(bf16_mlps), fp4.hidden_size, system, parts


def _mlp_roofline(system, h, width, dtype, fit):
    return gemm_roofline(
        weight_params=3 * h * width,
        act_elems_per_token=2 * h + 3 * width,
        weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM[dtype],
        peak_tflops=system.tflops["fp4" if dtype == "nvfp4" else "bf16"],
        hbm_gbps=system.hbm_gbps,
        fit=fit,
        num_kernels=2,
        reduction_k=h + width,
    )


def test_fp4_shared_experts_and_dense_mlp_are_priced_from_the_nvfp4_tables():
    """On an attention-DP rank of B300s, an NVFP4 checkpoint's linear layers differ from the same
    layers in bf16 by exactly the dense MLP and shared experts read off the measured NVFP4 table
    (16 tokens is a table node)."""
    diff, h, system, parts = _fp4_against_bf16_mlps("b300_sxm")
    cal = calibration_for(system, "trtllm")
    table = gemm_tables_for("b300_sxm", "trtllm", "trtllm")["nvfp4"]
    node = table.m.index(16.0)
    expected = sum(
        layers * (table.curve_ms(2 * w, h)[node] + table.curve_ms(h, w)[node])
        - layers * _mlp_roofline(system, h, w, "bf16", cal.gemm["bf16"]).time_ms(16)
        for w, layers in parts
    )
    assert diff == pytest.approx(expected, rel=1e-9)
    assert expected != 0


def test_without_tables_nvfp4_mlps_take_the_nvfp4_fit(monkeypatch):
    import aisimulate.perf.analytic as analytic

    monkeypatch.setattr(analytic, "GEMM_TABLES_BY_DEFAULT", frozenset())
    diff, h, system, parts = _fp4_against_bf16_mlps("gb200")
    cal = calibration_for(system, "trtllm")
    expected = sum(
        layers * _mlp_roofline(system, h, w, "nvfp4", cal.gemm["nvfp4"]).time_ms(16)
        - layers * _mlp_roofline(system, h, w, "bf16", cal.gemm["bf16"]).time_ms(16)
        for w, layers in parts
    )
    assert diff == pytest.approx(expected, rel=1e-9)


def _curve_point(system: str, moe_tp: int, moe_ep: int, tokens: int) -> dict[str, str]:
    with (DATA / "moe_curve_points.csv").open() as fh:
        for r in csv.DictReader(fh):
            shape = (r["hidden"], r["inter"], r["num_experts"], r["moe_dtype"])
            deepseek = shape == ("7168", "2048", "256", "nvfp4")
            key = (r["system"], r["backend"], r["moe_tp"], r["moe_ep"], r["num_tokens"])
            if deepseek and key == (system, "trtllm", str(moe_tp), str(moe_ep), str(tokens)):
                return r
    raise AssertionError("point not bundled")


@pytest.mark.parametrize(("system", "sibling"), [("b300_sxm", "b200_sxm"), ("gb300", "gb200")])
def test_trtllm_nvfp4_experts_take_the_min_latency_kernel_on_b300_and_gb300(system, sibling):
    """The database measured TRT-LLM's min-latency NVFP4 MoE on b200_sxm and gb200 only; the
    b300_sxm and gb300 curves take the sibling's where it beats their own CUTLASS (at 16 tokens,
    moe_tp 8: CUTLASS is 2.5x slower)."""
    own, other = _curve_point(system, 8, 1, 16), _curve_point(sibling, 8, 1, 16)
    assert own["kernel_source"] == f"moe_torch_flow_min_latency ({sibling})"
    assert other["kernel_source"] == "moe_torch_flow_min_latency"
    assert own["latency_ms"] == other["latency_ms"]


@pytest.fixture(scope="module")
def extract_script():
    return load_script("benchmarks/extract_kernel_points.py")


def test_the_sibling_kernel_joins_only_where_the_min_latency_kernel_is_missing(extract_script):
    s = extract_script
    cut, fast = "moe_torch_flow_cutlass", s.MIN_LATENCY_KERNEL
    own = {("nvfp4", 16): {cut: 0.15}, ("nvfp4", 32): {cut: 0.2, fast: 0.08}, ("nvfp4", 64): {cut: 0.3}}
    sibling = {("nvfp4", 16): {cut: 0.14, fast: 0.056}, ("nvfp4", 32): {cut: 0.2, fast: 0.1}}
    out = s.with_sibling_min_latency(own, sibling, "b200_sxm")
    assert out[("nvfp4", 16)] == {cut: 0.15, f"{fast} (b200_sxm)": 0.056}
    assert out[("nvfp4", 32)] == own[("nvfp4", 32)]  # measured: kept as measured
    assert out[("nvfp4", 64)] == own[("nvfp4", 64)]  # the sibling did not measure it
    # The curve keeps the faster of the two per point.
    rows = s.moe_curve_points(
        None, "b300_sxm", "trtllm", {}, {("nvfp4", 7168, 2048, 8, 256, 16, 8, 1): out[("nvfp4", 16)]}
    )
    assert [(r["kernel_source"], r["latency_ms"]) for r in rows] == [(f"{fast} (b200_sxm)", 0.056)]
