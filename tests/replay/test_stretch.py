"""Decode-only passes planned ahead: a rank's run, and a worker's window over its lock-step
ranks, must be the passes stepping would run."""

from array import array

import pytest

from aisimulate.perf.polynomial import PolynomialPerfModel, decode_ms
from aisimulate.replay import DeploymentPlan, EngineSpec, simulate
from aisimulate.replay.engine import Rank
from aisimulate.replay.lockstep import Window
from aisimulate.replay.metrics import Collector
from aisimulate.replay.simulation import Simulation
from aisimulate.replay.stretch import RUN_PRICE_PASSES, STRETCHES, DecodeStretches
from aisimulate.replay.workers import Worker
from aisimulate.workload import SyntheticWorkload
from tests.replay.conftest import assert_matches_exact, request


def decoding_rank(blocks, *lengths, **engine):
    """A rank whose requests (isl 127, the given output lengths) finished their prompt pass."""
    spec = EngineSpec(num_gpu_blocks=blocks, **engine)
    rank = Rank(spec, "vllm", PolynomialPerfModel(), blocks, Collector(), tokens_per_step=1.0 + spec.nextn)
    for rid, osl in enumerate(lengths):
        assert rank.enqueue(request(rid, 127, osl), 0.0)
    end = rank.begin_pass(0.0)
    assert rank.end_pass(end) == []
    return rank, end


def planned(rank, start, times):
    """End times of planned passes from ``start``, summed one by one."""
    ends, at = array("d"), start
    for t in times:
        at += t
        ends.append(at)
    return ends


def test_a_run_spans_completions_and_the_batch_shrinks_at_each():
    rank, start = decoding_rank(100, 4, 30)
    capacity = rank.capacity_tokens
    # Both decoded their first token: the one with 4 outputs has 3 passes left, the last of
    # which finishes it (127 + 3 computed tokens leave the batch's context with it); the other
    # then decodes alone.
    run = STRETCHES.times(rank, 10)
    expected = [decode_ms(2 * (127 + k), capacity) for k in range(1, 4)]
    expected += [decode_ms(127 + k, capacity) for k in range(4, 11)]
    assert run.times == pytest.approx(expected, rel=1e-12)
    assert run.finishes == [2] and not run.short
    # A run priced on from where an earlier one ended is the rest of the same run.
    head = STRETCHES.times(rank, 2)
    rest = STRETCHES.times(rank, 8, head.tail, STRETCHES.blocks(rank, 2))
    assert head.times + rest.times == run.times and rest.finishes == [0] and rest.tail == run.tail
    ends = planned(rank, start, run.times)
    finished = STRETCHES.commit(rank, ends[:3], start)
    assert [r.rid for r in finished] == [0]
    assert finished[0].generated == 4 and finished[0].finish_ms == ends[2]
    assert rank.pass_idx == 4 and len(rank.decoders) == 1
    # Booking the rest continues the same run.
    assert STRETCHES.commit(rank, ends[3:], ends[2]) == []
    assert rank.pass_idx == 11 and rank.decoders[1].generated == 1
    assert STRETCHES.times(rank, 1).times == pytest.approx([decode_ms(127 + 11, capacity)], rel=1e-12)


def test_a_run_to_the_first_completion_stops_there_and_goes_on_from_its_tail():
    rank, _ = decoding_rank(100, 4, 7, 30)
    whole = STRETCHES.times(rank, 10)
    head = STRETCHES.times(rank, 10, first_finish=True)
    assert head.finishes == [2] and head.times == whole.times[:3] and not head.short
    assert head.tail.pass_idx == rank.pass_idx + 3 and head.tail.decoders == 2
    rest = STRETCHES.times(rank, 7, head.tail, STRETCHES.blocks(rank, 3), first_finish=True)
    assert rest.finishes == [2] and head.times + rest.times == whole.times[:6]
    # No completion within reach: the run is as long as asked.
    assert len(STRETCHES.times(rank, 2, first_finish=True).times) == 2


def test_a_long_run_is_priced_with_one_vectorised_call_equal_to_the_bit(monkeypatch):
    rank, _ = decoding_rank(100, 3 + RUN_PRICE_PASSES, 300)
    capacity, calls = rank.capacity_tokens, []
    price_run = rank.perf.decode_run_pricer

    def spy(*args):
        run = price_run(*args)
        return lambda contexts: calls.append(len(contexts)) or run(contexts)

    monkeypatch.setattr(rank.perf, "decode_run_pricer", spy)
    # Two decoders for 2 + RUN_PRICE_PASSES passes (long: one call), then 3 alone (short: per pass).
    run = STRETCHES.times(rank, 5 + RUN_PRICE_PASSES)
    two = RUN_PRICE_PASSES + 2
    expected = [decode_ms(2 * (127 + k), capacity) for k in range(1, two + 1)]
    expected += [decode_ms(127 + k, capacity) for k in range(two + 1, two + 4)]
    assert run.times == expected and run.finishes == [two - 1]
    assert calls == [two]


def test_a_run_ends_with_its_last_decoder():
    rank, _ = decoding_rank(100, 3, 5)
    run = STRETCHES.times(rank, 32)
    assert len(run.times) == 4 and run.finishes == [1, 3] and not run.short
    assert run.tail.decoders == 0 and run.tail.context_tokens == 0


def test_a_speculative_run_advances_by_its_bursts():
    # Every draft accepted: each step emits 3 tokens, the last one what is left. The request
    # with 10 outputs has 9 left after its prompt pass: 3 steps, the third of which finishes it.
    rank, start = decoding_rank(100, 10, 30, nextn=2, nextn_accept_rates=[1.0, 1.0])
    assert rank.decoding.plans_stretches
    run = STRETCHES.times(rank, 3)
    expected = [decode_ms(2 * (127 + 3 * k), rank.capacity_tokens) for k in range(1, 4)]
    assert run.times == pytest.approx(expected, rel=1e-12) and run.finishes == [2]
    finished = STRETCHES.commit(rank, planned(rank, start, run.times), start)
    assert [r.rid for r in finished] == [0] and finished[0].generated == 10
    assert rank.pass_idx == 4 and rank.dec_ctx == 127 + 9  # the other: its prompt and 3 bursts
    collector = rank.collector
    assert (collector.decode_steps, collector.decode_step_tokens) == (6, 18)


def test_a_run_stops_before_the_pass_that_finds_no_block():
    # 4 blocks hold both prompts (2 each, the 128th token fits the second block); the pass
    # after the first decode needs a third block per decoder, which is not there.
    rank, start = decoding_rank(4, 10, 10)
    run = STRETCHES.times(rank, 8)
    assert len(run.times) == 1 and run.short
    STRETCHES.commit(rank, planned(rank, start, run.times), start)
    run = STRETCHES.times(rank, 8)
    assert run.times == [] and run.short  # the next pass must preempt: stepped


def dp_plan(backend, decode_blocks=4096):
    return DeploymentPlan(
        model="Qwen/Qwen3-30B-A3B",
        system="h200_sxm",
        backend=backend,
        mode="disagg",
        prefill=EngineSpec(tp=2),
        decode=EngineSpec(tp=1, attention_dp=4, moe_ep=4, replicas=2, num_gpu_blocks=decode_blocks),
        frontend_latency_ms=0,
    )


def stepped(monkeypatch):
    """Workers that never plan passes ahead: every pass of every rank stepped."""
    monkeypatch.setattr(Worker, "_plan", lambda self, now_ms, until_ms: None)


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
@pytest.mark.parametrize("decode_blocks", [4096, 40])
def test_lock_step_ranks_planned_ahead_run_the_stepped_passes(monkeypatch, backend, decode_blocks):
    # Four attention-DP ranks per decode worker, hand-offs joining and requests completing on
    # every rank while the others run on (and, with few blocks, under KV pressure).
    workload = SyntheticWorkload(isl=600, osl=120, num_requests=120, concurrency=40)
    plan = dp_plan(backend, decode_blocks)
    fast = simulate(plan, workload, capture_requests=True)
    stepped(monkeypatch)
    step = simulate(plan, workload, capture_requests=True)
    for key, value in step.summary.items():
        if isinstance(value, int | float) and key != "wall_time_ms":
            assert fast.summary[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    pairs = zip(fast.requests, step.requests, strict=True)
    assert all(a["e2e_latency_ms"] == pytest.approx(b["e2e_latency_ms"], rel=1e-9) for a, b in pairs)


def test_planned_passes_are_priced_once_not_again_at_every_hand_off(monkeypatch):
    # Hand-offs join the decode ranks every few passes: each reprices its rank from the next
    # boundary, so passes are priced only up to the rank's next completion, never a long chunk
    # ahead that the next hand-off would price again.
    priced, booked = [0], [0]
    times, commit = DecodeStretches.times, DecodeStretches.commit

    def counted_times(self, rank, *args, **kwargs):
        run = times(self, rank, *args, **kwargs)
        priced[0] += len(run.times)
        return run

    def counted_commit(self, rank, ends, start_ms):
        booked[0] += len(ends)
        return commit(self, rank, ends, start_ms)

    monkeypatch.setattr(DecodeStretches, "times", counted_times)
    monkeypatch.setattr(DecodeStretches, "commit", counted_commit)
    plan = DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        mode="disagg",
        prefill=EngineSpec(),
        decode=EngineSpec(replicas=2),
        frontend_latency_ms=0,
    )
    simulate(plan, SyntheticWorkload(isl=600, osl=300, num_requests=600, concurrency=120), perf="polynomial")
    # (Priced 64 passes ahead, a hand-off repriced what was priced: 3.2 times the passes run.)
    assert booked[0] > 3000 and priced[0] < 2.5 * booked[0]


def slot_bound_plan():
    """vLLM decode ranks with few running slots: hand-offs queue for a slot while arrived
    prompts wait for one too."""
    return DeploymentPlan(
        model="meta-llama/Llama-3.1-8B",
        system="h200_sxm",
        mode="disagg",
        prefill=EngineSpec(replicas=2),
        decode=EngineSpec(replicas=1, max_num_seqs=8),
        frontend_latency_ms=0,
        kv_transfer_bandwidth_gbps=0,
    )


def test_a_hand_off_to_a_rank_without_a_free_slot_does_not_book_or_reprice_it(monkeypatch):
    # Nothing can join a rank whose running slots are all taken before one of its requests
    # completes (an event of its own): prompts handed off to it meanwhile leave its planned
    # passes alone, unbooked and priced once.
    queued, idle, priced = [0], [0], set()
    reserve, resume, price = Simulation._reserve, Worker._resume, Window.price

    def counted_reserve(self, rank, now):
        full = rank.num_running >= rank.spec.max_num_seqs
        queued[0] += bool(full and rank.pending_destinations and rank.materialized)
        reserve(self, rank, now)

    def counted_price(self, i, run=None):
        priced.add(i)
        return price(self, i, run)

    def counted_resume(self, until_ms):
        bound = {r.rank for r in self.ranks if r.materialized and r.num_running >= r.spec.max_num_seqs}
        priced.clear()
        result = resume(self, until_ms)
        idle[0] += len(bound & priced)
        return result

    monkeypatch.setattr(Simulation, "_reserve", counted_reserve)
    monkeypatch.setattr(Window, "price", counted_price)
    monkeypatch.setattr(Worker, "_resume", counted_resume)
    workload = SyntheticWorkload(isl=300, osl=200, num_requests=300, concurrency=64)
    simulate(slot_bound_plan(), workload, perf="polynomial")
    assert queued[0] > 100 and idle[0] == 0


def test_slot_bound_hand_offs_match_the_exact_loop():
    workload = SyntheticWorkload(isl=300, osl=200, num_requests=300, concurrency=64)
    fast = simulate(slot_bound_plan(), workload, perf="polynomial").summary
    exact = simulate(slot_bound_plan(), workload, perf="polynomial", exact=True).summary
    assert_matches_exact(fast, exact)


def test_lock_step_ranks_planned_ahead_match_the_exact_loop():
    workload = SyntheticWorkload(isl=600, osl=120, num_requests=120, concurrency=40)
    fast = simulate(dp_plan("sglang"), workload).summary
    exact = simulate(dp_plan("sglang"), workload, exact=True).summary
    assert_matches_exact(fast, exact)


def test_a_timeline_samples_planned_passes_as_stepped_ones(monkeypatch):
    # Samples book the passes that ended by then, and an event moved by a hand-off leaves no
    # instant of its own behind: every row is the stepped replay's.
    workload = SyntheticWorkload(isl=600, osl=120, num_requests=120, concurrency=40)
    plan = dp_plan("vllm", 40)
    fast = simulate(plan, workload, capture_timeline=True, timeline_interval_ms=300.0).timeline
    stepped(monkeypatch)
    step = simulate(plan, workload, capture_timeline=True, timeline_interval_ms=300.0).timeline
    assert len(fast) == len(step) > 10
    for a, b in zip(fast, step, strict=True):
        assert a == pytest.approx(b, rel=1e-9)
