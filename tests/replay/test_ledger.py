"""The decode ledgers against a brute-force walk over every decoder's steps."""

import numpy as np
import pytest

from aisimulate.replay.ledger import BurstLedger, BurstSampler, OneTokenLedger
from aisimulate.replay.request import Request
from aisimulate.replay.scheduler import ceil_div

BS = 16


def decoder(num_computed, remaining, bursts=None):
    r = Request(spec=None, arrival_ms=0.0, prompt_len=num_computed, max_output=remaining, block_size=BS)
    r.num_computed = num_computed
    r.bursts = None if bursts is None else np.asarray(bursts, dtype=np.int64)
    return r


def start(ledger, r, pass0):
    r.dec_pass0, r.dec_nc0, r.dec_gen0 = pass0, r.num_computed, r.generated
    r.finish_pass = pass0 + ledger.start(r, pass0) - 1


def walk(decoders, upto):
    """Per-pass (tokens, blocks) of decoders given as (pass0, computed, tokens out after each
    step, pass before which it stopped)."""
    tokens, blocks = np.zeros(upto, dtype=int), np.zeros(upto, dtype=int)
    for pass0, computed, done, stop in decoders:
        before = 0
        for k, out in enumerate(done):
            p = pass0 + k
            if p >= min(stop, upto):
                break
            tokens[p] += out - before
            blocks[p] += ceil_div(computed + out, BS) - ceil_div(computed + before, BS)
            before = out
    return tokens, blocks


def populate(ledger, rng, *, bursts):
    """Decoders starting in passes 0-499, a few preempted at pass 550, every other one decoding
    past pass 1,200; registered in time order, as a rank does. Returns the walk's inputs."""
    sampler = BurstSampler([0.8, 0.4], rng)
    plans = []
    for i in range(40):
        computed, remaining = int(rng.integers(1, 300)), int(rng.integers(3000, 4000))
        single = np.arange(1, remaining + 1)
        done = sampler.draw(remaining, first_single=i % 3 == 0) if bursts else single
        pass0 = int(rng.integers(0, 500))
        stop = 550 if i % 4 == 1 else pass0 + len(done)
        plans.append((pass0, computed, remaining, done, stop))
    preempted = []
    for pass0, computed, remaining, done, stop in sorted(plans, key=lambda plan: plan[0]):
        r = decoder(computed, remaining, done if bursts else None)
        start(ledger, r, pass0)
        if stop == 550:
            preempted.append(r)
    for r in preempted:
        ledger.stop(r, 550)
    return [(pass0, computed, done.tolist(), stop) for pass0, computed, _, done, stop in plans]


@pytest.mark.parametrize("kind", ["one_token", "bursts"])
def test_ledger_totals_are_the_sum_of_every_step(kind):
    ledger = OneTokenLedger(BS) if kind == "one_token" else BurstLedger(BS)
    walked = populate(ledger, np.random.default_rng(7), bursts=kind == "bursts")
    tokens, blocks = walk(walked, 1400)
    for p in range(560, 1200, 37):  # every live decoder started, the preempted ones gone
        assert ledger.tokens(p) == tokens[p]
        assert ledger.blocks(p) == blocks[p]
        for k in (1, 5, 64, 150):
            assert ledger.blocks_over(p, k) == blocks[p : p + k].sum()
            assert ledger.tokens_over(p, k) == tokens[p : p + k].sum()
            after = 1000 + tokens[p : p + k].cumsum()
            assert list(ledger.contexts(1000, p, k, ledger.tokens(p))) == after.tolist()
            for room in (0, 3, 17, 400):
                fits = int(np.searchsorted(np.cumsum(blocks[p : p + k]), room, side="right"))
                assert ledger.passes_with_blocks(p, k, room) == fits
    assert ledger.tokens(560) == 30 if kind == "one_token" else ledger.tokens(560) > 30


def test_one_token_ledger_is_the_burst_ledger_with_single_tokens():
    rng = np.random.default_rng(3)
    one, bursts = OneTokenLedger(BS), BurstLedger(BS)
    decoders = [decoder(int(rng.integers(1, 500)), int(rng.integers(300, 400))) for _ in range(30)]
    for r in decoders:
        twin = decoder(r.num_computed, r.max_output, np.arange(1, r.max_output + 1))
        start(one, r, 0)
        start(bursts, twin, 0)
    for p in (0, 7, 150, 199):
        assert one.blocks(p) == bursts.blocks(p)
        assert one.tokens(p) == bursts.tokens(p) == 30
        assert one.outputs_left(p) == bursts.outputs_left(p)
        assert one.blocks_over(p, 40) == bursts.blocks_over(p, 40)
        assert one.passes_with_blocks(p, 100, 9) == bursts.passes_with_blocks(p, 100, 9)


def test_a_stopped_decoder_leaves_no_future_behind():
    ledger = BurstLedger(BS)
    r = decoder(15, 20, [3, 6, 18, 20])  # computed 18, 21, 33, 35: 2, 2, 3, 3 blocks of 16
    start(ledger, r, 5)
    assert [ledger.tokens(p) for p in range(5, 10)] == [3, 3, 12, 2, 0]
    assert [ledger.blocks(p) for p in range(5, 10)] == [1, 0, 1, 0, 0]
    assert ledger.done(r, 2) == 6 and ledger.own_blocks(r, 7) == 1 and ledger.own_blocks(r, 6) == 0
    ledger.stop(r, 7)
    assert [ledger.tokens(p) for p in range(7, 10)] == [0, 0, 0]
    assert ledger.blocks_over(7, 3) == 0 and ledger.outputs_left(7) == 0


def test_bursts_follow_the_conditional_acceptance():
    sampler = BurstSampler([0.85, 0.3], np.random.default_rng(0))
    draws = [sampler.draw(1000, first_single=False) for _ in range(200)]
    assert all(d[-1] == 1000 and np.all(np.diff(d) >= 1) and np.all(np.diff(d) <= 3) for d in draws)
    steps = np.concatenate([np.diff(d[:-1], prepend=0) for d in draws])  # all but the cut last
    assert steps.mean() == pytest.approx(1 + 0.85 + 0.85 * 0.3, rel=0.02)
    assert np.mean(steps == 3) == pytest.approx(0.85 * 0.3, rel=0.05)
    assert sampler.draw(50, first_single=True)[0] == 1


class AlwaysReject:
    """A generator whose every draft is rejected."""

    def random(self, size):
        return np.full(size, 0.999)


def test_a_draw_that_runs_short_is_drawn_again_at_the_most_steps():
    sampler = BurstSampler([0.99, 0.99, 0.99], AlwaysReject())
    assert sampler.draw(500, first_single=False).tolist() == list(range(1, 501))
