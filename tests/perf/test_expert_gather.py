"""TensorRT-LLM's attention-DP experts all-gather over a group no larger than a token's experts.

Its MoE runs an all-to-all only where ``moe_ep_size > experts_per_token``; over fewer GPUs it
all-gathers every rank's tokens and reduce-scatters the outputs, so each token reaches every other
GPU once, not once per selected expert. DeepSeek-R1 selects 8 experts: a DEP2 or DEP4 worker
gathers, a DEP16 one runs the all-to-all, and at DEP8 the two move the same bytes.
"""

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.perf.analytic import AnalyticPerfModel
from aisimulate.perf.model import BatchShape
from aisimulate.perf.shape import ParallelShape

DSR1 = get_model("nvidia/DeepSeek-R1-0528-FP4")
B300 = get_system("b300_sxm")


def _comm_ms(backend: str, gpus: int, tokens_per_rank: int = 8192) -> float:
    model = AnalyticPerfModel(
        DSR1, B300, ParallelShape(tp=1, attention_dp=gpus, moe_ep=gpus), backend=backend, kv_cache_dtype="fp8"
    )
    batch = BatchShape(prefill_tokens=tokens_per_rank, prefill_requests=1)  # every rank as loaded
    return model.explain(batch).comm_ms


def test_trtllm_gathers_up_to_top_k_gpus():
    assert backend_profile("trtllm").expert_gather_up_to_top_k
    assert not backend_profile("sglang").expert_gather_up_to_top_k
    top_k = DSR1.experts_per_token
    # Over 2 GPUs a token has 4 of its 8 experts on the other GPU on average: an all-to-all of
    # expert copies would move 4 copies where the gather moves one.
    assert _comm_ms("trtllm", 2) == pytest.approx(_comm_ms("sglang", 2) * 2 / top_k, rel=0.05)
    assert _comm_ms("trtllm", 4) == pytest.approx(_comm_ms("sglang", 4) * 4 / top_k, rel=0.05)
    # At the crossover the two move the same bytes; beyond it TRT-LLM runs the all-to-all.
    assert _comm_ms("trtllm", 8) == pytest.approx(_comm_ms("sglang", 8), rel=1e-9)
    assert _comm_ms("trtllm", 16) == pytest.approx(_comm_ms("sglang", 16), rel=1e-9)


def test_a_dep2_context_pass_of_8k_prompts_pays_a_gather_not_four_copies():
    """AIConfigurator 0.12 prices the dispatch and combine of one 8k prompt on each rank of a
    b300 DEP2 TRT-LLM DeepSeek-R1 FP4 worker at 17.0 + 18.4 ms (``context_moe_pre_dispatch``,
    ``context_moe_post_dispatch``); the all-to-all of 8 copies was priced 149 ms."""
    assert _comm_ms("trtllm", 2) == pytest.approx(35.4, rel=0.2)
