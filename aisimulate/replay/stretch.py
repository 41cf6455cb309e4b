"""Decode-only stretches: a run of identical passes planned at once and booked at once.

Between two events that could change a rank's batch (its next completion, an arrival it could
admit), every pass decodes the same requests, whose tokens and blocks per pass the rank's ledger
already holds (one token each, or their speculative bursts). The whole run is
priced up front (a long run with one vectorised perf-model call) and committed when it ends, or
cut short by ``Worker.cut`` when a request arrives that a later pass could take: one event for
the run instead of one per pass.
"""

from __future__ import annotations

import heapq
from array import array
from typing import TYPE_CHECKING, cast

import numpy as np

from aisimulate.perf.model import PassRecord

if TYPE_CHECKING:
    from collections import deque

    from aisimulate.perf.model import PerfModel
    from aisimulate.replay.decoding import DecodeStrategy
    from aisimulate.replay.engine import Rank
    from aisimulate.replay.kv_cache import BlockPool
    from aisimulate.replay.ledger import BurstSampler, Ledger
    from aisimulate.replay.metrics import Collector
    from aisimulate.replay.plan import EngineSpec
    from aisimulate.replay.request import Request
    from aisimulate.replay.scheduler import AdmissionPolicy

# Runs up to this many passes are priced one scalar call per pass: numpy's per-call overhead
# outweighs the arithmetic there. Even a single decode-only pass is cheaper as a stretch than
# as a stepped pass (no admission scan, one event).
SCALAR_STRETCH_PASSES = 16


class DecodeStretches:
    """Mixed into ``Rank``: the rank's state and methods it uses are declared below."""

    spec: EngineSpec
    policy: AdmissionPolicy
    perf: PerfModel
    collector: Collector
    pool: BlockPool
    unit: int
    tokens_per_step: float
    capacity_tokens: int
    stretch_keeps_cache: bool
    decoding: DecodeStrategy
    ledger: Ledger
    _bursts: BurstSampler | None
    waiting: deque[Request]
    materialized: deque[Request]
    prefilling: list[Request]
    decoders: dict[int, Request]
    pass_idx: int
    pass_end_ms: array[float]
    finish_at: dict[int, list[Request]]
    _finish_heap: list[int]
    dec_ctx: int
    reserved_blocks: int
    last_pass: PassRecord | None
    _stretch_start_ms: float
    _last_start_ms: float
    _last_end_ms: float

    if TYPE_CHECKING:

        @property
        def num_running(self) -> int: ...
        def _prefix_hit(self, r: Request) -> tuple[int, int, int]: ...
        def _promote_for_stretch(self, p: int) -> bool: ...
        def _note_peak(self) -> None: ...
        def _decoder_gaps(self, end_ms: float, d: int) -> None: ...
        def _count_bursts(self, steps: int, tokens: int) -> None: ...
        def _finish_decoders(self, p: int, finished: list[Request]) -> None: ...
        def _retire(self, finished: list[Request], end_ms: float) -> list[Request]: ...

    def _head_could_start(self) -> bool:
        """Whether a decode-only pass now could admit the waiting head (conservatively)."""
        if not self.waiting or self.num_running >= self.spec.max_num_seqs:
            return False
        r = self.waiting[0]
        return self.policy.admissible(cast("Rank", self), r, self._prefix_hit(r)[1] * self.unit)

    def plan_stretch(
        self, now_ms: float, horizon_ms: float = float("inf"), until_ms: float = float("inf")
    ) -> array[float] | None:
        """End times of the identical decode-only passes from now up to (and including) the
        next completion that need no preemption and start before ``horizon_ms`` (the next
        arrival, which may cut the run); passes ending after ``until_ms`` (a timeline sample)
        are left out. None when the next pass must be stepped. Nothing changes until
        :meth:`commit_stretch`."""
        if not self.decoding.plans_stretches:
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
        passes = heap[0] - self.pass_idx + 1
        # A KV-aware router reads which blocks are cached: then a run must not evict any.
        available = self.pool.num_free if self.stretch_keeps_cache else self.pool.available()
        passes = self.ledger.passes_with_blocks(self.pass_idx, passes, available)
        if not passes:
            return None  # the next pass must preempt: step it
        self._stretch_start_ms = now_ms
        if passes <= SCALAR_STRETCH_PASSES:
            return self._scalar_stretch(now_ms, passes, horizon_ms, until_ms)
        return self._vector_stretch(now_ms, passes, horizon_ms, until_ms)

    def _vector_stretch(self, now_ms: float, passes: int, horizon_ms: float, until_ms: float) -> array[float]:
        """``plan_stretch`` for a long run: priced with one vectorised perf-model call."""
        d, p = len(self.decoders), self.pass_idx
        horizon_ms = min(horizon_ms, until_ms)
        if horizon_ms != float("inf"):
            first_ctx = self.dec_ctx + self.ledger.tokens(p)
            first = self.perf.decode_pricer(d, self.tokens_per_step, self.capacity_tokens)(first_ctx)
            passes = min(passes, int((horizon_ms - now_ms) / first) + 2)  # passes only grow longer
        ctx = self.ledger.contexts(self.dec_ctx, p, passes)  # the batch's, after each pass
        times = self.perf.decode_times_ms(d, self.tokens_per_step, self.capacity_tokens, ctx)
        # Sequential sums from now, exactly as pass-by-pass stepping adds them.
        ends = np.empty(passes + 1)
        ends[0] = now_ms
        ends[1:] = times
        ends = np.add.accumulate(ends, out=ends)[1:]  # cumsum, minus its method's overhead
        if until_ms != float("inf"):
            ends = ends[: max(int(ends.searchsorted(until_ms, side="right")), 1)]
        return array("d", ends.tobytes())  # a copy of the buffer: no float objects made

    def _scalar_stretch(self, now_ms: float, passes: int, horizon_ms: float, until_ms: float) -> array[float]:
        """``plan_stretch`` for a short run: the same passes, priced one by one."""
        price = self.perf.decode_pricer(len(self.decoders), self.tokens_per_step, self.capacity_tokens)
        ends = array("d")
        end, ctx = now_ms, self.dec_ctx
        for tokens in self.ledger.increments(self.pass_idx, passes):
            ctx += tokens
            end += price(ctx)
            if end > until_ms and ends:
                break
            ends.append(end)
            if end >= horizon_ms:
                break  # the next pass would start at or after the next arrival
        return ends

    def stretch_blocks(self, passes: int) -> int:
        """Blocks the decoders take over the next ``passes`` decode-only passes."""
        return self.ledger.blocks_over(self.pass_idx, passes)

    def commit_stretch(self, ends: array[float]) -> list[Request]:
        """Apply the first ``len(ends)`` passes of the planned stretch."""
        k = len(ends)
        p, d, ledger = self.pass_idx, len(self.decoders), self.ledger
        blocks = ledger.blocks_over(p, k)
        tokens = ledger.tokens_over(p, k)
        self.pool.allocate_anon(blocks)
        self.reserved_blocks -= blocks
        self._note_peak()
        first, last = ends[0], ends[-1]
        self.pass_end_ms.append(first)
        self._decoder_gaps(first, d)
        if self._bursts is not None:
            self._count_bursts(d * k, tokens)
        if k > 1:
            self.collector.gaps(ends, d)
            self.pass_end_ms.extend(ends[1:])
        last_start = ends[-2] if k > 1 else self._stretch_start_ms
        self._last_start_ms, self._last_end_ms = last_start, last
        self.last_pass = PassRecord(0, 0, d, self.dec_ctx + tokens, last - last_start)
        self.dec_ctx += tokens
        self.pass_idx += k
        finished: list[Request] = []
        self._finish_decoders(p + k - 1, finished)
        return self._retire(finished, last)
