"""The decode side of disaggregated serving: reserving destination KV and taking arrivals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aisimulate.replay.scheduler import ceil_div

if TYPE_CHECKING:
    from aisimulate.replay.request import Request


class DecodeDestination:
    """Mixed into ``Rank``: what a decode worker does with prompts computed elsewhere."""

    def reserve(self, r: Request, committed: int = 0) -> int | None:
        """Hold destination blocks for a prompt arriving from a prefill worker; None if they do
        not fit yet (``committed``: blocks a running stretch has taken but not yet booked).
        Returns how many of its blocks are missing here (what must be sent)."""
        bs, unit, pool = self.block_size, self.unit, self.pool
        computed = r.prompt_len - 1  # the last prompt token is computed by the first decode step
        total = ceil_div(computed, bs)
        matched, hot = pool.match_prefix(r.prompt_keys, computed // bs // unit)
        inactive_hits = sum(1 for key in r.prompt_keys[:matched] if key not in pool.active)
        cost = total - matched * unit + inactive_hits * unit
        if self.policy.name == "trtllm":
            room = pool.num_blocks - pool.num_active - self.reserved_blocks - committed
            if r.final_blocks - hot * unit > room:
                return None
        elif cost > pool.available() - committed:
            return None
        pool.acquire(r.prompt_keys[:matched])
        pool.allocate_anon(total - matched * unit)
        r.n_keyed, r.n_blocks, r.num_computed = matched * unit, total, computed
        self.reserved_blocks += r.final_blocks - total
        return total - matched * unit

    def activate(self, r: Request) -> None:
        """The KV transfer finished: r decodes from the next pass that has room."""
        self.materialized.append(r)

    def _promote_materialized(self, p: int) -> None:
        while self.materialized and self.num_running < self.spec.max_num_seqs:
            r = self.materialized.popleft()
            r.admit_seq = self._admissions
            self._admissions += 1
            self._start_decoding(r, p)
