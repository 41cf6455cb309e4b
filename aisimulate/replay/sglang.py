"""SGLang's scheduler on the shared rank machinery.

Each pass is either an *extend* pass or a *decode* pass, never mixed:

* extend: waiting prompts (chunked ones first, then the queue in FIFO or longest-prefix order)
  are packed while the token budgets allow — ``max_prefill_tokens``, ``chunked_prefill_size``, and
  the free KV minus the output room promised to running requests, ``min(remaining output,
  clip_max_new_tokens) x new_token_ratio``; prompts that complete emit their first token and the
  running requests get no step;
* decode: every running request emits one token; when the KV cannot hold one more token each,
  the request with the fewest output tokens is retracted (recomputed later) and
  ``new_token_ratio`` resets. After every pass the ratio decays linearly towards its floor.

New requests reach the scheduler when it polls for them: after an extend pass or when idle at
once, but while it decodes only every ``scheduler_recv_interval`` decode passes (SGLang's
``SchedulerRecvSkipper``; 1 by default, a tuning that serving recipes raise to 10-30). An
arrival then waits for the next poll, and the arrivals of one interval prefill together. On a
disaggregated decode worker a hand-off waits for a poll too: SGLang's decode server takes the
request (and so preallocates its KV and lets the prefill side start) only when it polls; the
replay holds the landed KV until the next poll instead, the same wait in decode passes. A
decode worker streams the first token, which the prefill worker sampled, when it picks the KV up
(before its pass); that pass emits the second.
"""

from __future__ import annotations

from itertools import islice, takewhile
from typing import TYPE_CHECKING, Any

from aisimulate.replay.destination import DESTINATION
from aisimulate.replay.engine import Rank, chunk_totals
from aisimulate.replay.plan import EngineSpec
from aisimulate.replay.request import Request
from aisimulate.replay.scheduler import ceil_div
from aisimulate.replay.sglang_graphs import GraphedMlaPrefill
from aisimulate.replay.stamping import stamp

if TYPE_CHECKING:
    from array import array

LPM_MAX_WAITING = 128  # SGLang skips longest-prefix ordering for longer queues


class SglangRank(Rank):
    plans_when_starved = True  # its readiness check admits arrived KV (see Rank)
    # What an extend pass in SGLang's piecewise CUDA graph adds on an MLA model (set by the pool
    # builder; None: extend passes run eagerly, as priced).
    graphed_prefill: GraphedMlaPrefill | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        opts = self.spec.sglang
        self.ratio_init = 0.7 * opts.schedule_conservativeness
        self.ratio_min = 0.14 * self.ratio_init
        self.ratio_decay = (self.ratio_init - self.ratio_min) / 600
        self.new_token_ratio = self.ratio_init
        self._extending = False
        # Polling for new requests: decode passes since the last poll, the start of the latest
        # poll (requests enqueued later are not seen yet) and the end of the latest decode pass.
        self._recv_interval = opts.scheduler_recv_interval
        self._since_recv = 0
        self._received_ms = 0.0
        self._decode_end_ms = -1.0

    @staticmethod
    def decodes_exactly(spec: EngineSpec, *, exact: bool) -> bool:
        del spec  # a decode pass steps every running request: it never competes for a token budget
        return exact

    # ---- bookkeeping hooks ---------------------------------------------------------------
    def _promised_output(self) -> float:
        """Output room promised to running requests: sum of min(remaining, clip)."""
        return self.decoding.outputs_left(self, self.spec.sglang.clip_max_new_tokens)

    def _head_could_start(self) -> bool:
        return bool(self.waiting)

    def _promote_materialized(self, p: int, start_ms: float) -> None:
        """Arrived KV joins the running batch first thing in a pass (starting at ``start_ms``)
        that polled, while there is room. The prefill worker computed the prompt's whole KV and
        its first token, which streams at the pick-up, before any forward pass here
        (``_pick_up``)."""
        if self._since_recv:  # between polls
            return
        while self.materialized and self.num_running < self.spec.max_num_seqs:
            r = DESTINATION.next_admission(self, self.materialized.popleft())
            if r.max_output > 1:
                self._pick_up(r, start_ms)
            self._start_decoding(r, p)

    def _pick_up(self, r: Request, start_ms: float) -> None:
        """SGLang's decode worker appends the token the prefill worker sampled and streams it
        when it takes the transferred KV (``DecodeTransferQueue.pop_transferred``, then the
        prebuilt batch's output processing): r's first token comes out at ``start_ms`` and its
        first decode step here computes that token's KV and emits the second. A one-token
        request keeps the plain path (its decode pass emits its only token)."""
        stamp(r, start_ms, 1, self.collector)
        r.num_computed = r.prompt_len  # the first output token dangles until its step

    def _promote_for_stretch(self, p: int) -> bool:
        # Landed KV waits for a poll pass by pass, and a pass that picks it up is stepped: the
        # first tokens it streams carry that pass's start. Without a free slot it waits for a
        # completion, which ends the run anyway.
        del p
        full = self.num_running >= self.spec.max_num_seqs
        return not self.materialized or (full and not self._since_recv)

    # ---- the pass ------------------------------------------------------------------------
    def _receive(self, now_ms: float) -> None:
        """The poll at the start of a pass: a pass right after a decode pass counts one more;
        anything else (an extend pass, idle time, nothing left to decode) polls at once."""
        if self._recv_interval > 1 and self._decode_end_ms == now_ms and self.decoders:
            self._since_recv += 1
            if self._since_recv < self._recv_interval:
                return
        self._since_recv = 0
        self._received_ms = now_ms

    def begin_pass(self, now_ms: float) -> float:
        self._now = now_ms
        self._receive(now_ms)
        self._completing.clear()
        self.preempted_in_pass = False
        self._promote_materialized(self.pass_idx, now_ms)
        batch = self._extend_batch()
        self._extending = bool(batch)
        if batch:
            # The extend pass decodes only the prompts it completes (their first token); a
            # prefill worker's first token comes with the prefill itself.
            completers = [] if self.role == "prefill" else self._completing
            done_ctx = sum(r.num_computed for r in completers)
            tokens, requests, pairs, context = chunk_totals(batch)
            active = min(done_ctx, self.capacity_tokens)
            ms = self._price(tokens, requests, pairs, context, len(completers), done_ctx, active)
            graphed = self.graphed_prefill
            if graphed is not None and (extra := graphed.extra_ms(tokens, pairs)):
                ms = self._record(ms + extra, tokens, requests, len(completers), done_ctx)
            return ms
        if not self.decoders:
            return 0.0
        p = self.pass_idx
        self._retract_for(p)
        _, d, d_ctx = self.decoding.schedule(self, p, len(self.decoders))
        self._note_peak()
        return self._price(0, 0, 0.0, 0, d, d_ctx, min(d_ctx, self.capacity_tokens))

    def _retract_for(self, p: int) -> None:
        """Retract fewest-output requests until one more token each fits."""
        decoding = self.decoding
        while len(self.decoders) > 1 and decoding.step_blocks(self, p) > self.pool.available():
            victim = min(self.decoders.values(), key=lambda r: (decoding.generated(self, r), -r.admit_seq))
            self._preempt(victim, p)
            self.new_token_ratio = self.ratio_init

    def _ordered_waiting(self, limit: int) -> list[Request]:
        """The first ``limit`` waiting requests in scheduling order: an extend batch looks at
        no more (each one it looks at joins it, or ends it), and a prefill-bound queue holds
        thousands."""
        received = self._received_ms
        polled = takewhile(lambda r: r.enqueued_ms <= received, self.waiting)  # FIFO by enqueue
        if self.spec.sglang.schedule_policy == "lpm" and len(self.waiting) <= LPM_MAX_WAITING:
            waiting = list(polled)
            waiting.sort(key=lambda r: -self._prefix_hit(r)[0])  # stable: FIFO among equals
            return waiting[:limit]
        return list(islice(polled, limit))

    def _extend_batch(self) -> list[tuple[int, int, Request]]:
        opts, bs, pool = self.spec.sglang, self.block_size, self.pool
        if not self.prefilling and not self.waiting:
            return []
        slots = self.spec.max_num_seqs - len(self.decoders)
        rem_total = pool.available() * bs - self._promised_output() * self.new_token_ratio
        rem_input, rem_chunk = opts.max_prefill_tokens, opts.chunked_prefill_size
        batch: list[tuple[int, int, Request]] = []
        for r in [*self.prefilling, *self._ordered_waiting(max(slots, 0) + 1)]:
            if len(batch) >= slots:
                break
            fresh = r not in self.prefilling
            matched = run = 0
            done = r.num_computed
            if fresh:
                matched, _, run = self._prefix_hit(r)
                done = (matched * self.unit + run) * bs
            extend = r.seq_len - done
            chunk = extend if extend <= opts.chunked_prefill_size else (rem_chunk // bs) * bs
            if chunk <= 0:
                break
            charged = ceil_div(chunk, bs) * bs
            completes = done + chunk == r.seq_len
            reserve = min(r.max_output - r.generated, opts.clip_max_new_tokens) if completes else 0
            if charged + reserve >= rem_total or charged > rem_input or charged > rem_chunk:
                break
            cost = (
                self._admit_cost(r, matched, run, done + chunk) if fresh else self._growth(r, done + chunk)[3]
            )
            if cost > pool.available():
                self.new_token_ratio = self.ratio_init  # out of memory: stop and reset
                break
            if fresh:
                self._take(r, matched, run, done)
            self._grow(r, done + chunk)
            r.num_computed = done + chunk
            rem_total -= cost * bs + reserve
            rem_input -= charged
            rem_chunk -= charged
            batch.append((chunk, done, r))
            if r.num_computed == r.seq_len:
                self._completing.append(r)
            if rem_chunk <= 0:
                break
        return batch

    def _admit_cost(self, r: Request, matched: int, run: int, new_computed: int) -> int:
        """Available blocks admitting r with this hit and growing it to ``new_computed`` uses."""
        hits = sum(1 for key in r.prompt_keys[:matched] if key not in self.pool.active)
        total = ceil_div(new_computed, self.block_size)
        return hits * self.unit + max(total - matched * self.unit, 0)

    def _take(self, r: Request, matched: int, run: int, cached: int) -> None:
        """Move r from the queue into the running prefills, holding its cache hit."""
        self.waiting.remove(r)
        r.admit_seq = self._admissions
        self._admissions += 1
        self.prefilling.append(r)
        if cached:
            self._hold_hit(r, matched, run, cached)
        self.collector.admission(r, cached, self._now)

    def end_pass(self, end_ms: float) -> list[Request]:
        if self._extending:
            finished: list[Request] = []
            self._finish_prefills(self.pass_idx - 1, end_ms, finished)
            done = self._retire(finished, end_ms)
        else:
            done = super().end_pass(end_ms)
            self._decode_end_ms = end_ms
        self.new_token_ratio = max(self.ratio_min, self.new_token_ratio - self.ratio_decay)
        return done

    def _stretch_booked(self, ends: array[float], start_ms: float) -> None:
        # A stretch starts with an empty queue and ends where an arrival cut it, so its polls
        # find nothing; only their count carries over. The ratio decays once a pass.
        polls = len(ends) if self._decode_end_ms == start_ms else len(ends) - 1
        if self._decode_end_ms != start_ms:
            self._since_recv = 0
        self._since_recv = (self._since_recv + polls) % self._recv_interval
        self._decode_end_ms = ends[-1]
        self.new_token_ratio = max(self.ratio_min, self.new_token_ratio - self.ratio_decay * len(ends))
