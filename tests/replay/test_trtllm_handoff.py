"""TRT-LLM's disaggregated hand-off latency and its eager context pass do not double count.

At few users a disaggregated TRT-LLM request's TTFT is the frontend, the eager context pass (its
floor: the layers' host launches), the hand-off and the first decode step. InferenceX measured
DeepSeek-R1 FP4 on B300 (a DEP2 context worker, five TEP4 decode workers, 1k/1k) at 122 ms mean
TTFT with 5 users; the hand-off fitted before the floor existed (90 ms) replayed it at 208 ms.
"""

import pytest

from aisimulate.catalog.backends import backend_profile
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.workload import SyntheticWorkload

MEASURED_TTFT_MS = 122.2  # silicon_sample.csv, b300_sxm, ctx1_gen5_tep4_batch4, 5 users


def one_request(**plan_kw):
    plan = DeploymentPlan(
        model="nvidia/DeepSeek-R1-0528-FP4",
        system="b300_sxm",
        backend="trtllm",
        mode="disagg",
        prefill=EngineSpec(attention_dp=2, moe_tp=1, moe_ep=2, max_model_len=2048),
        decode=EngineSpec(tp=4, moe_tp=1, moe_ep=4, max_num_seqs=4, max_model_len=2048),
        **plan_kw,
    )
    workload = SyntheticWorkload(isl=1024, osl=4, num_requests=1, concurrency=1)
    return simulate(plan, workload, perf="analytic", capture_requests=True).requests[0]


def test_the_trtllm_handoff_is_what_the_eager_context_pass_leaves():
    profile = backend_profile("trtllm")
    handoff_ms = profile.kv_handoff_ms
    r = one_request()
    # The default hand-off is the backend's hops and one KV send (nothing queued ahead of it):
    # the fixed send cost and 1k tokens of MLA latents (61 layers x 576 FP8 bytes) at the
    # sender's rate.
    send_ms = profile.kv_send_ms + 1024 * 61 * 576 / ((profile.kv_send_gbps or 1e9) * 1e6)
    assert r["kv_transfer_ms"] == pytest.approx(handoff_ms + send_ms, abs=0.5)
    without = one_request(kv_transfer_latency_ms=0)
    assert r["ttft_ms"] - without["ttft_ms"] == pytest.approx(handoff_ms, abs=0.5)
    assert without["kv_transfer_ms"] == pytest.approx(send_ms, abs=0.5)
    # The floor alone (61 layers x 1.5 ms) is most of the measured TTFT: the two together must
    # stay near the measurement, not 70% above it as the pre-floor 90 ms replayed.
    floor_ms = backend_profile("trtllm").eager_layer_ms * 61
    assert without["ttft_ms"] > floor_ms
    assert r["ttft_ms"] == pytest.approx(MEASURED_TTFT_MS, rel=0.25)
