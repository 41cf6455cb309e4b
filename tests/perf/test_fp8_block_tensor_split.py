"""TRT-LLM's block-scaled FP8 experts split by tensor parallelism on Blackwell run its own MoE
backend, not the DeepGEMM kernel AIConfigurator measured at that split: while a pass routes few
enough tokens for the layer to be bound by its weights they are priced by the measured
expert-parallel curve over as many GPUs, beyond by the measured tensor split."""

import numpy as np
import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_for, moe_curve_key
from aisimulate.perf.model import BatchShape
from aisimulate.perf.shape import ParallelShape

R1 = get_model("deepseek-ai/DeepSeek-R1")
GEOMETRY = (R1.hidden_size, R1.moe_intermediate_size, R1.experts_per_token, R1.num_experts)
LIMIT = backend_profile("trtllm").expert_parallel_price_up_to_tokens("fp8_block", 100)


def _curve_ms(system: str, backend: str, moe_tp: int, moe_ep: int, tokens: float) -> float:
    tokens_axis, per_layer_ms = calibration_for(get_system(system), backend).moe_curves[
        moe_curve_key("fp8_block", *GEOMETRY, moe_tp, moe_ep)
    ]
    return R1.num_moe_layers * float(np.interp(tokens, tokens_axis, per_layer_ms))


def _model(system: str, shape: ParallelShape, backend: str = "trtllm") -> AnalyticPerfModel:
    return AnalyticPerfModel(R1, get_system(system), shape, backend=backend)


def _decode_moe_ms(system: str, shape: ParallelShape, requests: int, backend: str = "trtllm") -> float:
    batch = BatchShape(decode_requests=requests, decode_context_tokens=1024 * requests)
    return _model(system, shape, backend).explain(batch).moe_ms


@pytest.mark.parametrize("system", ["b300_sxm", "gb200"])
@pytest.mark.parametrize("tokens", [1, 16, 48, 512])
def test_weight_bound_tensor_split_takes_the_expert_parallel_curve_on_blackwell(system, tokens):
    assert R1.linear_dtype(expert=True) == "fp8_block" and tokens <= LIMIT
    tp8 = _decode_moe_ms(system, ParallelShape(tp=8), tokens)
    assert tp8 == pytest.approx(_curve_ms(system, "trtllm", 1, 8, tokens))
    # The measured DeepGEMM tensor split of the same GPUs is far slower at these sizes.
    assert _curve_ms(system, "trtllm", 8, 1, tokens) > 1.3 * tp8


def test_prompt_sized_passes_keep_the_measured_tensor_split():
    model = _model("b300_sxm", ParallelShape(tp=8))
    for tokens in (1024, 8192):
        prefill = model.explain(BatchShape(prefill_tokens=tokens, prefill_requests=1)).moe_ms
        assert prefill == pytest.approx(_curve_ms("b300_sxm", "trtllm", 8, 1, tokens))
    # Between the last expert-parallel point and the first tensor-split one: linear.
    between = model.explain(BatchShape(prefill_tokens=768, prefill_requests=1)).moe_ms
    low, high = _curve_ms("b300_sxm", "trtllm", 1, 8, 512), _curve_ms("b300_sxm", "trtllm", 8, 1, 1024)
    assert between == pytest.approx((low + high) / 2)


def test_a_mixed_split_takes_the_expert_parallel_curve_of_all_its_gpus():
    mixed = _decode_moe_ms("b300_sxm", ParallelShape(tp=8, moe_tp=2, moe_ep=4), 16)
    assert mixed == pytest.approx(_curve_ms("b300_sxm", "trtllm", 1, 8, 16))


def test_expert_parallel_hopper_and_other_backends_keep_their_measured_split():
    tep8 = ParallelShape(tp=8, moe_ep=8)
    assert _decode_moe_ms("b300_sxm", tep8, 16) == pytest.approx(_curve_ms("b300_sxm", "trtllm", 1, 8, 16))
    # Hopper runs TRT-LLM's CUTLASS kernel, measured at the tensor split itself.
    h100 = _decode_moe_ms("h100_sxm", ParallelShape(tp=8), 16)
    assert h100 == pytest.approx(_curve_ms("h100_sxm", "trtllm", 8, 1, 16))
    # SGLang's Blackwell FP8 kernel keeps its own measured tensor split.
    sglang = _decode_moe_ms("b300_sxm", ParallelShape(tp=8), 16, backend="sglang")
    assert sglang == pytest.approx(_curve_ms("b300_sxm", "sglang", 8, 1, 16))
