"""Replay vs the perf model it runs on: one engine, a batch of 8, prompts of 256 to 4096 tokens.

The reference replay's parity check: with every prompt prefilled in one pass, the mean TTFT is
that pass plus at most the first decode step, and TPOT and throughput follow the decode step at
the mean context. (The reference expects the full extra step because its engine emits the first
token one step after the prefill; ours emits it with the prefill pass, as vLLM samples it, so
ours sits at the lower end.) Anything else (a scheduler that splits the batch, a pass timed
with the wrong shape, tokens counted twice) shows up as a gap here.
"""

import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.perf import AnalyticPerfModel, BatchShape, ParallelShape
from tests.replay.conftest import burst, run

BATCH = 8
OSL = 128
MODEL, SYSTEM = "meta-llama/Llama-3.1-8B", "h200_sxm"


@pytest.mark.parametrize("async_scheduling", [True, False])
@pytest.mark.parametrize("isl", [256, 1024, 4096])
def test_analytic_replay_matches_its_perf_model(isl, async_scheduling):
    perf = AnalyticPerfModel(
        get_model(MODEL), get_system(SYSTEM), ParallelShape(), async_scheduling=async_scheduling
    )
    report = run(
        burst(BATCH, isl, OSL),
        perf="analytic",
        max_num_batched_tokens=BATCH * isl,
        capture_requests=False,
        async_scheduling=async_scheduling,
    )
    s = report.summary
    prefill_ms = perf.pass_time_ms(BatchShape.from_chunks([(isl, 0)] * BATCH))

    def decode_ms(context: float) -> float:
        return perf.pass_time_ms(BatchShape.from_chunks(decode_contexts=[round(context)] * BATCH))

    assert prefill_ms <= s["mean_ttft_ms"] * (1 + 1e-9) <= prefill_ms + decode_ms(isl + 1)
    assert s["mean_ttft_ms"] == pytest.approx(prefill_ms, rel=0.05)
    step_ms = decode_ms(isl + OSL / 2)
    assert s["mean_tpot_ms"] == pytest.approx(step_ms, rel=0.05)
    duration_ms = prefill_ms + (OSL - 1) * step_ms
    assert s["output_throughput_tok_s"] == pytest.approx(BATCH * OSL / duration_ms * 1000, rel=0.05)
