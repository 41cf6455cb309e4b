from dataclasses import replace
from pathlib import Path

import pytest

from aisimulate.fidelity import Skipped, build_case, predict, read_measured
from aisimulate.replay import simulate

SMALL = Path(__file__).parent / "data" / "measured_small.csv"


@pytest.fixture(scope="module")
def llama():
    return next(r for r in read_measured(SMALL) if r.id == "llama8b_instruct_c4")


def test_headline_numbers_count_every_request_as_the_load_generator_does(llama):
    case = build_case(llama)
    p = predict(case)
    report = simulate(case.plan, case.workload)
    assert p.ttft_ms == pytest.approx(report.summary["mean_ttft_ms"])
    assert p.tpot_ms == pytest.approx(report.summary["mean_tpot_ms"])
    assert p.perf_model == "analytic"


def test_steady_state_drops_the_edges(llama):
    # Equal lengths keep 3 users in lock-step waves; of 100 requests the last one runs alone
    # and prefills faster than a wave of 3. The steady state drops it, the headline keeps it.
    # (SGLang prefills every waiting prompt at once; TRT-LLM's overlap scheduler splits waves.)
    p = predict(build_case(replace(llama, concurrency=3, backend="sglang")))
    assert p.steady_ttft_ms > p.ttft_ms


def test_one_user_has_no_edges(llama):
    p = predict(build_case(replace(llama, concurrency=1)))
    assert p.steady_ttft_ms == pytest.approx(p.ttft_ms)
    assert p.steady_tpot_ms == pytest.approx(p.tpot_ms, rel=1e-5)  # a lagged first token's rounding


def test_a_shape_that_cannot_run_is_skipped_not_raised(llama):
    too_big = replace(llama, model="meta-llama/Llama-3.1-405B", isl=128, osl=16)
    result = predict(build_case(too_big))
    assert isinstance(result, Skipped)
    assert "405B" in result.reason


def test_a_replay_that_completes_nothing_is_skipped(llama):
    case = build_case(llama)
    tiny = case.plan.model_copy(update={"agg": case.plan.agg.model_copy(update={"num_gpu_blocks": 1})})
    result = predict(replace(case, plan=tiny))
    assert isinstance(result, Skipped)
    assert result.reason == "no request completed in the replay"
