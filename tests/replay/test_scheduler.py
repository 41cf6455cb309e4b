"""Scheduler rules, each on a tiny world whose answer is computed by hand (polynomial timing)."""

import pytest

from aisimulate.perf.polynomial import decode_ms, prefill_ms
from aisimulate.workload import SyntheticWorkload

from .conftest import burst, run


def by_id(report):
    return {r["request_id"]: r for r in report.requests}


def test_single_request_timeline_is_prefill_then_decode_steps():
    capacity = 16384 * 64
    rep = run(burst(1, 1024, 3))
    r = by_id(rep)[0]
    assert r["ttft_ms"] == pytest.approx(prefill_ms(1, 1024, 0))
    # Decode steps see the decoding request's computed tokens: 1025, then 1026.
    assert r["ttst_ms"] == pytest.approx(decode_ms(1025, capacity))
    assert r["e2e_latency_ms"] == pytest.approx(
        prefill_ms(1, 1024, 0) + decode_ms(1025, capacity) + decode_ms(1026, capacity)
    )


def test_chunked_prefill_splits_a_long_prompt_by_the_token_budget():
    rep = run(burst(1, 20000, 2), max_num_batched_tokens=8192)
    ttft = by_id(rep)[0]["ttft_ms"]
    expected = prefill_ms(1, 8192, 0) + prefill_ms(1, 16384, 8192) + prefill_ms(1, 20000, 16384)
    assert ttft == pytest.approx(expected)


def test_without_chunking_a_prompt_over_the_budget_waits_for_an_empty_budget():
    rep = run(burst(2, 6000, 2), max_num_batched_tokens=8192, enable_chunked_prefill=False)
    first, second = sorted(by_id(rep).values(), key=lambda r: r["first_token_ms"])
    assert first["ttft_ms"] == pytest.approx(prefill_ms(1, 6000, 0))
    assert second["first_admit_ms"] >= first["first_token_ms"]


def test_admission_is_head_of_line_and_waits_for_blocks():
    # 15 blocks of 64: one 600-token prompt takes 10, the second needs 10 more.
    rep = run(burst(2, 600, 50), num_gpu_blocks=15)
    first, second = by_id(rep)[0], by_id(rep)[1]
    assert rep.summary["preemptions"] == 0
    assert second["first_admit_ms"] >= first["last_token_ms"]


def test_lifo_preemption_recomputes_the_newest_request():
    # 20 blocks: both 600-token prompts are admitted (10 + 10) but cannot both grow to 650.
    rep = run(burst(2, 600, 50), num_gpu_blocks=20)
    records = by_id(rep)
    assert rep.summary["preemptions"] >= 1
    assert records[1]["preemptions"] >= 1 and records[0]["preemptions"] == 0
    assert all(r["output_length"] == 50 for r in records.values())
    assert rep.summary["completed_requests"] == 2


def test_fifo_preemption_takes_the_oldest():
    rep = run(burst(2, 600, 50), num_gpu_blocks=20, preemption_mode="fifo")
    assert by_id(rep)[0]["preemptions"] >= 1


def test_recompute_rule_keeps_the_last_block_on_a_full_hit():
    workload = SyntheticWorkload(
        isl=1024, osl=2, num_requests=2, concurrency=1, shared_prefix_ratio=1.0, num_prefix_groups=1
    )
    rep = run(workload)
    assert by_id(rep)[0]["reused_input_tokens"] == 0
    assert by_id(rep)[1]["reused_input_tokens"] == 960  # 16 blocks cached, 15 reused
    assert rep.summary["prefix_cache_reused_ratio"] == pytest.approx(960 / 2048)


def test_prefix_caching_off_reuses_nothing():
    workload = SyntheticWorkload(
        isl=1024, osl=2, num_requests=3, concurrency=1, shared_prefix_ratio=1.0, num_prefix_groups=1
    )
    assert run(workload, enable_prefix_caching=False).summary["prefix_cache_reused_ratio"] == 0


def test_trtllm_reserves_to_completion_and_never_preempts():
    rep = run(burst(2, 600, 50), num_gpu_blocks=20, backend="trtllm")
    first, second = by_id(rep)[0], by_id(rep)[1]
    assert rep.summary["preemptions"] == 0
    assert second["first_admit_ms"] >= first["last_token_ms"]


def test_trtllm_clamps_output_to_the_pool():
    rep = run(burst(1, 600, 5000), num_gpu_blocks=20, backend="trtllm")
    assert by_id(rep)[0]["output_length"] == 20 * 64 - 600


def test_sglang_extend_pass_decodes_only_the_prompts_it_completes():
    capacity = 16384 * 64
    rep = run(burst(1, 1024, 3), backend="sglang")
    r = by_id(rep)[0]
    assert r["ttft_ms"] == pytest.approx(prefill_ms(1, 1024, 0) + decode_ms(1024, capacity))


def test_sglang_runs_extend_passes_ahead_of_decoding():
    # A prompt arriving while another request decodes delays that request's next token by a
    # whole prefill pass (no mixed batch), unlike vLLM where the decode rides along.
    workload = SyntheticWorkload(isl=4096, osl=20, num_requests=2, arrival_interval_ms=50)
    sglang = run(workload, backend="sglang")
    vllm = run(workload)
    assert sglang.summary["max_itl_ms"] > prefill_ms(1, 4096, 0)
    assert vllm.summary["max_itl_ms"] > prefill_ms(1, 4096, 0)  # mixed pass = prefill + decode
    assert by_id(sglang)[0]["output_length"] == 20


def test_sglang_reserves_output_room_before_admitting():
    # Two 600-token prompts with 50 tokens to go fit 20 blocks only if nothing is reserved;
    # SGLang holds room for the first one's output and admits the second later, no retraction.
    rep = run(burst(2, 600, 50), num_gpu_blocks=20, backend="sglang")
    assert rep.summary["preemptions"] == 0
    assert by_id(rep)[1]["first_admit_ms"] > by_id(rep)[0]["first_admit_ms"]


def test_sglang_retracts_the_request_with_fewest_outputs_when_the_ratio_has_decayed():
    # new_token_ratio decays, admitting more than the pool can finish: the latest admitted
    # (fewest output tokens) is retracted and recomputed.
    rep = run(burst(3, 200, 1000), num_gpu_blocks=30, backend="sglang")
    records = by_id(rep)
    assert rep.summary["preemptions"] == 1
    assert records[2]["preemptions"] == 1 and records[0]["preemptions"] == 0
    assert all(r["output_length"] == 1000 for r in records.values())


def test_requests_that_can_never_fit_are_rejected_and_counted():
    rep = run(burst(3, 5000, 10), num_gpu_blocks=10)
    assert rep.summary["rejected_requests"] == 3 and rep.summary["completed_requests"] == 0
    assert {r["status"] for r in rep.requests} == {"rejected"}
    too_long = run(burst(2, 2000, 10), max_model_len=1024)
    assert too_long.summary["rejected_requests"] == 2


def test_max_model_len_stops_generation():
    rep = run(burst(1, 1000, 500), max_model_len=1100)
    assert by_id(rep)[0]["output_length"] == 100


def test_max_num_seqs_caps_the_running_batch():
    rep = run(burst(8, 128, 40), max_num_seqs=2, capture_requests=True)
    records = sorted(by_id(rep).values(), key=lambda r: r["first_admit_ms"])
    # Requests enter in pairs: the third waits until one of the first two finishes.
    assert records[2]["first_admit_ms"] >= min(r["last_token_ms"] for r in records[:2])


@pytest.mark.parametrize("exact", [True, False])
def test_sglang_takes_new_requests_in_every_recv_interval_decode_passes(exact):
    # Request 0 prefills at t=0 and decodes; request 1 arrives during its second decode pass.
    # Polling every pass, request 1 starts at the third pass; polling every 10 decode passes
    # (the first poll right after the extend pass), at the eleventh.
    capacity = 16384 * 64
    extend_ms = prefill_ms(1, 1024, 0) + decode_ms(1024, capacity)
    starts = [extend_ms]
    for i in range(1, 12):
        starts.append(starts[-1] + decode_ms(1024 + i, capacity))
    arrival = (starts[1] + starts[2]) / 2
    workload = SyntheticWorkload(isl=1024, osl=40, num_requests=2, arrival_interval_ms=arrival)
    every_pass = by_id(run(workload, backend="sglang", exact=exact))
    assert every_pass[1]["first_admit_ms"] == pytest.approx(starts[2])
    polled = run(workload, backend="sglang", exact=exact, sglang={"scheduler_recv_interval": 10})
    assert by_id(polled)[1]["first_admit_ms"] == pytest.approx(starts[10])
    assert polled.summary["completed_requests"] == 2


def test_sglang_prefills_the_arrivals_of_one_recv_interval_together():
    # A 64-token extend pass takes about 23 ms and a decode pass 6 ms: requests 1-3 arrive
    # (40 ms apart) while request 0 decodes, within one interval of 30 decode passes.
    workload = SyntheticWorkload(isl=64, osl=200, num_requests=4, arrival_interval_ms=40)
    records = by_id(run(workload, backend="sglang", sglang={"scheduler_recv_interval": 30}))
    assert records[1]["first_admit_ms"] == records[2]["first_admit_ms"] == records[3]["first_admit_ms"]
    assert records[1]["first_admit_ms"] > records[3]["arrival_time_ms"]
