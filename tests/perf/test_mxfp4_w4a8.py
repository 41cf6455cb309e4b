"""TRT-LLM's MXFP4 experts on Blackwell are priced by the W4A8 kernel it runs there (measured in
AIConfigurator's database), not by the weight-only kernel of Hopper."""

import csv
from pathlib import Path

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.dtypes import WEIGHT_BYTES_PER_PARAM
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.model import BatchShape
from aisimulate.perf.shape import ParallelShape

CURVES = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration" / "moe_curve_points.csv"
GPTOSS = get_model("openai/gpt-oss-120b")


def _measured_ms(system: str, dtype: str, moe_ep: int, tokens: int) -> float:
    with CURVES.open(newline="") as fh:
        (row,) = (
            r
            for r in csv.DictReader(fh)
            if (r["system"], r["backend"], r["moe_dtype"]) == (system, "trtllm", dtype)
            and (r["num_experts"], r["moe_tp"], r["moe_ep"], r["num_tokens"])
            == ("128", "1", str(moe_ep), str(tokens))
        )
    return float(row["latency_ms"])


def _moe_ms(system: str, shape: ParallelShape, tokens: int, backend: str = "trtllm") -> float:
    model = AnalyticPerfModel(GPTOSS, get_system(system), shape, backend=backend)
    return model.explain(BatchShape.from_chunks([(tokens, 0)])).moe_ms


def test_expert_parallel_split_prices_the_measured_w4a8_curve():
    shape = ParallelShape(tp=1, attention_dp=4, moe_ep=4)
    # The MoE block sees every attention-DP rank's tokens: 4 x 64.
    expected = GPTOSS.num_moe_layers * _measured_ms("gb200", "mxfp4_mxfp8", 4, 256)
    assert _moe_ms("gb200", shape, 64) == pytest.approx(expected)
    # The weight-only kernel of the same split is several times slower at that size.
    assert _measured_ms("gb200", "mxfp4", 4, 256) > 2 * _measured_ms("gb200", "mxfp4_mxfp8", 4, 256)


def test_tensor_split_takes_the_expert_parallel_curve_of_as_many_gpus():
    # TRT-LLM's W4A8 kernel was measured under expert parallelism only.
    tensor = _moe_ms("gb200", ParallelShape(tp=4), 16)
    assert tensor == pytest.approx(GPTOSS.num_moe_layers * _measured_ms("gb200", "mxfp4_mxfp8", 4, 16))


def test_hopper_and_other_backends_keep_the_weight_only_kernel():
    shape = ParallelShape(tp=1, attention_dp=2, moe_ep=2)
    h100 = _moe_ms("h100_sxm", shape, 8)
    assert h100 == pytest.approx(GPTOSS.num_moe_layers * _measured_ms("h100_sxm", "mxfp4", 2, 16))
    tp4 = ParallelShape(tp=4)
    assert _moe_ms("gb200", tp4, 16, backend="vllm") != _moe_ms("gb200", tp4, 16)


def test_a_format_with_its_own_fit_prices_an_unmeasured_tensor_split_by_the_fit():
    # Hopper's weight-only MXFP4 kernel has a fit (and EP-only curves under TRT-LLM): a tensor
    # split is the fit's, not the expert-parallel curve's.
    from aisimulate.perf.calibration import calibration_for
    from aisimulate.perf.kernels import moe_block

    h100 = get_system("h100_sxm")
    fit = calibration_for(h100, "trtllm").moe["mxfp4"]
    fitted = moe_block(
        num_layers=GPTOSS.num_moe_layers,
        hidden_size=2880,
        expert_intermediate=2880,
        num_experts=128,
        top_k=4,
        moe_tp=4,
        moe_ep=1,
        weight_bytes_per_param=WEIGHT_BYTES_PER_PARAM["mxfp4"],
        peak_tflops=h100.tflops["bf16"],
        hbm_gbps=h100.hbm_gbps,
        fit=fit,
    )
    assert _moe_ms("h100_sxm", ParallelShape(tp=4), 16) == pytest.approx(fitted.scalar()(16))
