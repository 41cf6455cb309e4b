"""A small TensorRT-LLM attention-DP context worker gathers its experts' tokens: its price against
AIConfigurator's own estimate of the same pass (the rule: ``BackendProfile.experts_alltoall_needs_nvlink``,
tested in ``test_analytic.py``).
"""

import pytest

from aisimulate.catalog import get_model, get_system
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


def test_a_dep2_context_pass_of_8k_prompts_pays_a_gather_not_four_copies():
    """AIConfigurator 0.12 prices the dispatch and combine of one 8k prompt on each rank of a
    b300 DEP2 TRT-LLM DeepSeek-R1 FP4 worker at 17.0 + 18.4 ms (``context_moe_pre_dispatch``,
    ``context_moe_post_dispatch``); the all-to-all of 8 copies was priced 149 ms."""
    assert _comm_ms("trtllm", 2) == pytest.approx(35.4, rel=0.2)
