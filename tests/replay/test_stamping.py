"""The token-stamping rules, and the rank's decode parts working through what they declare."""

from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pytest

from aisimulate.perf.polynomial import PolynomialPerfModel
from aisimulate.replay import EngineSpec
from aisimulate.replay.destination import DESTINATION
from aisimulate.replay.ledger import BurstLedger, OneTokenLedger
from aisimulate.replay.metrics import Collector
from aisimulate.replay.sglang import SglangRank
from aisimulate.replay.stamping import burst_steps, pass_gaps, prompt_token, second_token_pass, stamp
from aisimulate.replay.stretch import STRETCHES
from tests.replay.conftest import request


def gaps(collector):
    return list(zip(collector.gap_ms, collector.gap_weight, strict=True))


def test_a_first_token_ends_the_ttft_and_the_next_one_is_the_second():
    c, r = Collector(), request()
    stamp(r, 10.0, 1, c)
    assert (r.first_token_ms, r.second_token_ms, r.last_token_ms, r.generated) == (10.0, None, 10.0, 1)
    assert c.emitted_tokens == 1 and gaps(c) == []
    stamp(r, 15.0, 1, c)
    assert (r.first_token_ms, r.second_token_ms, r.last_token_ms, r.generated) == (10.0, 15.0, 15.0, 2)
    assert gaps(c) == [(5.0, 1)]
    stamp(r, 21.0, 1, c)
    assert r.second_token_ms == 15.0 and gaps(c) == [(5.0, 1), (6.0, 1)] and c.emitted_tokens == 3


def test_a_burst_shares_its_pass_end_and_may_carry_the_second_token():
    c, r = Collector(), request()
    stamp(r, 10.0, 1, c)
    stamp(r, 14.0, 3, c)  # one gap since the first token, two tokens with it
    assert r.second_token_ms == 14.0 and r.generated == 4 and r.last_token_ms == 14.0
    assert gaps(c) == [(4.0, 1), (0.0, 2)] and c.emitted_tokens == 4


def test_an_async_first_token_reaches_the_client_a_lag_of_its_pass_later():
    c, r = Collector(), request()
    assert prompt_token(r, 100.0, c, 0.5, 20.0)
    assert r.first_token_ms == 110.0 and r.last_token_ms == 100.0 and r.generated == 1
    # No lag: at the pass end.
    q = request(1)
    assert prompt_token(q, 100.0, c, 0.0, 20.0) and q.first_token_ms == 100.0
    # A preempted request recomputing its prompt emits its next token, not a first one: no lag.
    assert not prompt_token(r, 140.0, c, 0.5, 20.0)
    assert r.first_token_ms == 110.0 and r.second_token_ms == 140.0 and gaps(c) == [(40.0, 1)]


def test_a_ledgers_decoders_gap_from_the_last_pass_end_except_the_fresh_ones():
    c = Collector()
    old, fresh, joined = request(0), request(1), request(2)
    fresh.generated, fresh.last_token_ms = 1, 3.0  # its first token came with its prompt pass
    queue = [fresh, joined]  # joined: its KV arrived, no token yet
    ends = array("d", [5.0, 8.0])
    pass_gaps(queue, 3, ends, c)
    assert queue == [] and joined.first_token_ms == 8.0
    # Fresh ones from their own last token, the rest (old) from the previous pass end.
    assert gaps(c) == [(5.0, 1), (3.0, 1)] and c.emitted_tokens == 3
    assert old.first_token_ms is None  # aggregated: its own fields are derived when it leaves
    burst_steps(4, 9, c)  # 4 speculative steps, 9 tokens: 5 beyond each step's first
    assert gaps(c)[-1] == (0.0, 5) and (c.decode_steps, c.decode_step_tokens) == (4, 9)
    burst_steps(4, 4, c)  # every draft rejected: no zero gaps
    assert len(gaps(c)) == 3 and (c.decode_steps, c.decode_step_tokens) == (8, 13)


@pytest.mark.parametrize(
    ("gen0", "first_step", "expected"),
    [
        (1, 1, 7),  # its first token came with the prompt: the first decode step emits the second
        (0, 1, 8),  # arrived KV: the first step emits its first token, the next its second
        (0, 3, 7),  # a burst from no token: the second among it
        (2, 1, None),  # it had two before it decoded
    ],
)
def test_a_ledger_decoders_second_token_pass(gen0, first_step, expected):
    r = request()
    r.dec_pass0, r.dec_gen0 = 7, gen0

    class Ledger:
        def done(self, req, passes):
            assert req is r and passes == 1
            return first_step

    assert second_token_pass(r, Ledger()) == expected


def test_the_ledgers_second_token_is_the_stepped_one():
    # The same decoder stepped pass by pass and derived from the ledger: one second-token pass.
    cases = [(OneTokenLedger(64), None, 1), (BurstLedger(64), [3, 4, 5], 1), (BurstLedger(64), [1, 3, 5], 0)]
    for ledger, bursts, gen0 in cases:
        r = request(osl=6)
        r.generated, r.num_computed = gen0, 127  # 1: the prompt pass emitted its first token
        r.dec_pass0, r.dec_nc0, r.dec_gen0 = 4, r.num_computed, r.generated
        if bursts is not None:
            r.bursts = np.asarray(bursts)  # tokens out after each step
        ledger.start(r, 4)
        c = Collector()
        if gen0:
            r.last_token_ms = 0.0
        for p in range(4, 7):
            stamp(r, float(p), ledger.done(r, p - 3) - ledger.done(r, p - 4), c)
        assert r.second_token_ms is not None
        assert second_token_pass(r, ledger) == int(r.second_token_ms)


@dataclass
class Destination:
    """Only what the destination part declares it uses of a rank (no Rank)."""

    waiting: deque = field(default_factory=deque)
    materialized: deque = field(default_factory=deque)
    pending_destinations: deque = field(default_factory=deque)
    _admissions: int = 5
    num_running: int = 0


def test_the_destination_part_works_through_its_host_alone():
    host, r = Destination(), request()
    assert not DESTINATION.materialized_next(host)
    DESTINATION.activate(host, r)
    assert list(host.materialized) == [r] and DESTINATION.materialized_next(host)
    host.waiting.append(request(1))
    host.num_running = 1  # the head may fit once a running request frees blocks: it goes first
    assert not DESTINATION.materialized_next(host)
    host.pending_destinations.append(object())  # but while hand-offs wait, only arrived KV runs
    assert DESTINATION.materialized_next(host)
    assert DESTINATION.next_admission(host, r) is r and (r.admit_seq, host._admissions) == (5, 6)


def test_a_booked_run_reaches_sglangs_own_scheduler_state():
    # Its polls count over the booked passes and its new-token ratio decays once a pass.
    spec = EngineSpec(num_gpu_blocks=100, sglang={"scheduler_recv_interval": 4})
    rank = SglangRank(spec, "sglang", PolynomialPerfModel(), 100, Collector())
    for rid in range(2):
        assert rank.enqueue(request(rid, 127, 30), 0.0)
    end = rank.begin_pass(0.0)
    assert rank.end_pass(end) == [] and len(rank.decoders) == 2
    ratio = rank.new_token_ratio
    run = STRETCHES.times(rank, 3)
    ends, at = array("d"), end
    for t in run.times:
        at += t
        ends.append(at)
    assert STRETCHES.commit(rank, ends, end) == []
    # After an extend pass the first decode pass polls at once: two of the three count.
    assert rank._since_recv == 2 and rank._decode_end_ms == ends[-1]
    assert rank.new_token_ratio == pytest.approx(ratio - 3 * rank.ratio_decay, rel=1e-12)
    # The next run follows back to back: all its passes count, wrapping at the interval.
    run = STRETCHES.times(rank, 2)
    more = array("d", [ends[-1] + run.times[0], ends[-1] + run.times[0] + run.times[1]])
    STRETCHES.commit(rank, more, ends[-1])
    assert rank._since_recv == 0 and rank.pass_idx == 5  # an extend pass is not a decode pass
