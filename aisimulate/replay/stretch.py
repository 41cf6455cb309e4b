"""Decode-only passes planned ahead on a rank: priced at once, booked when the worker commits them.

While a rank only decodes, every pass's batch is known in advance: the rank's ledger holds what
its decoders emit and take per pass (one token each, or their speculative bursts) and the pass
each one finishes in. The rank prices a run of such passes across those completions (the batch
shrinks at each, with no replanning) and books any prefix of the run later
(:meth:`DecodeStretches.commit`). A worker (:mod:`lockstep`) lays the runs of its lock-step
ranks side by side: one event per completion or arrival instead of one per pass.

:data:`STRETCHES` is a part of every rank that holds no state of its own: each method takes the
rank it works on, typed by :class:`~aisimulate.replay.rank_state.StretchHost` (what it reads and
calls), so rank and part never form a reference cycle. What differs between schedulers is
asked of the rank through the hooks its protocol declares: whether the waiting head could start
(``_head_could_start``), which arrived prompts a run starts with (``_promote_for_stretch``), and
what its own state does over a booked run (``_stretch_booked``: SGLang's polls and new-token
ratio).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from aisimulate.perf.model import PassRecord
from aisimulate.replay.stamping import burst_steps, pass_gaps

if TYPE_CHECKING:
    from aisimulate.replay.rank_state import StretchHost
    from aisimulate.replay.request import Request

# Passes from which a run of decode passes is priced with one vectorised call (where the
# provider has one) rather than a call per pass: a numpy call costs about as much as 30 scalar
# prices (measured on the polynomial provider).
RUN_PRICE_PASSES = 32


class RunTail(NamedTuple):
    """Where a planned run ends: the rank's pass after it, its decoders then and their summed
    context (what the next run starts from)."""

    pass_idx: int
    decoders: int
    context_tokens: int


class PlannedRun(NamedTuple):
    """A rank's planned passes: their durations, the passes (from the run's first) that complete
    decoders, whether it stopped short for want of KV blocks, and where it ends."""

    times: list[float]
    finishes: list[int]
    short: bool
    tail: RunTail


class DecodeStretches:
    """A rank's decode-only passes: whether its next ones are, their prices, and their booking."""

    def ready(self, rank: StretchHost) -> bool:
        """Whether the rank's next passes are decode-only passes of its ledger (after admitting
        the arrived KV its next pass would). False when the next pass must be stepped."""
        if not rank.decoding.plans_stretches:
            return False
        # Arrived KV joins the first pass either way; admitting it here lets the run of
        # decode-only passes start with it.
        if rank.materialized and not rank._promote_for_stretch(rank.pass_idx):
            return False
        return not rank.prefilling and bool(rank.decoders) and not rank._head_could_start()

    def _price_passes(
        self, rank: StretchHost, times: list[float], d: int, contexts: Sequence[int], ctx: int
    ) -> int:
        """Append the durations of decode-only passes of ``d`` decoders whose summed context is
        ``contexts`` after each (``ctx`` before them); return the context after them. The price
        is bound once per batch size (a batch shrinks and grows by one request at a time): a
        straight line in the context where the provider knows one, else its bound pricer, or
        for a long run its bound run pricer (one vectorised call, equal to the bit)."""
        if not contexts:
            return ctx
        price = rank._pricers.get(d)
        if price is None:
            perf, tps, capacity = rank.perf, rank.tokens_per_step, rank.capacity_tokens
            price = perf.decode_line(d, tps, capacity) or perf.decode_pricer(d, tps, capacity)
            rank._pricers[d] = price
        if isinstance(price, tuple):
            base, slope = price
            times += [base + slope * c for c in contexts]
        elif len(contexts) < RUN_PRICE_PASSES:
            times += map(price, contexts)
        else:
            run_pricers = rank._run_pricers
            if d not in run_pricers:
                run_pricers[d] = rank.perf.decode_run_pricer(d, rank.tokens_per_step, rank.capacity_tokens)
            run_price = run_pricers[d]
            if run_price is None:
                times += map(price, contexts)
            else:
                times += run_price(np.asarray(contexts, dtype=np.float64)).tolist()
        return contexts[-1]

    def times(
        self,
        rank: StretchHost,
        passes: int,
        start: RunTail | None = None,
        taken_blocks: int = 0,
        *,
        first_finish: bool = False,
    ) -> PlannedRun:
        """Up to ``passes`` decode-only passes from the next one (or from ``start``, where an
        earlier run ended, its passes holding ``taken_blocks`` not booked yet), the batch
        shrinking at each completion the ledger holds (``first_finish``: the run ends with the
        pass of its first completion). The run stops short before a pass that finds no KV blocks
        (counted as if no decoder left: a conservative stop, after which the pass is planned
        again), and ends with its last decoder. Nothing changes until :meth:`commit`."""
        p, d, ctx = start if start is not None else (rank.pass_idx, len(rank.decoders), rank.dec_ctx)
        ledger, finish_at = rank.ledger, rank.finish_at
        # A KV-aware router reads which blocks are cached: then a run must not evict any.
        available = rank.pool.num_free if rank.stretch_keeps_cache else rank.pool.available()
        fit = ledger.passes_with_blocks(p, passes, available - taken_blocks)
        if not fit:  # the next pass must preempt
            return PlannedRun([], [], d > 0, RunTail(p, d, ctx))
        last = p + fit
        # The completions in the run's passes, looked up among the rank's (ascending).
        passes_with_finishes = rank.finish_passes
        i = bisect_left(passes_with_finishes, p)
        if first_finish:
            finishes = passes_with_finishes[i : i + 1]
            if finishes and finishes[0] < last:
                fit, last = passes, finishes[0] + 1  # it ends there, not short of blocks
            else:
                finishes = []
        else:
            finishes = passes_with_finishes[i : bisect_left(passes_with_finishes, last, i)]
        times: list[float] = []
        k = p
        for f in finishes:
            ctx = self._price_passes(rank, times, d, ledger.contexts(ctx, k, f + 1 - k, d), ctx)
            k = f + 1
            for r in finish_at[f]:  # the terminal token it emitted is never computed
                ctx -= r.dec_nc0 + ledger.done(r, k - r.dec_pass0)
            d -= len(finish_at[f])
        if d and k < last:
            ctx = self._price_passes(rank, times, d, ledger.contexts(ctx, k, last - k, d), ctx)
            k = last
        return PlannedRun(times, [f - p for f in finishes], fit < passes and d > 0, RunTail(k, d, ctx))

    def blocks(self, rank: StretchHost, passes: int) -> int:
        """Blocks the decoders take over the next ``passes`` decode-only passes."""
        return rank.ledger.blocks_over(rank.pass_idx, passes)

    def commit(self, rank: StretchHost, ends: array[float], start_ms: float) -> list[Request]:
        """Book the next ``len(ends)`` planned passes (the first starting at ``start_ms``), of
        which only the last may complete decoders; return the requests that finished."""
        k = len(ends)
        p, d, ledger, collector = rank.pass_idx, len(rank.decoders), rank.ledger, rank.collector
        blocks = ledger.blocks_over(p, k)
        tokens = ledger.tokens_over(p, k)
        rank.pool.allocate_anon(blocks)
        rank.reserved_blocks -= blocks
        rank._note_peak()
        first, last = ends[0], ends[-1]
        rank.trim_pass_ends()
        rank.pass_end_ms.append(first)
        pass_gaps(rank._fresh, d, rank.pass_end_ms, collector)
        if rank._bursts is not None:
            burst_steps(d * k, tokens, collector)
        if k > 1:
            collector.gaps(ends, d)
            rank.pass_end_ms.extend(ends[1:])
        last_start = ends[-2] if k > 1 else start_ms
        rank._last_start_ms, rank._last_end_ms = last_start, last
        rank.last_pass = PassRecord(0, 0, d, rank.dec_ctx + tokens, last - last_start)
        rank.dec_ctx += tokens
        rank.pass_idx += k
        finished: list[Request] = []
        rank._finish_decoders(p + k - 1, finished)
        done = rank._retire(finished, last)
        rank._stretch_booked(ends, start_ms)
        return done


STRETCHES = DecodeStretches()
