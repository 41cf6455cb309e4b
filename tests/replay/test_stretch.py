"""Decode-only stretches: a run of passes planned at once must be the passes stepping would run."""

import pytest

from aisimulate.perf.polynomial import PolynomialPerfModel, decode_ms
from aisimulate.replay.engine import Rank
from aisimulate.replay.metrics import Collector
from aisimulate.replay.plan import EngineSpec
from aisimulate.replay.request import Request
from aisimulate.replay.stretch import SCALAR_STRETCH_PASSES
from aisimulate.workload.request import RequestSpec


def request(rid, isl, osl):
    spec = RequestSpec(
        request_id=rid,
        session_id=rid,
        turn=0,
        input_tokens=isl,
        output_tokens=osl,
        hash_ids=tuple(range(100 * rid, 100 * rid + 2)),
        hash_block_tokens=64,
    )
    return Request.from_spec(spec, 0.0, 64, max_model_len=None)


def decoding_rank(blocks, *lengths, **engine):
    """A rank whose requests (isl 127, the given output lengths) finished their prompt pass."""
    spec = EngineSpec(num_gpu_blocks=blocks, **engine)
    rank = Rank(spec, "vllm", PolynomialPerfModel(), blocks, Collector(), tokens_per_step=1.0 + spec.nextn)
    for rid, osl in enumerate(lengths):
        assert rank.enqueue(request(rid, 127, osl), 0.0)
    end = rank.begin_pass(0.0)
    assert rank.end_pass(end) == []
    return rank, end


def test_a_short_run_ends_at_the_next_completion_priced_pass_by_pass():
    rank, start = decoding_rank(100, 4, 30)
    capacity = rank.capacity_tokens
    # Both decoded their first token: the one with 4 outputs has 3 passes left, the last
    # of which finishes it. Each pass attends to 127 + k computed tokens per decoder.
    ends = rank.plan_stretch(start)
    assert len(ends) == 3 <= SCALAR_STRETCH_PASSES
    expected, at = [], start
    for k in range(1, 4):
        at += decode_ms(2 * (127 + k), capacity)
        expected.append(at)
    assert ends == pytest.approx(expected, rel=1e-12)
    finished = rank.commit_stretch(ends)
    assert [r.rid for r in finished] == [0]
    assert finished[0].generated == 4 and finished[0].finish_ms == ends[-1]
    assert rank.pass_idx == 4 and len(rank.decoders) == 1


def test_a_speculative_run_advances_by_its_bursts():
    # Every draft accepted: each step emits 3 tokens, the last one what is left. The request
    # with 10 outputs has 9 left after its prompt pass: 3 steps, the third of which finishes it.
    rank, start = decoding_rank(100, 10, 30, nextn=2, nextn_accept_rates=[1.0, 1.0])
    assert rank.decoding.plans_stretches
    ends = rank.plan_stretch(start)
    expected, at = [], start
    for k in range(1, 4):
        at += decode_ms(2 * (127 + 3 * k), rank.capacity_tokens)
        expected.append(at)
    assert ends == pytest.approx(expected, rel=1e-12)
    finished = rank.commit_stretch(ends)
    assert [r.rid for r in finished] == [0] and finished[0].generated == 10
    assert rank.pass_idx == 4 and rank.dec_ctx == 127 + 9  # the other: its prompt and 3 bursts
    collector = rank.collector
    assert (collector.decode_steps, collector.decode_step_tokens) == (6, 18)


def test_a_run_stops_before_the_pass_that_finds_no_block():
    # 4 blocks hold both prompts (2 each, the 128th token fits the second block); the pass
    # after the first decode needs a third block per decoder, which is not there.
    rank, start = decoding_rank(4, 10, 10)
    ends = rank.plan_stretch(start)
    assert len(ends) == 1
    rank.commit_stretch(ends)
    assert rank.plan_stretch(ends[-1]) is None  # the next pass must preempt: stepped


def test_a_long_run_is_vectorised_and_matches_the_scalar_prices():
    rank, start = decoding_rank(100, 40, 60)
    ends = rank.plan_stretch(start)
    assert len(ends) == 39 > SCALAR_STRETCH_PASSES
    at = start
    for k, end in enumerate(ends, start=1):
        at += decode_ms(2 * (127 + k), rank.capacity_tokens)
        assert end == pytest.approx(at, rel=1e-12)
