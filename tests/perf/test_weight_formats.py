"""Weight formats in the perf layer: W4A16 experts read 4-bit weights and compute in 16 bits;
checkpoints that keep attention in bf16 are priced and sized so."""

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf import AnalyticPerfModel, BatchShape, ParallelShape
from aisimulate.perf.memory import weights_bytes_per_gpu

H200 = get_system("h200_sxm")
B200 = get_system("b200_sxm")
KIMI = get_model("moonshotai/Kimi-K2.5")
SHAPE = ParallelShape(tp=8, moe_ep=8)


def _moe_ms(model, system, batch):
    return AnalyticPerfModel(model, system, SHAPE).explain(batch).moe_ms


def test_int4_experts_read_a_quarter_of_the_bytes():
    bf16 = KIMI.with_quantization(weight_dtype="bf16")
    # H200 decode of a modest batch is bound by reading the expert weights.
    decode = BatchShape(decode_requests=64, decode_context_tokens=64 * 1024)
    assert _moe_ms(KIMI, H200, decode) < 0.7 * _moe_ms(bf16, H200, decode)


@pytest.mark.parametrize("system", [H200, B200])
def test_int4_experts_compute_in_16_bits(system):
    # A long prefill is bound by the math, which runs in bf16 for both.
    bf16 = KIMI.with_quantization(weight_dtype="bf16")
    prefill = BatchShape.from_chunks([(16384, 0)])
    assert _moe_ms(KIMI, system, prefill) == pytest.approx(_moe_ms(bf16, system, prefill), rel=1e-9)


def test_int4_math_stays_bf16_where_fp4_is_native():
    # On B200 NVFP4 experts use the fp4 tensor cores; INT4 W4A16 experts do not.
    prefill = BatchShape.from_chunks([(16384, 0)])
    nvfp4 = get_model("nvidia/Kimi-K2.5-NVFP4")
    assert _moe_ms(nvfp4, B200, prefill) < _moe_ms(KIMI, B200, prefill)


def test_attention_kept_in_bf16_is_sized_and_priced_in_bf16():
    glm = get_model("nvidia/GLM-5-NVFP4")
    everything = glm.with_quantization(quant_scope="all_linear")
    shape = ParallelShape(tp=8, moe_ep=8)
    assert weights_bytes_per_gpu(glm, shape) > weights_bytes_per_gpu(everything, shape)
    # Small-batch decode on H200 (no fp4 math: weight-only kernels) is bound by weight reads.
    decode = BatchShape(decode_requests=4, decode_context_tokens=4 * 1024)
    gemm = [AnalyticPerfModel(m, H200, shape).explain(decode).gemm_ms for m in (glm, everything)]
    assert gemm[0] > gemm[1]
