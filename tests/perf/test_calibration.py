import statistics
from pathlib import Path

import pytest

from aisimulate.catalog import get_system
from aisimulate.perf.calibration import calibration_for
from aisimulate.perf.points import DATABASE_SYSTEMS, TARGETS, calibrated_fit, load_points, relative_errors

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration"


@pytest.fixture(scope="module")
def errors():
    # NVFP4's GEMM fits (b200_sxm to gb300) are judged in test_fp4_kernels.py: the measured
    # tables price NVFP4 where a system has them, the fit is their fallback.
    return relative_errors([p for p in load_points(DATA) if p.dtype != "nvfp4"])


def test_every_family_and_gpu_is_covered(errors):
    families = {family for family, _ in errors}
    assert families == set(TARGETS)
    assert {system for family, system in errors if family != "context_mla"} == {
        "h100_sxm",
        "h200_sxm",
        "b200_sxm",
    }
    # TRT-LLM's MLA prefill kernels are fitted on every system the database measured.
    assert {system for family, system in errors if family == "context_mla"} == set(DATABASE_SYSTEMS)


def test_shipped_calibration_meets_accuracy_targets(errors):
    for (family, system), values in errors.items():
        assert statistics.median(values) <= TARGETS[family], (family, system)


def test_sglang_uses_vllm_kernels_but_its_own_overhead():
    h200 = get_system("h200_sxm")
    sglang, vllm = calibration_for(h200, "sglang"), calibration_for(h200, "vllm")
    assert sglang.gemm == vllm.gemm
    assert sglang.source == "h200_sxm/vllm"


def test_calibration_carries_the_attribution():
    import json
    from importlib import resources

    data = json.loads((resources.files("aisimulate.perf") / "data" / "calibration.json").read_text())
    assert "NVIDIA AIConfigurator, Apache-2.0" in data["attribution"]


def test_mxfp4_experts_are_priced_with_their_own_kernel_fit():
    """gpt-oss's MXFP4 experts run weight-only kernels on Hopper: the fit measured on them must
    be the one used, and it must describe those kernels better than the borrowed bf16 fit."""
    from aisimulate.perf.points import predict

    h100 = get_system("h100_sxm")
    cal = calibration_for(h100, "vllm")
    assert cal.moe_fit("mxfp4", "bf16") is cal.moe["mxfp4"]
    assert cal.moe_fit("fp8_block", "fp8") is cal.moe["fp8"]
    assert cal.moe_fit("nvfp4", "bf16") is cal.moe["bf16"]  # no NVFP4 kernels measured on Hopper

    points = [
        p
        for p in load_points(DATA)
        if p.family == "moe" and p.dtype == "mxfp4" and (p.system, p.backend) == ("h100_sxm", "vllm")
    ]
    assert len(points) > 100

    def median_error(fit):
        return statistics.median(abs(predict(p, fit) / p.measured_ms - 1) for p in points)

    assert median_error(cal.moe["mxfp4"]) <= TARGETS["moe"]
    assert median_error(cal.moe["mxfp4"]) < median_error(cal.moe["bf16"])


def test_moe_fits_price_the_skewed_routing_of_a_real_router():
    """Both routings are in the data; only the power-law one is fitted, so a fitted MoE kernel
    costs more than the evenly spread best case."""
    import csv

    from aisimulate.perf.points import MOE_ROUTING, Point, predict

    moe = [p for p in load_points(DATA) if p.family == "moe"]
    assert {p.row["distribution"] for p in moe} == {MOE_ROUTING}
    with (DATA / "moe_points.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(moe) == sum(r["distribution"] == MOE_ROUTING for r in rows) < len(rows)

    balanced = [
        Point("moe", r["system"], r["backend"], "mxfp4", float(r["latency_ms"]), r)
        for r in rows
        if (r["distribution"], r["moe_dtype"]) == ("balanced", "w4a16_mxfp4") and int(r["num_tokens"]) >= 1024
    ]
    signed = [predict(p, calibrated_fit(p)) / p.measured_ms - 1 for p in balanced]
    assert statistics.median(signed) > 0.3  # a fit of both routings sits at +15%


def test_expert_parallel_moe_points_are_priced_with_the_routing_skew():
    """The busiest EP GPU gets more than its share of a skewed routing: without the fitted skew
    the EP8 points of 1,024+ tokens were predicted about a third fast."""
    from aisimulate.perf.points import predict

    cal = calibration_for(get_system("h100_sxm"), "vllm")
    assert cal.moe["mxfp4"].ep_skew > 0.2
    assert cal.moe["bf16"].ep_skew == cal.moe["mxfp4"].ep_skew  # measured at one split: borrowed
    ep8 = [
        p
        for p in load_points(DATA)
        if p.family == "moe"
        and (p.system, p.backend, p.dtype) == ("h100_sxm", "vllm", "mxfp4")
        and p.row["moe_ep"] == "8"
        and int(p.row["num_tokens"]) >= 1024
    ]
    assert len(ep8) >= 10
    assert abs(statistics.median(predict(p, cal.moe["mxfp4"]) / p.measured_ms - 1 for p in ep8)) < 0.1


def test_measured_moe_shapes_are_interpolated_where_measured_and_fitted_elsewhere():
    """gpt-oss-120b's experts at tp8 on H100/vLLM were measured: a pass prices its MoE from those
    points. A split without points, and a GPU standing in for another, use the fit."""
    import csv

    from aisimulate.catalog import get_model
    from aisimulate.catalog.dtypes import WEIGHT_BYTES_PER_PARAM
    from aisimulate.perf import AnalyticPerfModel, BatchShape, ParallelShape
    from aisimulate.perf.calibration import moe_curve_key
    from aisimulate.perf.kernels import moe_block

    gptoss = get_model("openai/gpt-oss-120b")
    with (DATA / "moe_points.csv").open() as fh:
        row = next(
            r
            for r in csv.DictReader(fh)
            if (r["system"], r["backend"], r["moe_dtype"], r["distribution"])
            == ("h100_sxm", "vllm", "w4a16_mxfp4", "power_law_1.2")
            and (r["num_experts"], r["moe_tp"], r["moe_ep"], r["num_tokens"]) == ("128", "8", "1", "1024")
        )
    prefill = BatchShape.from_chunks([(1024, 0)])

    def moe_ms(system: str, tp: int, moe_ep: int = 1) -> float:
        shape = ParallelShape(tp=tp, moe_tp=tp // moe_ep, moe_ep=moe_ep)
        return AnalyticPerfModel(gptoss, get_system(system), shape).explain(prefill).moe_ms

    assert moe_ms("h100_sxm", 8) == pytest.approx(gptoss.num_moe_layers * float(row["latency_ms"]))
    cal = calibration_for(get_system("h100_sxm"), "vllm")
    assert moe_curve_key("mxfp4", 2880, 2880, 4, 128, 2, 4) not in cal.moe_curves
    h100 = get_system("h100_sxm")
    fitted = moe_block(  # moe_tp 2 x moe_ep 4 was not measured: the fit prices it
        num_layers=gptoss.num_moe_layers,
        hidden_size=2880,
        expert_intermediate=2880,
        num_experts=128,
        top_k=4,
        moe_tp=2,
        moe_ep=4,
        weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM["mxfp4"],
        peak_tflops=h100.tflops["bf16"],
        hbm_gbps=h100.hbm_gbps,
        fit=cal.moe["mxfp4"],
    )
    assert moe_ms("h100_sxm", 8, moe_ep=4) == pytest.approx(fitted.scalar()(1024))
    stand_in = calibration_for(get_system("a100_sxm"), "vllm")
    assert "stand-in" in stand_in.source and not stand_in.moe_curves


def test_bundled_moe_curves_are_the_measured_points():
    import json
    from importlib import resources

    from aisimulate.perf.points import is_default_curve, load_curve_points, moe_curves

    data = json.loads((resources.files("aisimulate.perf") / "data" / "calibration.json").read_text())
    curve_points = load_curve_points(DATA)
    measured = moe_curves(load_points(DATA) + [p for p in curve_points if is_default_curve(p)])
    assert data["moe_curves"] == {f"{s}/{b}": curves for (s, b), curves in measured.items()}
    # The other catalog shapes' curves (kernel tables) come from the curve points alone.
    catalog = moe_curves([p for p in curve_points if not is_default_curve(p)])
    assert data["moe_catalog_curves"] == {f"{s}/{b}": curves for (s, b), curves in catalog.items()}
    assert "b300_sxm/vllm" in data["moe_catalog_curves"]


def test_deepseek_experts_are_priced_at_the_routing_skew_of_deepseeks_router():
    """DeepSeek-V3/R1's expert curves are the measurements at AIConfigurator's DeepSeek skew
    (power law 1.01), every other shape's at its generic one (1.2): an NVFP4 DEP32 decode pass
    of 16 requests a rank runs its experts at the 1.01 latency of 512 tokens."""
    import csv

    from aisimulate.catalog import get_model
    from aisimulate.perf.analytic import AnalyticPerfModel
    from aisimulate.perf.model import BatchShape
    from aisimulate.perf.points import MOE_ROUTING, curve_routing

    DEEPSEEK_MOE_ROUTING = "power_law_1.01"
    from aisimulate.perf.shape import ParallelShape

    assert curve_routing(("nvfp4", 7168, 2048, 8, 256)) == DEEPSEEK_MOE_ROUTING
    assert curve_routing(("mxfp4_mxfp8", 2880, 2880, 4, 128)) == MOE_ROUTING
    with (DATA / "moe_curve_points.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    deepseek = [
        r
        for r in rows
        if (r["hidden"], r["inter"], r["topk"], r["num_experts"]) == ("7168", "2048", "8", "256")
        and not r["kernel_source"].startswith("deepepmoe_")
    ]
    assert deepseek and {r["distribution"] for r in deepseek} == {DEEPSEEK_MOE_ROUTING}
    (measured,) = [
        float(r["latency_ms"])
        for r in deepseek
        if (r["system"], r["backend"], r["moe_dtype"], r["moe_tp"], r["moe_ep"], r["num_tokens"])
        == ("gb200", "trtllm", "nvfp4", "1", "32", "512")
    ]
    model = get_model("nvidia/DeepSeek-R1-0528-FP4")
    perf = AnalyticPerfModel(
        model,
        get_system("gb200"),
        ParallelShape(tp=1, attention_dp=32, moe_ep=32),
        backend="trtllm",
        kv_cache_dtype="fp8",
    )
    moe_ms = perf.explain(BatchShape(decode_requests=16, decode_context_tokens=16 * 1500)).moe_ms
    assert moe_ms == pytest.approx(model.num_moe_layers * measured, rel=1e-6)


@pytest.mark.parametrize(
    ("model", "alpha"),
    [
        # AIConfigurator's DeepSeekModel (DeepSeek-V3/R1, Kimi-K2.5) and DeepSeekV32Model (GLM-5).
        ("deepseek-ai/DeepSeek-R1", 1.01),
        ("moonshotai/Kimi-K2.5", 1.01),
        ("zai-org/GLM-5-FP8", 1.01),
        ("deepseek-ai/DeepSeek-V3.2", 1.01),
        # Its generic MOEModel and Qwen35Model; GLM-4.5, which it has no model of, takes the generic.
        ("Qwen/Qwen3-235B-A22B-FP8", 1.2),
        ("MiniMaxAI/MiniMax-M2.5", 1.2),
        ("openai/gpt-oss-120b", 1.2),
        ("Qwen/Qwen3.5-397B-A17B", 1.2),
        ("zai-org/GLM-4.5", 1.2),
    ],
)
def test_a_models_routing_skew_is_the_one_aiconfigurators_model_of_it_prices(model, alpha):
    from aisimulate.catalog import get_model

    assert get_model(model).moe_routing_alpha == alpha


def test_every_measured_curve_of_a_model_is_taken_at_that_models_routing_skew():
    """One skew per model across its curve families: TRT-LLM's and vLLM's kernels, the catalog
    kernel tables and SGLang's DeepEP kernels alike."""
    import csv

    from aisimulate.catalog import get_model, list_models
    from aisimulate.perf.points import routing

    skew = {}
    for name in list_models():
        m = get_model(name)
        if m.is_moe:
            skew[(m.hidden_size, m.moe_intermediate_size, m.experts_per_token, m.num_experts)] = routing(
                m.moe_routing_alpha
            )
    seen = {}
    with (DATA / "moe_curve_points.csv").open() as fh:
        for r in csv.DictReader(fh):
            geometry = tuple(int(r[c]) for c in ("hidden", "inter", "topk", "num_experts"))
            assert r["distribution"] == skew[geometry], (geometry, r["kernel_source"])
            seen.setdefault(r["distribution"], set()).add(r["kernel_source"].split("_")[0])
    # Both skews are bundled, and DeepSeek's covers SGLang's DeepEP kernels too.
    assert set(seen) == {"power_law_1.01", "power_law_1.2"} and "deepepmoe" in seen["power_law_1.01"]
