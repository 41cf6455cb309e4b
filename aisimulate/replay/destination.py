"""The decode side of disaggregated serving: reserving destination KV and taking arrivals.

A decode worker's queue, as the reference's single vLLM waiting queue sees it: requests it
preempted (which must recompute their prompt here) at the front, then prompts whose KV arrived
(``materialized``) in arrival order. Hand-offs still waiting to reserve KV
(``pending_destinations``) hold nothing yet, but while any wait, only arrived KV is admitted: a
preempted request would take the blocks the hand-offs wait for.

:data:`DESTINATION` is a part of every rank that holds no state of its own: each method takes the
rank it works on, typed by :class:`~aisimulate.replay.rank_state.DestinationHost` (what it reads
and calls), so rank and part never form a reference cycle; where it hands the rank to an
admission policy or a decode strategy, that is the ``Rank`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aisimulate.replay.scheduler import ceil_div

if TYPE_CHECKING:
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.rank_state import DestinationHost
    from aisimulate.replay.request import Request


class DecodeDestination:
    """What a decode worker does with prompts computed elsewhere."""

    def reserve(self, rank: DestinationHost, r: Request, committed: int = 0) -> int | None:
        """Hold destination blocks for a prompt arriving from a prefill worker; None if they do
        not fit yet (``committed``: blocks a running stretch has taken but not yet booked).
        Returns how many of its blocks are missing here (what must be sent)."""
        policy = rank.policy
        if policy.reserves_with_free_slot and rank.num_running >= rank.spec.max_num_seqs:
            return None
        bs, unit, pool = rank.block_size, rank.unit, rank.pool
        computed = r.prompt_len - 1  # the last prompt token is computed by the first decode step
        total = ceil_div(policy.destination_tokens(r), bs)
        matched, hot = pool.match_prefix(r.prompt_keys, computed // bs // unit)
        inactive_hits = sum(1 for key in r.prompt_keys[:matched] if key not in pool.active)
        cost = total - matched * unit + inactive_hits * unit
        if not policy.destination_fits(cast("Rank", rank), r, cost, hot * unit, committed):
            return None
        pool.acquire(r.prompt_keys[:matched])
        pool.allocate_anon(total - matched * unit)
        r.n_keyed, r.n_blocks, r.num_computed = matched * unit, total, computed
        rank.reserved_blocks += r.final_blocks - total
        rank._note_peak()
        return total - matched * unit

    def slot_bound(self, rank: DestinationHost) -> bool:
        """Whether nothing can join the rank before one of its requests completes: a vLLM rank
        whose running slots are all taken reserves no destination KV and admits no arrived
        prompt. A completion is an event of its own; waking the rank before it would only book
        and price its planned passes again at a boundary where nothing changes."""
        return rank.policy.reserves_with_free_slot and rank.num_running >= rank.spec.max_num_seqs

    def activate(self, rank: DestinationHost, r: Request) -> None:
        """The KV transfer finished: r decodes from the next pass that has room."""
        rank.materialized.append(r)

    def promote_for_stretch(self, rank: DestinationHost, p: int) -> bool:
        """Before a decode-only stretch from pass p: admit the arrived prompts its first pass
        would. False when only that pass itself can tell: it may preempt (and then admit
        nobody), or an arrival's first step starts a block."""
        if rank.num_running >= rank.spec.max_num_seqs or not self.materialized_next(rank):
            return True
        if rank.ledger.blocks(p) > rank.pool.available():
            return False
        while rank.num_running < rank.spec.max_num_seqs and self.materialized_next(rank):
            if rank.materialized[0].num_computed % rank.block_size == 0:
                return False  # the stretch would book a block for its first step: see the pass
            self.join(rank, p)
        return True

    def next_admission(self, rank: DestinationHost, r: Request) -> Request:
        """r, numbered as the rank's next admission (running order is admission order)."""
        r.admit_seq = rank._admissions
        rank._admissions += 1
        return r

    def materialized_next(self, rank: DestinationHost) -> bool:
        """Whether the next admission is a prompt whose KV arrived rather than the waiting head."""
        if not rank.materialized:
            return False
        return not rank.waiting or bool(rank.pending_destinations) or self.head_stuck(rank)

    def head_stuck(self, rank: DestinationHost) -> bool:
        """Whether the waiting head cannot fit while nothing runs that could free blocks for it.
        The arrived prompts behind it, holding their KV, then go first; the reference stalls
        for good there (its replay stops with an error)."""
        if rank.num_running:
            return False
        r = rank.waiting[0]
        return not rank.policy.admissible(cast("Rank", rank), r, rank._prefix_hit(r)[1] * rank.unit)

    def join(self, rank: DestinationHost, p: int) -> int | None:
        """Admit the oldest arrived prompt into pass p after the running requests were scheduled
        (it emits its first token at this pass's end); return the context its step attends to,
        None if that step finds no free block."""
        r = rank.materialized[0]
        new = ceil_div(r.num_computed + 1, rank.block_size) - r.n_blocks
        if new > rank.pool.available():
            return None
        rank.materialized.popleft()
        rank._start_decoding(self.next_admission(rank, r), p, first_single=True)
        if new:
            rank.pool.allocate_anon(new)
            rank.reserved_blocks -= new
        return rank.decoding.join(cast("Rank", rank), r, new)


DESTINATION = DecodeDestination()
