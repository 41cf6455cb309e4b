"""Decode-only stretches: a run of identical passes priced in one call and booked at once.

Between two events that could change a rank's batch (its next completion, an arrival it could
admit), every pass decodes the same requests: each adds one token, so the batch's context grows by
the decoder count per pass and the blocks it takes follow the residue classes. The whole run is
priced with one vectorised perf-model call and committed when it ends, or cut short by
``Worker.cut`` when a request arrives that a later pass could take.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from aisimulate.perf.model import BatchArrays

if TYPE_CHECKING:
    from aisimulate.replay.request import Request

# Shorter decode-only runs are cheaper pass by pass than as one vectorised stretch.
MIN_STRETCH_PASSES = 6


class DecodeStretches:
    """Mixed into ``Rank``; relies on its decode aggregates and pool."""

    def _head_could_start(self) -> bool:
        """Whether a decode-only pass now could admit the waiting head (conservatively)."""
        if not self.waiting or self.num_running >= self.spec.max_num_seqs:
            return False
        r = self.waiting[0]
        return self.policy.admissible(self, r, self._prefix_hit(r)[1] * self.unit)

    def plan_stretch(
        self, now_ms: float, horizon_ms: float = float("inf"), until_ms: float = float("inf")
    ) -> np.ndarray | None:
        """End times of the identical decode-only passes from now up to (and including) the
        next completion, if at least ``MIN_STRETCH_PASSES`` of them need no preemption and
        start before ``horizon_ms`` (the next arrival, which may cut the run); passes ending
        after ``until_ms`` (a timeline sample) are left out. None when not worth it. Nothing
        changes until :meth:`commit_stretch`."""
        if self.exact:
            return None
        # Arrived KV joins the first pass either way; admitting it here lets the run of
        # decode-only passes start with it.
        if self.materialized and not self._promote_for_stretch(self.pass_idx):
            return None
        if self.prefilling or not self.decoders or self._head_could_start():
            return None
        heap = self._finish_heap
        while heap[0] not in self.finish_at:
            heapq.heappop(heap)
        p, bs = self.pass_idx, self.block_size
        passes = heap[0] - p + 1
        if passes < MIN_STRETCH_PASSES:
            return None
        horizon_ms = min(horizon_ms, until_ms)
        if horizon_ms != float("inf"):
            d = len(self.decoders)
            ctx = self.dec_ctx + d
            first = self.perf.time_ms(0, 0, 0.0, 0, d, ctx, self.tokens_per_step, ctx, self.capacity_tokens)
            reach = int((horizon_ms - now_ms) / first) + 2  # passes only grow longer
            if reach < MIN_STRETCH_PASSES:
                return None
            passes = min(passes, reach)
        d = len(self.decoders)
        # A KV-aware router reads which blocks are cached: then a run must not evict any.
        available = self.pool.num_free if self.stretch_keeps_cache else self.pool.available()
        if d * (passes // bs + 1) > available:  # blocks might run out: find where
            if self.stretch_blocks(MIN_STRETCH_PASSES) > available:
                return None  # a full pool (decode KV under pressure): not even a short run
            need = np.asarray(self.residue, dtype=np.int64)[(p + np.arange(passes)) % bs]
            passes = min(passes, int(np.searchsorted(np.cumsum(need), available, side="right")))
            if passes < MIN_STRETCH_PASSES:
                return None
        # The batch's context after each pass: one more token per decoder per pass (whole
        # numbers, exact in float64 however they are summed).
        ctx = np.arange(self.dec_ctx + d, self.dec_ctx + d * passes + 1, d, dtype=np.float64)
        decoders = np.empty(passes)
        decoders.fill(d)
        times = self.perf.pass_times_ms(
            BatchArrays(
                decode_requests=decoders,
                decode_context_tokens=ctx,
                tokens_per_step=self.tokens_per_step,
                active_kv_tokens=ctx,
                kv_capacity_tokens=self.capacity_tokens,
            )
        )
        # Sequential sums from now, exactly as pass-by-pass stepping adds them.
        ends = np.empty(passes + 1)
        ends[0] = now_ms
        ends[1:] = times
        ends = np.add.accumulate(ends, out=ends)[1:]  # cumsum, minus its method's overhead
        self._stretch_start_ms = now_ms
        if until_ms != float("inf"):
            ends = ends[: max(int(ends.searchsorted(until_ms, side="right")), 1)]
        return ends

    def stretch_blocks(self, passes: int) -> int:
        """Blocks the decoders take over the next ``passes`` decode-only passes."""
        p, bs = self.pass_idx, self.block_size
        cycles, rest = divmod(passes, bs)
        residue, start = self.residue, p % bs
        # Over a whole cycle of block_size passes every decoder takes exactly one block; the
        # rest take the blocks of the residue classes from the current pass on, wrapping around.
        wrapped = start + rest - bs
        tail = sum(residue[:wrapped]) if wrapped > 0 else 0
        return cycles * len(self.decoders) + sum(residue[start : start + rest]) + tail

    def commit_stretch(self, ends: np.ndarray) -> list[Request]:
        """Apply the first ``len(ends)`` passes of the planned stretch."""
        k = len(ends)
        p, d = self.pass_idx, len(self.decoders)
        blocks = self.stretch_blocks(k)
        self.pool.allocate_anon(blocks)
        self.reserved_blocks -= blocks
        active = self.pool.num_active
        if active > self.max_active_blocks:
            self.max_active_blocks = active
        first, last = ends.item(0), ends.item(-1)
        self.pass_end_ms.append(first)
        self._decoder_gaps(first, d)
        if k > 1:
            self.collector.gaps(ends[1:] - ends[:-1], d)
            self.pass_end_ms.extend(ends[1:].tolist())
        last_start = ends.item(-2) if k > 1 else self._stretch_start_ms
        self._last_start_ms, self._last_end_ms = last_start, last
        self.last_pass = (0, 0, d, self.dec_ctx + d * k, last - last_start)
        self.dec_ctx += d * k
        self.pass_idx += k
        finished: list[Request] = []
        self._finish_decoders(p + k - 1, finished)
        return self._retire(finished, last)
