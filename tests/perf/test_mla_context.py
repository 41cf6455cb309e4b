"""MLA prefill attention priced by the system's own measured MLA kernels (TRT-LLM's).

The GQA attention fits (heads of 128 dimensions, h100/h200/b200 only) priced DeepSeek's MLA
prefill (192-dimension q/k, 128-dimension v) 1.75x slow at 8k tokens on B300; AIConfigurator
0.12's ``mla/trtllm/1.3.0rc20/context_mla_perf`` measures it per system and KV-cache format.
"""

from dataclasses import replace

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.calibration import calibration_for
from aisimulate.perf.model import BatchShape
from aisimulate.perf.shape import ParallelShape

DSR1_FP4 = get_model("nvidia/DeepSeek-R1-0528-FP4")
DEP2 = ParallelShape(tp=1, attention_dp=2, moe_ep=2)
# One 8,192-token prompt, 128 heads on one GPU (batch 1): ms a layer, AIConfigurator's B300 table.
MEASURED_8K_MS = {"fp8": 1.627, "bf16": 1.925}


def _per_layer_ms(model, system: str, backend: str, kv: str, tokens: int, **kw) -> float:
    perf = AnalyticPerfModel(model, get_system(system), DEP2, backend=backend, kv_cache_dtype=kv, **kw)
    batch = BatchShape(prefill_tokens=tokens, prefill_requests=1)
    return perf.explain(batch).attention_ms / model.num_full_attention_layers


@pytest.mark.parametrize("kv", ["fp8", "bf16"])
def test_an_8k_mla_prefill_on_b300_is_priced_near_its_measured_kernel(kv):
    ms = _per_layer_ms(DSR1_FP4, "b300_sxm", "trtllm", kv, 8192)
    assert ms == pytest.approx(MEASURED_8K_MS[kv], rel=0.12)


def test_every_measured_system_has_mla_fits_of_both_kv_formats():
    for system in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"):
        cal = calibration_for(get_system(system), "trtllm")
        assert set(cal.context_mla) == {"bf16", "fp8"}, system
    # A system without its own attention fits names the MLA fits it does own.
    assert "context_mla fp8: b300_sxm/trtllm" in calibration_for(get_system("b300_sxm"), "trtllm").source


def test_models_and_backends_without_an_mla_fit_keep_the_attention_fit():
    cal = calibration_for(get_system("b300_sxm"), "trtllm")
    without = replace(cal, context_mla={})
    # MLA on TRT-LLM: its own fit, cheaper at long prompts than the GQA fit.
    mla = _per_layer_ms(DSR1_FP4, "b300_sxm", "trtllm", "fp8", 8192)
    gqa_priced = _per_layer_ms(DSR1_FP4, "b300_sxm", "trtllm", "fp8", 8192, calibration=without)
    assert mla < 0.7 * gqa_priced
    # A GQA model is priced as before.
    qwen = get_model("Qwen/Qwen3-235B-A22B")
    assert _per_layer_ms(qwen, "b300_sxm", "trtllm", "fp8", 8192) == _per_layer_ms(
        qwen, "b300_sxm", "trtllm", "fp8", 8192, calibration=without
    )
    # SGLang prices with vLLM's kernel fits, which hold no MLA fit.
    assert calibration_for(get_system("b300_sxm"), "sglang").context_mla == {}
