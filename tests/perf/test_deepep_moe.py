"""SGLang's DeepEP expert kernels (``--moe-a2a-backend deepep``): priced by their own measured
curves where the split was measured, the dispatch and combine still by the all-to-all."""

import csv
from pathlib import Path

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_for, moe_curve_key
from aisimulate.perf.model import BatchShape
from aisimulate.perf.points import Point, moe_a2a, moe_curves, routing
from aisimulate.perf.providers import get_perf_model
from aisimulate.perf.shape import ParallelShape
from aisimulate.replay.plan import DeploymentPlan, EngineSpec, SglangOptions
from aisimulate.replay.workers import resolve_engine

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration"
R1 = "deepseek-ai/DeepSeek-R1"
DEP32 = ParallelShape(tp=1, attention_dp=32, moe_ep=32)


def _deepep_point(system: str, moe_ep: int, tokens: int) -> float:
    with (DATA / "moe_curve_points.csv").open() as fh:
        for r in csv.DictReader(fh):
            if (
                r["system"] == system
                and r["kernel_source"] == "deepepmoe_low_latency"
                and r["distribution"] == routing(get_model(R1).moe_routing_alpha)
                and (r["moe_ep"], r["num_tokens"]) == (str(moe_ep), str(tokens))
            ):
                return float(r["latency_ms"])
    raise AssertionError("point not bundled")


def _pass(a2a: str, shape: ParallelShape = DEP32, system: str = "gb200"):
    perf = AnalyticPerfModel(get_model(R1), get_system(system), shape, backend="sglang", moe_a2a_backend=a2a)
    # 32 sequences a rank: the EP group's MoE sees 32 x the attention-DP ranks' tokens.
    return perf.explain(BatchShape(decode_requests=32, decode_context_tokens=32 * 2048))


def test_a_deepep_wide_ep_decode_pass_prices_its_experts_by_the_deepep_measurement():
    measured = _deepep_point("gb200", 32, 32 * 32)
    deepep, default = _pass("deepep"), _pass("none")
    assert deepep.moe_ms == pytest.approx(get_model(R1).num_moe_layers * measured, rel=1e-9)
    # The default kernel's curve prices that batch about three times slower.
    assert default.moe_ms > 2 * deepep.moe_ms
    # The measured kernel excludes dispatch and combine: the all-to-all is priced as before.
    assert deepep.comm_ms == pytest.approx(default.comm_ms) and deepep.comm_ms > 0


def test_an_unmeasured_split_or_no_expert_parallelism_keeps_the_default_kernel():
    # DeepEP was measured at EP 2, 4, 16, 32, 64, 128 and 256 on GB200, not at 8.
    dep8 = ParallelShape(tp=1, attention_dp=8, moe_ep=8)
    assert _pass("deepep", dep8).moe_ms == pytest.approx(_pass("none", dep8).moe_ms)
    tp4 = ParallelShape(tp=4, moe_tp=4)
    assert _pass("deepep", tp4).moe_ms == pytest.approx(_pass("none", tp4).moe_ms)


def test_past_the_low_latency_batches_the_curve_continues_with_the_normal_mode():
    curve = calibration_for(get_system("gb200"), "sglang").moe_curves[
        moe_curve_key("fp8_block", 7168, 2048, 8, 256, 1, 32, "deepep")
    ]
    tokens, per_layer_ms = curve
    # Low-latency mode up to 128 tokens a rank (4,096 over 32 ranks), normal mode beyond.
    assert tokens[0] == 32 and 4096 in tokens and tokens[-1] == 524288
    assert per_layer_ms[tokens.index(4096)] == pytest.approx(_deepep_point("gb200", 32, 4096))


def test_deepep_rows_get_curves_of_their_own():
    row = {"hidden": "7168", "inter": "2048", "topk": "8", "num_experts": "256", "moe_tp": "1"}
    row["moe_ep"] = "32"
    points = [
        Point(
            "moe", "gb200", "sglang", "fp8_block", t / 10, {**row, "num_tokens": str(t), "kernel_source": k}
        )
        for t in range(1, 9)
        for k in ("deepepmoe_low_latency", "sglang_flashinfer_trtllm_moe")
    ]
    curves = moe_curves(points)[("gb200", "sglang")]
    assert set(curves) == {
        moe_curve_key("fp8_block", 7168, 2048, 8, 256, 1, 32),
        moe_curve_key("fp8_block", 7168, 2048, 8, 256, 1, 32, "deepep"),
    }
    assert moe_a2a({"kernel_source": "deepepmoe_normal"}) == "deepep"


@pytest.mark.parametrize(("backend", "expected"), [("sglang", "deepep"), ("vllm", "none")])
def test_the_engine_option_reaches_every_replay_of_an_sglang_worker(backend, expected):
    spec = EngineSpec(tp=1, attention_dp=32, moe_ep=32, sglang=SglangOptions(moe_a2a_backend="deepep"))
    plan = DeploymentPlan(model=R1, system="gb200", backend=backend, agg=spec)
    engine = resolve_engine(plan, spec, perf="analytic", perf_table=None, where="agg")
    assert engine.perf.describe()["moe_a2a_backend"] == expected
    direct = get_perf_model("analytic", model=get_model(R1), system=get_system("gb200"), shape=DEP32)
    assert direct.describe()["moe_a2a_backend"] == "none"
