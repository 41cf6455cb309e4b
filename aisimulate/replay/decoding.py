"""How a rank decodes: its decoding requests visited one by one every pass, or kept as aggregates.

A rank picks its strategy once, when it is built (:meth:`Rank.decoding_strategy`):

* :data:`EXACT` steps every decoding request every pass, the reference loop; it is what
  ``exact=True`` asks for, and what a rank whose batch the aggregates cannot describe runs (a
  decode step that may not fit the token budget, or a preemption victim that may already be
  scheduled in the pass);
* :data:`LEDGER` keeps the decoders as the rank's ledger (see :mod:`ledger`): per-pass work
  independent of the batch size, and runs of decode-only passes a worker plans ahead across
  completions (:mod:`stretch`, :mod:`lockstep`).

The strategies hold no state of their own: each call names the rank whose requests it moves, so
a rank and its strategy never form a reference cycle.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from aisimulate.replay.scheduler import ceil_div
from aisimulate.replay.stamping import burst_steps, pass_gaps, stamp

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.request import Request


@runtime_checkable
class DecodeStrategy(Protocol):
    # Whether a worker may plan decode-only stretches on ranks that decode this way.
    plans_stretches: bool

    def start(self, rank: Rank, r: Request, next_pass: int) -> None:
        """r decodes from ``next_pass`` on (it is already among ``rank.decoders``)."""
        ...

    def stop(self, rank: Rank, r: Request, p: int) -> None:
        """r leaves the decoders at the start of pass p (preempted; already out of ``decoders``)."""
        ...

    def schedule(self, rank: Rank, p: int, budget: int) -> tuple[int, int, int]:
        """Schedule the decoders' steps of pass p, preempting for KV as needed: (token budget
        left, decoders stepping, the context their steps attend to)."""
        ...

    def join(self, rank: Rank, r: Request, new_blocks: int) -> int:
        """r, whose KV arrived, joins pass p's decode batch with a one-token step holding
        ``new_blocks`` more blocks: the context that step attends to."""
        ...

    def emit(self, rank: Rank, p: int, end_ms: float, finished: list[Request]) -> None:
        """Stamp the tokens of pass p's decode steps at ``end_ms``; add who finished."""
        ...

    def generated(self, rank: Rank, r: Request) -> int:
        """Tokens decoder r has emitted before the rank's next pass."""
        ...

    def step_blocks(self, rank: Rank, p: int) -> int:
        """Blocks the decoders' steps at pass p take."""
        ...

    def outputs_left(self, rank: Rank, clip: int) -> float:
        """Output tokens the decoders have left, each counted up to ``clip``."""
        ...


class ExactDecoding:
    """Every decoder visited every pass: one token, or its next drawn burst, per step."""

    plans_stretches = False

    def start(self, rank: Rank, r: Request, next_pass: int) -> None:
        del rank, r, next_pass  # its state is its own fields, stepped pass by pass

    def stop(self, rank: Rank, r: Request, p: int) -> None:
        del rank, r, p

    def schedule(self, rank: Rank, p: int, budget: int) -> tuple[int, int, int]:
        bs, decoders, pool = rank.block_size, rank.decoders, rank.pool
        d = d_ctx = 0
        for r in list(decoders.values()):
            if decoders.get(r.admit_seq) is not r:
                continue  # preempted as a victim of an earlier request
            if budget <= 0:
                break
            burst = step_tokens(r)
            new = ceil_div(r.num_computed + burst, bs) - r.n_blocks  # KV for the whole burst
            if new > 0:
                if not rank._make_room(new, p, r):
                    continue
                pool.allocate_anon(new)
                rank.reserved_blocks -= new
                r.n_blocks += new
            r.num_computed += burst
            r.scheduled_take = burst
            budget -= 1
            d += 1
            d_ctx += r.num_computed
        return budget, d, d_ctx

    def join(self, rank: Rank, r: Request, new_blocks: int) -> int:
        del rank
        r.n_blocks += new_blocks
        r.num_computed += 1
        r.scheduled_take = 1
        return r.num_computed

    def emit(self, rank: Rank, p: int, end_ms: float, finished: list[Request]) -> None:
        decoders, collector = rank.decoders, rank.collector
        for r in list(decoders.values()):
            burst = r.scheduled_take
            if not burst:
                continue
            r.scheduled_take = 0
            stamp(r, end_ms, burst, collector)
            collector.decode_step(burst)
            if r.generated >= r.max_output:
                del decoders[r.admit_seq]
                finished.append(r)

    def generated(self, rank: Rank, r: Request) -> int:
        return r.generated

    def step_blocks(self, rank: Rank, p: int) -> int:
        bs = rank.block_size
        return sum(ceil_div(r.num_computed + step_tokens(r), bs) - r.n_blocks for r in rank.decoders.values())

    def outputs_left(self, rank: Rank, clip: int) -> float:
        return float(sum(min(r.max_output - r.generated, clip) for r in rank.decoders.values()))


class LedgerDecoding:
    """The decoders as aggregates: the rank's ledger holds what they emit and take per pass,
    completions are filed by the pass they happen in, and their summed context is kept."""

    plans_stretches = True

    def start(self, rank: Rank, r: Request, next_pass: int) -> None:
        rank._fresh.append(r)
        f = r.finish_pass = next_pass + rank.ledger.start(r, next_pass) - 1
        bucket = rank.finish_at.get(f)
        if bucket is None:
            rank.finish_at[f] = [r]
            passes = rank.finish_passes
            if not passes or passes[-1] < f:
                passes.append(f)  # the usual case: it finishes after every other decoder
            else:
                insort(passes, f)
        else:
            bucket.append(r)
        rank.dec_ctx += r.num_computed

    def stop(self, rank: Rank, r: Request, p: int) -> None:
        if r in rank._fresh:
            rank._fresh.remove(r)
        rank._materialize(r, p)
        rank.ledger.stop(r, p)
        bucket = rank.finish_at[r.finish_pass]
        bucket.remove(r)
        if not bucket:
            del rank.finish_at[r.finish_pass]
            drop_finish_pass(rank.finish_passes, r.finish_pass)
        rank.dec_ctx -= r.num_computed

    def schedule(self, rank: Rank, p: int, budget: int) -> tuple[int, int, int]:
        ledger, pool = rank.ledger, rank.pool
        need = ledger.blocks(p)
        while need > pool.available():
            victim = rank._newest_running()
            own = (
                ledger.own_blocks(victim, p)
                if victim is not None and victim.admit_seq in rank.decoders
                else 0
            )
            rank._make_room(pool.available() + 1, p)
            need -= own
        if need:
            pool.allocate_anon(need)
            rank.reserved_blocks -= need
        d = len(rank.decoders)
        # Each decoder attends to its computed tokens plus the ones it computes now.
        return budget - d, d, rank.dec_ctx + ledger.tokens(p)

    def join(self, rank: Rank, r: Request, new_blocks: int) -> int:
        del rank, new_blocks  # the aggregates count its step from dec_pass0 = p on
        return r.num_computed + 1

    def emit(self, rank: Rank, p: int, end_ms: float, finished: list[Request]) -> None:
        d = len(rank.decoders)
        if d:
            tokens = rank.ledger.tokens(p)
            pass_gaps(rank._fresh, d, rank.pass_end_ms, rank.collector)
            if rank._bursts is not None:
                burst_steps(d, tokens, rank.collector)
            rank.dec_ctx += tokens
        if p in rank.finish_at:
            rank._finish_decoders(p, finished)

    def generated(self, rank: Rank, r: Request) -> int:
        return r.dec_gen0 + rank.ledger.done(r, rank.pass_idx - r.dec_pass0)

    def step_blocks(self, rank: Rank, p: int) -> int:
        return rank.ledger.blocks(p)

    def outputs_left(self, rank: Rank, clip: int) -> float:
        total = rank.ledger.outputs_left(rank.pass_idx)
        if total > clip:  # some request may exceed the clip: correct for those
            total -= sum(
                max(0, r.max_output - self.generated(rank, r) - clip) for r in rank.decoders.values()
            )
        return float(total)


def drop_finish_pass(passes: list[int], f: int) -> None:
    """Take pass f out of a rank's ascending completion passes (usually the first)."""
    if passes[0] == f:
        del passes[0]
    else:
        del passes[bisect_left(passes, f)]


def step_tokens(r: Request) -> int:
    """Tokens decoder r's next step emits when stepped: one, or its next drawn burst."""
    if r.bursts is None:
        return 1
    done = r.generated - r.dec_gen0
    return int(r.bursts[r.bursts.searchsorted(done, side="right")]) - done


EXACT = ExactDecoding()
LEDGER = LedgerDecoding()
