"""The decode side of disaggregated serving: reserving destination KV and taking arrivals.

A decode worker's queue, as the reference's single vLLM waiting queue sees it: requests it
preempted (which must recompute their prompt here) at the front, then prompts whose KV arrived
(``materialized``) in arrival order. Hand-offs still waiting to reserve KV
(``pending_destinations``) hold nothing yet, but while any wait, only arrived KV is admitted: a
preempted request would take the blocks the hand-offs wait for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aisimulate.replay.scheduler import ceil_div

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.rank_state import DestinationHost
    from aisimulate.replay.request import Request


class DecodeDestination:
    """Part of ``Rank``: what a decode worker does with prompts computed elsewhere. It holds no
    state of its own: each method takes the rank as ``self``, typed by
    :class:`~aisimulate.replay.rank_state.DestinationHost` (what it reads and calls); where it
    hands itself to a policy or strategy it is the ``Rank`` it is part of."""

    def reserve(self: DestinationHost, r: Request, committed: int = 0) -> int | None:
        """Hold destination blocks for a prompt arriving from a prefill worker; None if they do
        not fit yet (``committed``: blocks a running stretch has taken but not yet booked).
        Returns how many of its blocks are missing here (what must be sent)."""
        policy = self.policy
        if policy.reserves_with_free_slot and self.num_running >= self.spec.max_num_seqs:
            return None
        bs, unit, pool = self.block_size, self.unit, self.pool
        computed = r.prompt_len - 1  # the last prompt token is computed by the first decode step
        total = ceil_div(policy.destination_tokens(r), bs)
        matched, hot = pool.match_prefix(r.prompt_keys, computed // bs // unit)
        inactive_hits = sum(1 for key in r.prompt_keys[:matched] if key not in pool.active)
        cost = total - matched * unit + inactive_hits * unit
        if not policy.destination_fits(cast("Rank", self), r, cost, hot * unit, committed):
            return None
        pool.acquire(r.prompt_keys[:matched])
        pool.allocate_anon(total - matched * unit)
        r.n_keyed, r.n_blocks, r.num_computed = matched * unit, total, computed
        self.reserved_blocks += r.final_blocks - total
        self._note_peak()
        return total - matched * unit

    def activate(self: DestinationHost, r: Request) -> None:
        """The KV transfer finished: r decodes from the next pass that has room."""
        self.materialized.append(r)

    def _promote_for_stretch(self: DestinationHost, p: int) -> bool:
        """Before a decode-only stretch from pass p: admit the arrived prompts its first pass
        would. False when only that pass itself can tell: it may preempt (and then admit
        nobody), or an arrival's first step starts a block."""
        if self.num_running >= self.spec.max_num_seqs or not self._materialized_next():
            return True
        if self.ledger.blocks(p) > self.pool.available():
            return False
        while self.num_running < self.spec.max_num_seqs and self._materialized_next():
            if self.materialized[0].num_computed % self.block_size == 0:
                return False  # the stretch would book a block for its first step: see the pass
            self._join_decoding(p)
        return True

    def _next_admission(self: DestinationHost, r: Request) -> Request:
        r.admit_seq = self._admissions
        self._admissions += 1
        return r

    def _materialized_next(self: DestinationHost) -> bool:
        """Whether the next admission is a prompt whose KV arrived rather than the waiting head."""
        if not self.materialized:
            return False
        return not self.waiting or bool(self.pending_destinations) or self._head_stuck()

    def _head_stuck(self: DestinationHost) -> bool:
        """Whether the waiting head cannot fit while nothing runs that could free blocks for it.
        The arrived prompts behind it, holding their KV, then go first; the reference stalls
        for good there (its replay stops with an error)."""
        if self.num_running:
            return False
        r = self.waiting[0]
        return not self.policy.admissible(cast("Rank", self), r, self._prefix_hit(r)[1] * self.unit)

    def _join_decoding(self: DestinationHost, p: int) -> int | None:
        """Admit the oldest arrived prompt into pass p after the running requests were scheduled
        (it emits its first token at this pass's end); return the context its step attends to,
        None if that step finds no free block."""
        r = self.materialized[0]
        new = ceil_div(r.num_computed + 1, self.block_size) - r.n_blocks
        if new > self.pool.available():
            return None
        self.materialized.popleft()
        self._start_decoding(self._next_admission(r), p, first_single=True)
        if new:
            self.pool.allocate_anon(new)
            self.reserved_blocks -= new
        return self.decoding.join(cast("Rank", self), r, new)
